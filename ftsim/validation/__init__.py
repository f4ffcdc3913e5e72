"""Validation of the simulator against closed forms, exactness and independent oracles."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftsim.experiments.prepare import Prepared
    from ftsim.sim.engine import Simulation


def finished_runs(prepared: Prepared, reps: int) -> list[Simulation]:
    """Replications ``0 .. reps-1`` of one prepared policy, run to the end.

    The checks read rows and wall times only, so the runs record neither a timeline nor
    model events, and run with the collector tuned for a loop of replications
    (:func:`~ftsim.experiments.runner.replication_gc`): the same rows as a plain
    ``prepared.replicate(rep).run()``, in less time (tested)."""
    from ftsim.experiments.runner import replication_gc

    with replication_gc():
        return [
            prepared.replicate(rep, timeline=False, model_events=False).run() for rep in range(reps)
        ]
