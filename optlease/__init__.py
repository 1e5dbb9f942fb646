"""optlease: a lease manager for clusters of virtual machines."""
