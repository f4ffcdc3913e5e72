"""ftsim: discrete-event simulator of fault-tolerance strategies for recommendation-model training."""

__version__ = "0.1.0"
