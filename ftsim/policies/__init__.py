"""Fault-tolerance policies: one module per strategy, the base contract (:mod:`.base`), typed
model events (:mod:`.events`) and the registry of kinds, names and colours (:mod:`.registry`).

This package's ``__init__`` imports nothing, so that figures can read the registry without
loading the simulator; :mod:`ftsim.policies.catalog` loads every policy.
"""
