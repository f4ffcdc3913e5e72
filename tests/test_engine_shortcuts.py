"""The engine's shortcuts are exact: a re-plan (``Simulation.replan``) gives what an
interrupt of the job gives (the way the engine re-planned before), event for event, without
the exception; a replication that records neither its timeline nor its model events gives
the same result row; the garbage collector's setting for a loop of replications is undone
after it."""

import gc

import pytest

from ftsim.experiments.prepare import prepare, prepare_all
from ftsim.experiments.runner import YOUNG_COLLECTION, replication_gc, simulate_reps
from ftsim.sim.engine import Replan, Simulation
from ftsim.sim.failures import Failure, FailureDraws
from tests.conftest import scenario


class ReplanByInterrupt(Simulation):
    """The reference: a re-plan is an interrupt of the job, caught by its loop."""

    def replan(self) -> None:
        if self._computing is not None and self._job is not None and self._job.is_alive:
            self._job.interrupt(Replan())


class CountingReplans(Simulation):
    """The engine, counting the re-plans that find the job computing."""

    replans = 0

    def replan(self) -> None:
        self.replans += self._computing is not None
        super().replan()


def outcome(sim: Simulation) -> tuple:
    """Everything a replication gives, and how many SimPy events it scheduled."""
    return (sim.row(), sim.timeline_rows(), sim.model_events, next(sim.env._eid))


def replicate(kind: type[Simulation], s, index: int, rep: int, storm=None) -> Simulation:
    """Replication ``rep`` of policy ``index`` of ``s`` on engine ``kind``; ``storm(sim)``:
    a background activity started with it."""
    plan = prepare(s, index).plan
    sim = kind(s, rep, plan.runtime(), plan.layout, failures=FailureDraws(s, rep))
    if storm is not None:
        sim.background(storm(sim))
    return sim.run()


REPLANNING = [  # policies whose background activities change the training rate
    ("prod50h", (), 4),  # ECRM: degraded reads, rebuild ranges, range switches
    ("composed", (), 2),  # ECRM as a part of a composed policy
    ("smoke", (), 2),  # CheckFreq persists that slow training
]


@pytest.mark.parametrize(("name", "overrides", "index"), REPLANNING)
def test_a_replan_gives_what_an_interrupt_gives(name, overrides, index):
    s = scenario(name, "trainer.enabled=false", *overrides)
    replans = 0
    for rep in range(4):
        sim = replicate(CountingReplans, s, index, rep)
        assert outcome(sim) == outcome(replicate(ReplanByInterrupt, s, index, rep))
        replans += sim.replans
    assert replans > 20


def failure_then_replan(sim):
    """A failure and a re-plan at one instant, the failure's interrupt first: the job has
    left its compute phase when the re-plan reaches it, which then interrupts recovery."""
    yield sim.timeout(3600.0)
    sim._job.interrupt(Failure(sim.now, (0,), "test", 120.0))
    sim.replan()


def replan_mid_recovery() -> tuple[tuple, tuple]:
    s = scenario("smoke", "trainer.enabled=false", "failures=[]")
    new = replicate(Simulation, s, 0, 0, failure_then_replan)
    old = replicate(ReplanByInterrupt, s, 0, 0, failure_then_replan)
    return outcome(new), outcome(old)


def test_a_replan_that_finds_the_job_recovering_interrupts_it():
    new, old = replan_mid_recovery()
    assert new == old
    assert [p["kind"] for p in new[1]].count("reschedule") == 1  # restarted, same end


def test_the_replan_check_fails_when_a_replan_always_resumes_the_job(monkeypatch):
    def resume(self, event):  # the bug: the value even when the job no longer computes
        job = self._job
        job._target.callbacks.remove(job._resume)
        job._resume(event)

    monkeypatch.setattr(Simulation, "_deliver_replan", resume)
    new, old = replan_mid_recovery()
    assert new != old


def test_the_replan_check_fails_when_a_replan_is_lost(monkeypatch):
    monkeypatch.setattr(Simulation, "_deliver_replan", lambda self, event: None)
    s = scenario("prod50h", "trainer.enabled=false")
    new, old = replicate(Simulation, s, 4, 0), replicate(ReplanByInterrupt, s, 4, 0)
    assert outcome(new) != outcome(old)


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
