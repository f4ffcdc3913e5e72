"""(f) The time model's PLS against overhead, for a timing-only sweep of a policy knob other
than the interval (CPR-MFU's ``fraction``, ECRM's ``k``, SWIFT's ``log_budget``): the
trade-off the knob makes when no model is trained, each policy's settings joined in the
sweep's order (as :mod:`ftsim.plots.tradeoff` draws the measured one); a policy without
``pls_model`` (full checkpointing) loses no updates and is drawn at 0. A sweep of an
interval has ``overhead_vs_interval``; a trained sweep, ``accuracy_vs_overhead``.

A new user's sweep of a policy's ``fraction`` without the trainer had no figure of it."""

from __future__ import annotations

from ftsim.plots import tradeoff
from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import Output

NAME = "pls_vs_overhead"


def plot(data: RunData, out: Output, point: int | None = None):
    if data.has("logloss_delta"):
        raise Skip("the runs trained the model: accuracy_vs_overhead draws the measured trade-off")
    if not any(d.policy_knob and not d.sets_interval for d in data.dimensions):
        raise Skip(
            "needs a timing-only sweep of a policy knob other than the interval "
            "(e.g. --grid 'policies.2.fraction=…'; an interval's: overhead_vs_interval)"
        )
    if not data.has("pls_model"):
        raise Skip("no pls_model column (no policy of the sweep loses updates)")
    # a policy without pls_model (full) loses no updates: PLS 0, as advise counts it
    label = "PLS (time model's pls_model)"
    return tradeoff.draw(data, out, "pls_model", label, NAME, missing=0.0, floor=0.0)
