"""The SimPy job model: accounting identity, recovery semantics, interrupts in recovery."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftsim.sim.accounting import CATEGORIES
from ftsim.sim.engine import simulate
from tests.conftest import scenario

IDENTITY_TOL = 1e-9


def _identity_gap(row) -> float:
    return row["ideal_h"] + sum(row[f"{c}_h"] for c in CATEGORIES) - row["wall_h"]


def test_no_failures_costs_exactly_the_checkpoints():
    s = scenario("smoke", "failures=[]", "policies.0.interval=20 min")
    sim = simulate(s, 0, 0)
    row = sim.row()
    assert row["n_failures"] == 0
    # 4 h of work, a checkpoint every 20 min except at the very end: 11 checkpoints.
    assert row["n_checkpoints"] == 11
    save_s = sim.policy.save_s
    assert sim.wall_s == pytest.approx(4 * 3600 + 11 * save_s, rel=1e-12)
    assert row["lost_h"] == pytest.approx(0, abs=1e-12)


def test_no_failures_and_daly_interval_means_no_checkpoints():
    s = scenario("smoke", "failures=[]")
    row = simulate(s, 1, 0).row()
    assert row["n_checkpoints"] == 0 and row["wall_h"] == row["ideal_h"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mtbf_min=st.floats(5, 600),
    interval_min=st.floats(1, 120),
    mode=st.sampled_from(["sync", "checkfreq"]),
    slowdown=st.floats(0, 0.5),
    resched=st.sampled_from(["constant", "exponential", "lognormal"]),
    write_gbps=st.floats(0.05, 20),
    rep=st.integers(0, 1000),
)
def test_accounting_identity_holds(
    mtbf_min, interval_min, mode, slowdown, resched, write_gbps, rep
):
    s = scenario(
        "smoke",
        f"failures.0.job_mtbf={mtbf_min} min",
        f"policies.0.interval={interval_min} min",
        f"policies.0.save_mode={mode}",
        f"policies.0.persist_slowdown={slowdown}",
        f"cluster.reschedule={{kind: {resched}, mean: 3 min, cv: 0.5}}",
        f"cluster.storage.write_bandwidth={write_gbps} GB/s",
    )
    row = simulate(s, 0, rep).row()
    if not row["completed"]:  # failures too frequent to finish within 100 × ideal
        assert row["overhead_frac"] == math.inf and row["wall_h"] == pytest.approx(400)
        return
    assert abs(_identity_gap(row)) <= IDENTITY_TOL * row["wall_h"]
    assert all(row[f"{c}_h"] >= -IDENTITY_TOL for c in CATEGORIES)
    assert row["overhead_frac"] == pytest.approx((row["wall_h"] - 4) / 4)


def test_failure_during_recovery_restarts_it():
    # Failure at 1 h; reschedule takes 10 min; a second failure 5 min into it means the
    # replacement is ready only 10 min after the second failure.
    s = scenario(
        "smoke",
        "failures.0={kind: scheduled, times: [1 h, 65 min], role: any}",
        "cluster.reschedule={kind: constant, mean: 10 min}",
        "policies.0.interval=30 min",
    )
    sim = simulate(s, 0, 0)
    row = sim.row()
    assert row["n_failures"] == 2
    assert row["reschedule_h"] == pytest.approx(15 / 60, rel=1e-9)
    assert row["load_h"] == pytest.approx(sim.policy.load_s / 3600, rel=1e-9)
    kinds = [p.kind for p in sim.timeline]
    assert kinds.count("reschedule") == 2 and kinds.count("load") == 1


def test_failure_during_load_reloads():
    s = scenario(
        "smoke",
        "failures.0={kind: scheduled, times: [1 h, 3610.3 s], role: any}",
        "cluster.reschedule={kind: constant, mean: 0 s}",
        "cluster.storage.read_bandwidth=10 MB/s",
    )
    sim = simulate(s, 0, 0)
    load_s = sim.policy.load_s
    assert load_s > 10.3
    # 10.3 s of a load are wasted, then a whole load.
    assert sim.breakdown_s()["load"] == pytest.approx(10.3 + load_s, rel=1e-9)


def test_lost_work_is_the_compute_since_the_last_checkpoint():
    s = scenario(
        "smoke",
        "failures.0={kind: scheduled, times: [50 min], role: any}",
        "cluster.reschedule={kind: constant, mean: 1 min}",
        "policies.0.interval=30 min",
    )
    sim = simulate(s, 0, 0)
    save_s = sim.policy.save_s
    # Checkpoint at 30 min of compute (wall 30 min + δ); failure at wall 50 min.
    assert sim.breakdown_s()["lost"] == pytest.approx(50 * 60 - 30 * 60 - save_s, rel=1e-9)


def test_failure_during_a_save_loses_that_checkpoint():
    s = scenario("smoke", "cluster.storage.write_bandwidth=10 MB/s", "policies.0.interval=30 min")
    sim0 = simulate(
        scenario(
            "smoke",
            "failures=[]",
            "cluster.storage.write_bandwidth=10 MB/s",
            "policies.0.interval=30 min",
        ),
        0,
        0,
    )
    save_s = sim0.policy.save_s  # 2.6e9 B / 10 MB/s = 258 s
    t_fail = 30 * 60 + save_s / 2
    s = scenario(
        "smoke",
        f"failures.0={{kind: scheduled, times: [{t_fail} s], role: any}}",
        "cluster.reschedule={kind: constant, mean: 0 s}",
        "cluster.storage.write_bandwidth=10 MB/s",
        "policies.0.interval=30 min",
    )
    sim = simulate(s, 0, 0)
    assert sim.breakdown_s()["lost"] == pytest.approx(30 * 60, rel=1e-9)
    assert sim.policy.n_checkpoints == 7  # the interrupted one is redone


def test_checkfreq_persist_interrupted_by_failure_is_not_committed():
    s = scenario(
        "smoke",
        "failures.0={kind: scheduled, times: [1810 s], role: any}",
        "cluster.reschedule={kind: constant, mean: 0 s}",
        "policies.0.save_mode=checkfreq",
        "policies.0.interval=30 min",
        "cluster.storage.write_bandwidth=10 MB/s",
    )
    sim = simulate(s, 0, 0)
    snapshot_s, save_s = sim.policy.snapshot_s, sim.policy.save_s
    assert 1800 + snapshot_s + save_s > 1810  # the failure hits while persisting
    assert sim.breakdown_s()["lost"] == pytest.approx(1810 - snapshot_s, rel=1e-9)


def test_checkfreq_stalls_less_than_sync():
    sync = simulate(scenario("smoke", "failures=[]"), 0, 0).row()
    cf = simulate(scenario("smoke", "failures=[]", "policies.0.save_mode=checkfreq"), 0, 0).row()
    assert cf["save_h"] < sync["save_h"] / 10


def test_more_failures_cost_more():
    overheads = []
    for mtbf in ("4 h", "1 h", "15 min"):
        s = scenario("smoke", f"failures.0.job_mtbf={mtbf}")
        rows = [simulate(s, 0, rep).row() for rep in range(30)]
        overheads.append(sum(r["overhead_frac"] for r in rows) / len(rows))
    assert overheads[0] < overheads[1] < overheads[2]


def test_common_random_numbers_across_policies():
    s = scenario("smoke")
    times = [[f.time_s for f in simulate(s, i, 3).failures_seen] for i in range(3)]
    shortest = min(len(t) for t in times)
    assert shortest > 0
    assert all(t[:shortest] == times[0][:shortest] for t in times)


def test_cost_grows_with_events_not_iterations():
    fast = simulate(scenario("prod50h", "job.iteration_time=1 ms"), 0, 0)
    slow = simulate(scenario("prod50h", "job.iteration_time=1 s"), 0, 0)
    # The same number of SimPy events: a 1000x longer iteration changes nothing.
    assert next(fast.env._eid) == next(slow.env._eid)
    assert [p.kind for p in fast.timeline] == [p.kind for p in slow.timeline]
    assert math.isclose(fast.wall_s, slow.wall_s)
