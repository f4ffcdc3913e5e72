"""Co-simulation memory: a finished replication is freed at once, not at the next full GC."""

import gc
import weakref

import pytest

from ftsim.cosim import replay
from ftsim.experiments.runner import simulate
from ftsim.trainer import Trainer
from tests.conftest import scenario
from tests.test_cosim import SMALL_TRAINER

# Every kind of trainer side: full (never trained), cpr (fork), cpr_mfu (row counts),
# cpr_ssu (a sampler listening to updates), ecrm (a parity code listening to updates) and
# swift (a trainer failure: undo, so it trains with an update log and an undoer listening).
EVERY_SIDE = (
    SMALL_TRAINER,
    "failures=[{kind: scheduled, times: [14 h, 31 h], nodes: [[emb_ps1, emb_ps5], [trainer3]]}]",
    "trainer.optimizer={dense: {kind: momentum}, sparse: {kind: momentum}}",
    # CPR's kinds copy a failed trainer from a replica: rolling back on it, they would plan
    # full recovery (its rollbacks cost more than partial recovery saves) and fork nothing
    *(f"policies.{i}.trainer_failure=replica" for i in (1, 2, 3)),
)


@pytest.mark.parametrize("share_prefix", [True, False])
def test_trainers_of_a_finished_replication_are_freed_without_the_cycle_collector(
    monkeypatch, share_prefix
):
    """With the cycle collector off, only reference counting frees objects: any reference
    cycle through a trainer (listener → mechanism → trainer, side ↔ model) would keep the
    replication's trainers, checkpoints and batches alive after its columns are computed."""
    created = []

    class Tracked(Trainer):
        def __init__(self, cfg, data=None, workspace=None):
            super().__init__(cfg, data, workspace)
            created.append(weakref.ref(self))

    monkeypatch.setattr(replay, "Trainer", Tracked)
    s = scenario("prod50h", *EVERY_SIDE, f"trainer.share_prefix={str(share_prefix).lower()}")
    sims = [simulate(s, i, 0) for i in range(len(s.policies))]
    gc.collect()
    gc.disable()
    try:
        columns = replay.cosimulate(s, sims)
        alive = sum(ref() is not None for ref in created)
    finally:
        gc.enable()
    assert len(columns) == 6 and len(created) >= 5
    assert alive == 0
