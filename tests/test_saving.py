"""CheckFreq's snapshot-and-persist for every policy that writes full checkpoints."""

import pytest

from ftsim.cosim.replay import cosimulate
from ftsim.experiments.runner import simulate
from ftsim.policies.events import Commit, RestoreShards, Snapshot
from ftsim.scenario.loader import load_scenario
from tests.conftest import SCENARIOS
from tests.test_cosim import SETUP

CPR = 1  # prod50h's policies: full, cpr, cpr_mfu, cpr_ssu, ecrm, swift
CHECKFREQ = [f"policies.{i}.save_mode=checkfreq" for i in (0, 1, 2, 3)]


def _prod50h(*extra):
    return load_scenario(SCENARIOS / "prod50h.yaml", ["trainer.enabled=false", *extra])


def test_the_snapshot_copies_at_half_the_memory_bandwidth_unless_given():
    """A snapshot reads and writes every byte: by default half the node's memory bandwidth;
    an explicit ``snapshot_bandwidth`` wins."""
    slow = _prod50h(*CHECKFREQ, "cluster.memory_bandwidth=20 GB/s")
    sim = simulate(slow, 0, 0)
    assert sim.policy.writer.snapshot_s == pytest.approx(sim.layout.shard_bytes / 10e9)
    given = _prod50h(*CHECKFREQ, "policies.0.snapshot_bandwidth=4 GB/s")
    assert simulate(given, 0, 0).policy.writer.snapshot_Bps == 4e9


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_checkfreq_stalls_for_the_snapshot_and_persists_behind(index):
    sync = simulate(_prod50h(), index, 0)
    checkfreq = simulate(_prod50h(*CHECKFREQ), index, 0)
    snapshot_s = checkfreq.policy.writer.snapshot_s
    # the largest node holds a 24.6 GB shard: 0.447 s at the default copy rate, half of
    # the default 110 GB/s memory bandwidth (read and written), against 110.7 s to write
    assert snapshot_s == pytest.approx(checkfreq.layout.shard_bytes / 55e9)
    persists = [p for p in checkfreq.timeline if p.category == "persist"]
    assert len(persists) >= checkfreq.policy.n_checkpoints > 0
    full_saves = sum(p.detail == "snapshot" for p in checkfreq.timeline)
    assert full_saves == len(persists)
    assert checkfreq.row()["save_h"] < sync.row()["save_h"]


def test_a_failure_during_the_persist_restores_the_previous_checkpoint():
    """CPR checkpoints every 10 h of compute; a failure while the 20-h checkpoint is being
    persisted must restore the failed shards from the 10-h one, and lose their updates
    since then."""

    def failing(at_h: float):
        failure = f"failures=[{{kind: scheduled, times: [{at_h} h], nodes: [[emb_ps2]]}}]"
        return _prod50h(*CHECKFREQ, *SETUP[2:], failure)

    late = simulate(failing(49.9), CPR, 0)  # the same run up to 49.9 h
    second = [p for p in late.timeline if p.category == "persist"][1]
    sim = simulate(failing((second.start_s + second.end_s) / 2 / 3600), CPR, 0)
    [restore] = [e for e in sim.model_events if isinstance(e, RestoreShards)]
    snapshots = [e.key for e in sim.model_events if isinstance(e, Snapshot)]
    commits = [e.key for e in sim.model_events if isinstance(e, Commit)]
    assert snapshots[:2] == [36000.0, 72000.0] and 72000.0 not in commits[:1]
    assert restore.key == 36000.0 and restore.shards == (2,)
    row = sim.row()
    lost_s = restore.progress_s - 36000.0  # of one shard of 18, over the 50 h
    assert row["pls_model"] == pytest.approx(lost_s / (50 * 3600 * 18))


@pytest.mark.parametrize(
    ("node", "trainer_failure", "kept"),
    [
        ("trainer3", "replica", True),  # copied from a replica: the PS persist goes on
        ("trainer0", "replica", False),  # it writes the dense copy
        ("emb_ps2", "replica", False),  # its shard
        ("trainer3", "full", False),  # everyone rolls back
    ],
)
def test_which_failures_lose_a_cpr_persist(node, trainer_failure, kept):
    """CPR's 20-h checkpoint is being persisted when ``node`` fails (partial recovery kept:
    with a trainer failure that rolls back, CPR would plan full recovery instead)."""
    policy = (f"policies.{CPR}.trainer_failure={trainer_failure}", *SETUP[2:])  # 10-h interval
    policy += (f"policies.{CPR}.fallback=false",)
    free = simulate(_prod50h(*CHECKFREQ, *policy, "failures=[]"), CPR, 0)
    second = [p for p in free.timeline if p.category == "persist"][1]
    at_s = (second.start_s + second.end_s) / 2
    failure = f"failures=[{{kind: scheduled, times: [{at_s!r} s], nodes: [[{node}]]}}]"
    sim = simulate(_prod50h(*CHECKFREQ, *policy, failure), CPR, 0)
    [persist] = [p for p in sim.timeline if p.category == "persist" and p.start_s == second.start_s]
    assert persist.end_s == (second.end_s if kept else at_s)  # committed, or cut short
    commits = [e for e in sim.model_events if isinstance(e, Commit)]
    assert sim.row()["n_checkpoints"] == len(commits)


