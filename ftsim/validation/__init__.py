"""Validation of the simulator against closed forms, exactness and independent oracles."""
