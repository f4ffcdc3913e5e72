"""ftsim: a discrete-event simulator of fault-tolerance strategies for recommendation-model
training (DLRM-style embedding parameter servers and data-parallel trainers)."""

__version__ = "0.1.0"
