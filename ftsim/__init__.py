"""ftsim: a discrete-event simulator of fault-tolerance strategies for recommendation-model
training (DLRM-style embedding parameter servers and data-parallel trainers).

The Python API (:mod:`ftsim.api`, documented in ``docs/python_api.md``)::

    import ftsim
    results = ftsim.sweep("scenarios/prod50h.yaml", {"policies.*.interval": ["1 h", "4 h"]})
    results.summary  # a pandas DataFrame

Its names are imported on first use, so ``import ftsim`` stays cheap (no pandas, SimPy or
pydantic until a scenario is loaded).
"""

__version__ = "0.1.0"

API = ("load_scenario", "run", "sweep", "load", "Results")
"""The public names of :mod:`ftsim.api`, exported here."""

__all__ = [*API, "__version__"]


def __getattr__(name: str):
    if name in API:
        from ftsim import api

        return getattr(api, name)
    raise AttributeError(f"module 'ftsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