@pytest.mark.parametrize(
    ("node", "kept"), [("trainer3", True), ("trainer0", False), ("emb_ps2", False)]
)
def test_which_failures_lose_an_ecrm_persist(node, kept):
    """ECRM's 9-h fall-back checkpoint is being persisted when ``node`` fails: a trainer
    copied from a replica leaves it running; trainer 0 (the dense copy) or a PS (its
    in-memory snapshot, even when the code decodes its rows) cut it short."""
    ecrm = "policies.4.save_mode=checkfreq"
    free = simulate(_prod50h(ecrm, "failures=[]"), 4, 0)
    first = [p for p in free.timeline if p.category == "persist"][0]
    at_s = (first.start_s + first.end_s) / 2
    failure = f"failures=[{{kind: scheduled, times: [{at_s!r} s], nodes: [[{node}]]}}]"
    sim = simulate(_prod50h(ecrm, failure), 4, 0)
    [persist] = [p for p in sim.timeline if p.category == "persist" and p.start_s == first.start_s]
    assert persist.end_s == (first.end_s if kept else at_s)
    commits = [e for e in sim.model_events if isinstance(e, Commit)]
    assert sim.row()["n_checkpoints"] == len(commits)


def test_on_the_trainer_checkfreq_cpr_keeps_what_was_persisted():
    """Snapshot and Commit events on the real model: sharing the failure-free prefix gives
    the same columns as training every policy alone, and partial recovery loses updates."""
    shared = load_scenario(SCENARIOS / "prod50h.yaml", [*SETUP, *CHECKFREQ])
    alone = load_scenario(
        SCENARIOS / "prod50h.yaml", [*SETUP, *CHECKFREQ, "trainer.share_prefix=false"]
    )
    a = cosimulate(shared, [simulate(shared, i, 0) for i in range(4)])
    b = cosimulate(alone, [simulate(alone, i, 0) for i in range(4)])
    own = "trainer_own_steps"  # the only column sharing changes: the steps trained alone
    assert [{**c, own: 0} for c in a] == [{**c, own: 0} for c in b]
    assert all(c[own] <= d[own] for c, d in zip(a, b, strict=True))
    assert a[0]["pls_measured"] == 0 and all(cols["pls_measured"] > 0 for cols in a[1:])


def test_mfu_counts_restart_from_the_snapshot_that_was_committed():
    """Under CheckFreq, the uses between a snapshot and its commit are not in storage: MFU's
    counters restart from the snapshot's counts (a sync save restarts them from now)."""
    from types import SimpleNamespace

    import numpy as np

    from ftsim.policies.cpr import MfuSide
    from ftsim.policies.events import Checkpoint, Commit, Snapshot

    counts = np.array([3, 0, 7], dtype=np.int64)
    trainer = SimpleNamespace(mfu=SimpleNamespace(counts=counts))
    model = SimpleNamespace(partials=[], saved_lookups=counts.copy(), pending_saves={})
    model.side = MfuSide(_prod50h().policies[2], model)
    model.side.attach(trainer, own=True)
    Snapshot(1.0, key=1.0).apply(model, trainer)
    counts += [5, 1, 0]  # used after the snapshot, before the commit
    Commit(2.0, key=1.0).apply(model, trainer)
    assert model.side.reset.tolist() == [3, 0, 7]
    Checkpoint(3.0, key=3.0).apply(model, trainer)
    assert model.side.reset.tolist() == [8, 1, 7]


def test_a_commit_is_recorded_at_the_progress_when_its_persist_ends():
    """The persist ends in the middle of a compute phase: its Commit is recorded at the
    progress of that instant (the snapshot's plus the persist's duration, training at full
    speed), not at the progress the compute phase started from."""
    sim = simulate(_prod50h(*CHECKFREQ, "failures=[]", "policies.0.interval=5 h"), 0, 0)
    events = sim.model_events
    snapshots = {e.key: e.progress_s for e in events if isinstance(e, Snapshot)}
    commits = [e for e in events if isinstance(e, Commit)]
    persists = [p for p in sim.timeline if p.category == "persist"]
    assert len(commits) == len(persists) == len(snapshots) > 0
    for commit, persist in zip(commits, persists, strict=True):
        duration = persist.end_s - persist.start_s
        assert commit.progress_s == pytest.approx(snapshots[commit.key] + duration, rel=1e-12)
