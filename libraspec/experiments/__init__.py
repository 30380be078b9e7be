"""Experiments: the decode driver, benchmarks, sweeps and the report."""
