"""The engine's shortcuts are exact: a replication that records neither its timeline nor
its model events gives the same result row; the garbage collector's setting for a loop of
replications is undone after it."""

import gc

import pytest

from ftsim.experiments.prepare import prepare, prepare_all
from ftsim.experiments.runner import YOUNG_COLLECTION, replication_gc, simulate_reps
from ftsim.sim.engine import Simulation
from tests.conftest import scenario


def rows_unrecorded(s, reps: range) -> list[tuple[dict, dict]]:
    """(row recording everything, row recording neither timeline nor model events) of each
    policy of ``s`` in replications ``reps``."""
    pairs = []
    for policy in prepare_all(s, list(range(len(s.policies)))):
        for rep in reps:
            whole = policy.replicate(rep).run()
            bare = policy.replicate(rep, timeline=False, model_events=False).run()
            assert bare.timeline is None and bare.model_events is None
            assert whole.timeline and whole.model_events
            pairs.append((whole.row(), bare.row()))
    return pairs


@pytest.mark.parametrize("name", ["composed", "checknrun", "smoke", "swift_logging"])
def test_a_replication_without_its_records_gives_the_same_row(name):
    for whole, bare in rows_unrecorded(scenario(name, "trainer.enabled=false"), range(3)):
        assert bare == whole


def test_the_row_check_fails_when_an_unrecorded_phase_is_not_charged(monkeypatch):
    charge = Simulation._charge

    def recorded_only(self, category, start, *args):  # the bug: charging tied to recording
        if self.timeline is not None:
            charge(self, category, start, *args)

    monkeypatch.setattr(Simulation, "_charge", recorded_only)
    pairs = rows_unrecorded(scenario("smoke", "trainer.enabled=false"), range(1))
    assert any(bare != whole for whole, bare in pairs)


def test_a_run_records_the_timeline_of_its_timeline_replication_only():
    s = scenario("smoke", "trainer.enabled=false")
    rows, timelines = simulate_reps(s, [0, 2], range(3), timeline_rep=1)
    assert all(timeline and {r["rep"] for r in timeline} == {1} for timeline in timelines)
    sim = prepare(s, 0).replicate(1, timeline=False).run()
    with pytest.raises(ValueError, match="replication 1 was simulated without its timeline"):
        sim.timeline_rows()


def collector_state() -> tuple:
    return gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()


def test_the_collector_is_tuned_while_replications_run_and_restored_after():
    before = collector_state()
    with replication_gc():
        assert gc.get_threshold()[0] == YOUNG_COLLECTION and gc.get_freeze_count() > 0
        with replication_gc():  # nested (or another thread's): one setting
            assert gc.get_threshold()[0] == YOUNG_COLLECTION
        assert gc.get_threshold()[0] == YOUNG_COLLECTION
    assert collector_state() == before
    with pytest.raises(KeyError), replication_gc():
        raise KeyError("a failing replication")
    assert collector_state() == before


def test_a_callers_frozen_objects_stay_frozen():
    gc.freeze()
    try:
        with replication_gc():
            assert gc.get_threshold()[0] == YOUNG_COLLECTION
        assert gc.get_freeze_count() > 0  # not given back by the loop (frozen ones may die)
    finally:
        gc.unfreeze()


def test_the_collector_check_fails_when_the_frozen_objects_stay_frozen(monkeypatch):
    before = collector_state()
    monkeypatch.setattr(gc, "unfreeze", lambda: None)  # the bug: never given back
    with replication_gc():
        pass
    try:
        assert collector_state() != before
    finally:
        monkeypatch.undo()
        gc.unfreeze()
