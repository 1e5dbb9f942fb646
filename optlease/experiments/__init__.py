"""Multi-configuration sweeps: expand a multi-configuration, run its configurations locally or on a Dask cluster,
resume a sweep that stopped."""
