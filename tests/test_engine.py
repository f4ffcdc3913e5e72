"""The SimPy job model: accounting identity, recovery semantics, interrupts in recovery."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftsim.experiments.runner import simulate
from ftsim.policies.catalog import policy_params
from ftsim.policies.cpr import Cpr
from ftsim.sim.accounting import CATEGORIES
from ftsim.sim.cluster import transfer_time_s
from ftsim.sim.engine import Simulation
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
    save_s = sim.policy.plan.save_s
    assert sim.wall_s == pytest.approx(4 * 3600 + 11 * save_s, rel=1e-12)
    assert row["lost_h"] == pytest.approx(0, abs=1e-12)


def test_no_failures_and_daly_interval_means_no_checkpoints():
    s = scenario("smoke", "failures=[]")
    row = simulate(s, 1, 0).row()
    assert row["n_checkpoints"] == 0 and row["wall_h"] == row["ideal_h"]


def assert_accounting(row) -> None:
    """The accounting identity and non-negative categories for one result row."""
    if not row["completed"]:  # failures too frequent to finish within 100 × ideal
        assert row["overhead_frac"] == math.inf
        assert row["wall_h"] == pytest.approx(100 * row["ideal_h"])
        progress = row["ettr"] * row["wall_h"]  # the cut-off charged what was under way
        gap = progress + sum(row[f"{c}_h"] for c in CATEGORIES) - row["wall_h"]
        assert abs(gap) <= IDENTITY_TOL * row["wall_h"]
        return
    assert abs(_identity_gap(row)) <= IDENTITY_TOL * row["wall_h"]
    assert all(row[f"{c}_h"] >= -IDENTITY_TOL for c in CATEGORIES)
    assert row["overhead_frac"] == pytest.approx((row["wall_h"] - row["ideal_h"]) / row["ideal_h"])


_minutes = st.floats(1, 120)
POLICY_CONFIGS = {
    "full": st.builds(
        "{{kind: full, interval: {} min, save_mode: {}, persist_slowdown: {}}}".format,
        _minutes,
        st.sampled_from(["sync", "checkfreq"]),
        st.floats(0, 0.5),
    ),
    "cpr": st.builds(
        "{{kind: cpr, interval: {} min, fallback: {}, trainer_failure: {}}}".format,
        _minutes,
        st.booleans(),
        st.sampled_from(["full", "replica"]),
    ),
    "cpr_mfu": st.builds(
        "{{kind: cpr_mfu, interval: {} min, partial_interval: {} min, fraction: {},"
        " trainer_failure: {}}}".format,
        _minutes,
        _minutes,
        st.floats(0.001, 1),
        st.sampled_from(["full", "replica"]),
    ),
    "cpr_ssu": st.builds(
        "{{kind: cpr_ssu, interval: {} min, partial_interval: {} min, sampling_rate: {},"
        " fallback: {}}}".format,
        _minutes,
        _minutes,
        st.floats(0.001, 1),
        st.booleans(),
    ),
    "ecrm": st.sampled_from([(1, 1), (2, 1), (3, 1), (1, 2), (2, 2)]).flatmap(
        lambda kr: st.builds(
            "{{kind: ecrm, k: {}, r: {}, interval: {} min, fallback: {},"
            " parity_overlap: {}}}".format,
            st.just(kr[0]),
            st.just(kr[1]),
            _minutes,
            st.sampled_from(["rollback", "partial"]),
            st.floats(0, 1),
        )
    ),
    "swift": st.builds(
        "{{kind: swift, interval: {} min, log_budget: {}, replay_machines: {}}}".format,
        _minutes,
        st.floats(0, 1),
        st.integers(1, 4),
    ),
    "checknrun": st.builds(
        "{{kind: checknrun, interval: {} min, differential: {}, baseline_every: {},"
        " quantize_bits: {}, recovery: {}}}".format,
        _minutes,
        st.sampled_from(["one_shot", "consecutive"]),
        st.integers(1, 6),
        st.sampled_from(["null", 2, 4, 8]),
        st.sampled_from(["full", "partial"]),
    ),
    "composed": st.one_of(
        st.builds(
            "{{kind: composed, parts: [{{scope: {{hottest: {}}}, policy: {{kind: ecrm, k: 1,"
            " r: 1, interval: {} min, fallback: partial}}}}, {{scope: rest,"
            " policy: {{kind: cpr, interval: {} min, fallback: false,"
            " trainer_failure: replica}}}}]}}".format,
            st.floats(0.01, 0.5),
            _minutes,
            _minutes,
        ),
        st.builds(
            "{{kind: composed, parts: [{{scope: {{shards: [0]}}, policy: {{kind: swift,"
            " interval: {} min}}}}, {{scope: rest, policy: {{kind: cpr_mfu, interval:"
            " {} min, partial_interval: {} min, fallback: false, trainer_failure: replica}}}}],"
            " popularity_exponent: 1.2}}".format,
            _minutes,
            _minutes,
            _minutes,
        ),
        st.builds(
            "{{kind: composed, parts: [{{scope: {{shards: [0, 2]}}, dense: true, policy: {{kind:"
            " checknrun, interval: {} min, quantize_bits: {}, recovery: partial}}}}, {{scope:"
            " rest, policy: {{kind: cpr, interval: {} min, fallback: false}}}}]}}".format,
            _minutes,
            st.sampled_from(["null", 4, 8]),
            _minutes,
        ),
    ),
}
"""A policy of each kind with its main parameters drawn, as a YAML flow mapping."""


def test_the_accounting_test_draws_every_policy_kind():
    assert set(POLICY_CONFIGS) == set(policy_params())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(sorted(POLICY_CONFIGS)).flatmap(POLICY_CONFIGS.get),
    mtbf_min=st.floats(5, 600),
    resched=st.sampled_from(["constant", "exponential", "lognormal"]),
    write_gbps=st.floats(0.05, 20),
    rep=st.integers(0, 1000),
)
def test_accounting_identity_holds(policy, mtbf_min, resched, write_gbps, rep):
    s = scenario(
        "smoke",
        f"failures.0.job_mtbf={mtbf_min} min",
        f"policies=[{policy}]",
        f"cluster.reschedule={{kind: {resched}, mean: 3 min, cv: 0.5}}",
        f"cluster.storage.write_bandwidth={write_gbps} GB/s",
    )
    assert_accounting(simulate(s, 0, rep).row())


ACCOUNTING_EXAMPLES = {
    "full": "{kind: full, interval: 20 min}",
    "checkfreq": "{kind: full, interval: 20 min, save_mode: checkfreq, persist_slowdown: 0.1}",
    "cpr": "{kind: cpr, interval: 30 min}",
    "cpr_mfu": "{kind: cpr_mfu, interval: 30 min, partial_interval: 10 min}",
    "cpr_ssu": "{kind: cpr_ssu, interval: 30 min, partial_interval: 10 min}",
    "ecrm": "{kind: ecrm, k: 2, r: 1, interval: 30 min, fallback: rollback}",
    "swift": "{kind: swift, interval: 30 min}",
    "checknrun": "{kind: checknrun, interval: 30 min, quantize_bits: 4}",
    "composed": "{kind: composed, parts: [{scope: {shards: [1]}, dense: true, policy: {kind:"
    " swift, interval: 30 min}}, {scope: rest, policy: {kind: cpr, interval: 30 min,"
    " fallback: false, trainer_failure: replica}}]}",
}
"""One policy of every kind (and CheckFreq) on smoke."""

EXAMPLE_FAILURES = (
    "failures=[{kind: scheduled, times: [50 min, 100 min, 150 min],"
    " nodes: [[trainer1], [emb_ps1], [emb_ps2, emb_ps3]]}]"
)
"""A trainer, then a shard, then two shards at once: every example policy saves, loses work
(a rollback, or SWIFT's in-flight iteration) and recovers."""


def _accounting_example(name):
    policy = f"policies=[{ACCOUNTING_EXAMPLES[name]}]"
    return simulate(scenario("smoke", EXAMPLE_FAILURES, policy), 0, 0).row()


@pytest.mark.parametrize("name", ACCOUNTING_EXAMPLES)
def test_accounting_check_fails_when_a_phase_is_charged_half(name, monkeypatch):
    assert_accounting(_accounting_example(name))
    charge = Simulation._charge

    def half_of_saves(self, category, start, detail, part=None, activity=None):
        if category == "save":
            start = (start + self.env.now) / 2
        charge(self, category, start, detail, part, activity)

    monkeypatch.setattr(Simulation, "_charge", half_of_saves)
    row = _accounting_example(name)
    assert row["save_h"] > 0
    with pytest.raises(AssertionError):
        assert_accounting(row)


@pytest.mark.parametrize("name", ACCOUNTING_EXAMPLES)
def test_accounting_check_fails_when_lost_work_is_quartered(name, monkeypatch):
    breakdown = Simulation.breakdown_s

    def quarter_lost(self):
        out = breakdown(self)
        out["lost"] /= 4
        return out

    monkeypatch.setattr(Simulation, "breakdown_s", quarter_lost)
    row = _accounting_example(name)
    assert row["lost_h"] > 0
    with pytest.raises(AssertionError):
        assert_accounting(row)


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
    assert row["load_h"] == pytest.approx(sim.policy.plan.load_s / 3600, rel=1e-9)
    kinds = [p.category for p in sim.timeline]
    assert kinds.count("reschedule") == 2 and kinds.count("load") == 1


def test_failure_during_load_reloads():
    s = scenario(
        "smoke",
        "failures.0={kind: scheduled, times: [1 h, 3610.3 s], role: any}",
        "cluster.reschedule={kind: constant, mean: 0 s}",
        "cluster.storage.read_bandwidth=10 MB/s",
    )
    sim = simulate(s, 0, 0)
    load_s = sim.policy.plan.load_s
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
    save_s = sim.policy.plan.save_s
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
    save_s = sim0.policy.plan.save_s  # 2.6e9 B / 10 MB/s = 258 s
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
    snapshot_s, save_s = sim.policy.writer.snapshot_s, sim.policy.plan.save_s
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
    assert [p.category for p in fast.timeline] == [p.category for p in slow.timeline]
    assert math.isclose(fast.wall_s, slow.wall_s)


HALVING = ("failures=[{kind: scheduled, times: [5 h, 8 h], role: emb_ps, nodes_per_failure: 4}]",)
"""prod50h with two failures of 4 embedding PS at fixed wall times. They fall in no save
of a policy whose wall clock depends on the iteration time, in either run (checked by the
event counts), so whatever differs between the runs differs through the iteration time."""


def _swift_save_s(sim: Simulation, iteration_s: float) -> float:
    """SWIFT's shard checkpoint time when its update log, a fixed number of bytes per
    iteration and shard, takes its rate out of the storage write bandwidth."""
    job, cluster, params = sim.scenario.job, sim.scenario.cluster, sim.policy.params
    rows = job.samples_per_iteration * job.lookups_per_sample * params.unique_lookup_fraction
    log_bytes = 16 + rows / cluster.emb_ps * (8 + job.mean_value_bytes)
    left = cluster.storage.write_bandwidth - cluster.emb_ps * log_bytes / iteration_s
    shards = [sim.layout.shard_bytes] * cluster.emb_ps
    return transfer_time_s(shards, cluster.nic_bandwidth, left, cluster.network_latency)


def _per_iteration_slowdown(full: Simulation, half: Simulation) -> dict[str, float]:
    """Work fixed per iteration (counter updates, sampling, parity bytes) slows training by
    (work per iteration) / (iteration time): twice as much at half the iteration time."""
    assert half.policy.slowdown() == pytest.approx({"other": 2 * full.policy.slowdown()["other"]})
    return {"other": 2.0}


def _ecrm(full: Simulation, half: Simulation) -> dict[str, float]:
    """Parity traffic per iteration, and degraded reads and rebuild interference per
    iteration, double as slowdowns; a range switch (memory copies) does not, nor does a
    range's transfer (bytes over NICs that the doubled parity stream shares a little more)."""
    fast, slow = half.policy.plan, full.policy.plan
    assert fast.reads_slowdown([(3, 1.0)]) == pytest.approx(2 * slow.reads_slowdown([(3, 1.0)]))
    assert fast.traffic_frac == pytest.approx(2 * slow.traffic_frac)
    assert fast.rebuild(3).pauses_s == pytest.approx(slow.rebuild(3).pauses_s)
    assert fast.rebuild(3).transfer_s == pytest.approx(slow.rebuild(3).transfer_s, 0.2)
    # degraded time mixes slowdowns that double (reads, rebuild interference) with range
    # pauses that do not: it grows, by less than twice
    return {**_per_iteration_slowdown(full, half), "degraded": (1.0, 2.0)}


def _swift(full: Simulation, half: Simulation) -> dict[str, float]:
    """The log rate doubles, so saves get less storage bandwidth; replay is compute-bound
    (``replay_compute_frac`` of an iteration per logged iteration) at both iteration times,
    so a logged compute second replays in the same time; undoing an iteration takes half."""
    t = full.scenario.job.iteration_s
    assert full.policy.plan.save_s == pytest.approx(_swift_save_s(full, t))
    assert half.policy.plan.undo_s == pytest.approx(full.policy.plan.undo_s / 2)
    frac = full.policy.params.replay_compute_frac
    for sim in (full, half):  # an hour of logged compute replays in frac hours at both
        assert sim.policy.plan.replay_time_s([3600.0]) == pytest.approx(frac * 3600.0)
    assert half.policy.slowdown() == full.policy.slowdown() == {}
    return {"save": _swift_save_s(half, t / 2) / full.policy.plan.save_s}


ITERATION_TIME_RULES = {
    "full": lambda full, half: {},
    "cpr": lambda full, half: {},
    "cpr_mfu": _per_iteration_slowdown,
    "cpr_ssu": _per_iteration_slowdown,
    "ecrm": _ecrm,
    "swift": _swift,
}
"""Per policy kind: how halving the iteration time must scale each breakdown category (a
factor; categories not named stay the same), checking the policy's rates on the way."""


def assert_iteration_time_dependence(index: int) -> None:
    """Run policy ``index`` of prod50h (with ``HALVING``'s failures) at its iteration time
    and at half of it; each breakdown category must scale as the policy's rule says."""
    full = simulate(scenario("prod50h", *HALVING), index, 0)
    half_time = full.scenario.job.iteration_s / 2
    half = simulate(scenario("prod50h", *HALVING, f"job.iteration_time={half_time} s"), index, 0)
    factors = ITERATION_TIME_RULES[full.policy.params.kind](full, half)
    got, before = half.breakdown_s(), full.breakdown_s()
    for category, (low, high) in [(c, f) for c, f in factors.items() if isinstance(f, tuple)]:
        assert low * before[category] < got.pop(category) < high * before[category], category
        del before[category]
    expected = {c: v * factors.get(c, 1.0) for c, v in before.items()}
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert next(half.env._eid) == next(full.env._eid)  # the same phases, failures in place


@pytest.mark.parametrize("index", range(len(scenario("prod50h").policies)))
def test_halving_the_iteration_time_changes_only_per_iteration_costs(index):
    assert_iteration_time_dependence(index)


def test_iteration_time_check_fails_when_a_save_depends_on_the_iteration_time(monkeypatch):
    transfer = Simulation.transfer

    def iteration_bound_save(self, category, flows, detail=""):
        yield from transfer(self, category, flows, detail)
        if category == "save":  # e.g. a barrier of ten iterations before each save
            yield from self.phase("save", 10 * self.scenario.job.iteration_s)

    monkeypatch.setattr(Simulation, "transfer", iteration_bound_save)
    with pytest.raises(AssertionError):
        assert_iteration_time_dependence(0)


def test_iteration_time_check_fails_when_a_per_iteration_cost_does_not_scale(monkeypatch):
    monkeypatch.setattr(Cpr, "slowdown", lambda self: {"other": 0.0015})
    with pytest.raises(AssertionError):
        assert_iteration_time_dependence(2)


@pytest.mark.parametrize(
    "policy",
    [
        "{kind: ecrm, k: 2, r: 1, interval: 20 min, save_mode: checkfreq, persist_slowdown: 0.25}",
        "{kind: cpr_mfu, interval: 20 min, partial_interval: 10 min, save_mode: checkfreq,"
        " persist_slowdown: 0.25}",
    ],
)
def test_a_persist_slows_a_policy_by_its_own_slowdown_and_the_writers(policy, monkeypatch):
    """While a CheckFreq persist runs, ECRM's and CPR's slowdown is theirs with the writer's
    ``other`` added (and theirs alone otherwise), at every compute phase of a run."""
    seen = {"persisting": 0, "not": 0}
    start = Simulation._start_compute

    def checked(self, target_s):
        policy, writer = self.policy, self.policy.writer
        own = policy._slowdown if hasattr(policy, "_slowdown") else policy.plan.tracking_slowdown
        got = policy.slowdown()
        if writer.persisting:
            seen["persisting"] += 1
            assert got == {**own, "other": own.get("other", 0.0) + 0.25}
        else:
            seen["not"] += 1
            assert got is own
        return start(self, target_s)

    monkeypatch.setattr(Simulation, "_start_compute", checked)
    simulate(scenario("smoke", EXAMPLE_FAILURES, f"policies=[{policy}]"), 0, 0)
    assert seen["persisting"] > 3 and seen["not"] > 3


def test_a_persist_slows_training_for_exactly_its_own_duration():
    """Closed form of a re-plan: with no failure, CheckFreq's persist slows training by
    ``persist_slowdown`` s from the instant it starts to the instant it ends (each a re-plan
    of the compute phase under way), so a persist of wall duration D costs D·s/(1 + s) of
    ``other`` and of wall time, on top of the snapshot stalls."""
    s = 0.25
    sim = simulate(
        scenario(
            "smoke",
            "failures=[]",
            "policies.0.interval=20 min",
            "policies.0.save_mode=checkfreq",
            f"policies.0.persist_slowdown={s}",
            "cluster.storage.write_bandwidth=10 MB/s",
        ),
        0,
        0,
    )
    persists = [p.end_s - p.start_s for p in sim.timeline if p.category == "persist"]
    assert len(persists) == sim.policy.n_checkpoints == 11
    assert min(persists) > 60  # long enough for a wrong rate to show
    other_s = sum(d * s / (1 + s) for d in persists)
    assert sim.breakdown_s()["other"] == pytest.approx(other_s, rel=1e-12)
    snapshots_s = 11 * sim.policy.writer.snapshot_s
    assert sim.wall_s == pytest.approx(4 * 3600 + snapshots_s + other_s, rel=1e-12)
