"""Experiments: replications, sweeps, executors, the run store, output and statistics."""
