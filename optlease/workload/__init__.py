"""Synthetic workloads for experiments: optlease generate-workload."""
