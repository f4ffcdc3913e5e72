"""Bounds of the trainer's configuration that the time model shares, in a module of their own:
the row-popularity model (:mod:`ftsim.sim.popularity`) bounds its exponent as the trainer's
data does, without importing the trainer's config (a timing-only scenario never needs it)."""

MAX_ZIPF_EXPONENT = 10.0
"""Largest power-law exponent of row popularity accepted. Measured exponents of recommendation
data are about 0.5–1.5; at 10 the first row of a table already takes 99.9% of its lookups,
and far above it a table's least popular row has a probability below the smallest float."""
