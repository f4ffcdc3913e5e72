"""ftsim: a discrete-event simulator of fault-tolerance strategies for recommendation-model
training (DLRM-style embedding parameter servers and data-parallel trainers).

The Python API (:mod:`ftsim.api`, documented in ``docs/python_api.md``)::

    import ftsim
    results = ftsim.sweep("scenarios/prod50h.yaml", {"policies.*.interval": ["1 h", "4 h"]})
    results.summary  # a pandas DataFrame
    advice = ftsim.advise("scenarios/prod50h.yaml", max_pls=0.05, reps=5)
    print(advice.text())

Its names are imported on first use, so ``import ftsim`` stays cheap (no pandas, SimPy or
pydantic until a scenario is loaded).
"""

__version__ = "0.1.0"

API = ("load_scenario", "run", "sweep", "advise", "load", "Results")
"""The public names of :mod:`ftsim.api`, exported here."""
WARNINGS = ("Notice",)
"""The warning class of decisions taken for the user (:mod:`ftsim.notices`), exported
here so that a session can filter them: ``warnings.simplefilter("ignore", ftsim.Notice)``."""

__all__ = [*API, *WARNINGS, "__version__"]


def __getattr__(name: str):
    if name in API:
        from ftsim import api

        return getattr(api, name)
    if name in WARNINGS:
        from ftsim import notices

        return getattr(notices, name)
    raise AttributeError(f"module 'ftsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API, *WARNINGS})
