"""The job's re-plan (``Simulation.replan``) is exact: it gives what an interrupt of the job
gives (the way the engine re-planned before), event for event, without the exception."""

import pytest

from ftsim.experiments.prepare import prepare
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


def test_the_replan_check_fails_when_a_replanned_phase_counts_as_done(monkeypatch):
    compute = Simulation._compute

    def done(self, target_s):  # the bug: the job takes a re-plan for the phase's end
        yield from compute(self, target_s)
        return False

    monkeypatch.setattr(Simulation, "_compute", done)
    s = scenario("prod50h", "trainer.enabled=false")
    new, old = replicate(Simulation, s, 4, 0), replicate(ReplanByInterrupt, s, 4, 0)
    assert outcome(new) != outcome(old)
