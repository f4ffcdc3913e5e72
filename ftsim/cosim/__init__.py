"""Co-simulation: a policy's model events replayed on the embedded NumPy trainer."""
