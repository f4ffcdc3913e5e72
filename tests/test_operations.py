"""Cluster operations (``cluster.operations``, :mod:`ftsim.sim.operations`): the replacement
of a failed node emerges from spares, standbys and repair, bad nodes fail more often, and
failing nodes retire. Checked where the answer is exact (ready times per failure are
monotone in every resource; a late replacement is the policy's ``reschedule``; retirement
follows its rule) and against closed forms where they exist (the fleet's failure count and
its bad-node share under class drift). Each check is shown to fail with a bug planted
(``test_*_catches_*``)."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ftsim.sim.operations as operations
from ftsim.experiments.runner import simulate
from ftsim.experiments.stats import t_interval
from ftsim.scenario.loader import read_yaml, validate_scenario
from ftsim.sim.operations import ClusterOperations
from ftsim.sim.rng import Purpose, stream
from tests.conftest import SCENARIOS, scenario

SMOKE = SCENARIOS / "smoke.yaml"
BASE = {k: v for k, v in read_yaml(SMOKE).items() if k != "trainer"}
INSTANT = {"spares": "unlimited", "provisioning": {"mean": "0 s"}}
"""Every replacement ready at its failure's instant, from a fresh spare."""


def build(operations: dict | None, failures: list | None = None, **cluster):
    """The smoke scenario with ``cluster.operations`` (and other cluster fields) set."""
    data = copy.deepcopy(BASE)
    data["cluster"].update(cluster)
    if operations is not None:
        data["cluster"]["operations"] = operations
    if failures is not None:
        data["failures"] = failures
    return validate_scenario(data, SMOKE, warn=False)


def passes(scenario, rep: int = 0) -> ClusterOperations:
    """Replication ``rep``'s operations pass, on the streams the engine gives it."""
    streams = [stream(scenario.run.seed, rep, Purpose.FAILURES, i) for i in range(3)]
    return ClusterOperations(scenario, rep, streams[: len(scenario.failures)])


def until(ops: ClusterOperations, horizon_s: float) -> list:
    """The pass's failures up to ``horizon_s`` (wall seconds)."""
    return list(itertools.takewhile(lambda f: f.time_s <= horizon_s, ops.failures()))


# -- the default path and instant replacements ---------------------------------------------


def test_instant_replacements_reproduce_the_failures_without_operations():
    """Fresh spares ready at once: a host's lifetime starts at its predecessor's failure, as
    the source draws it without operations (same nodes, same times up to float rounding)."""
    plain = build(None)
    ops = build(INSTANT)
    from ftsim.sim.failures import failure_sequence

    streams = [stream(plain.run.seed, 0, Purpose.FAILURES, 0)]
    expected = list(itertools.islice(failure_sequence(plain.failures, streams, plain), 300))
    got = list(itertools.islice(passes(ops).failures(), 300))
    assert [f.nodes for f in got] == [f.nodes for f in expected]
    assert np.allclose([f.time_s for f in got], [f.time_s for f in expected], rtol=1e-12)


def test_every_policy_sees_the_same_failures_and_replacements():
    """Common random numbers: the pass depends on the replication, not on the policy."""
    s = build({"spares": 1, "bad_nodes": {"share": 0.3, "multiplier": 4}})
    compared = 0
    for rep in range(4):
        seen = [simulate(s, i, rep).failures_seen for i in range(len(s.policies))]
        shortest = min(len(x) for x in seen)
        assert all(x[:shortest] == seen[0][:shortest] for x in seen)
        compared += shortest
    assert compared >= 8


# -- exact: ready times are monotone in every resource ---------------------------------------

NODES = [f"trainer{i}" for i in range(4)] + [f"emb_ps{i}" for i in range(4)]


@st.composite
def _cases(draw):
    """Failures on distinct nodes (none strikes a place still waiting), and two clusters,
    the second worse in some resources (fewer spares or standbys, slower something, more
    escalations) and the same in the others."""
    n = draw(st.integers(1, 8))
    victims = draw(st.permutations(NODES))[:n]
    nodes, k = [], 0
    while k < n:
        size = draw(st.integers(1, 2))
        nodes.append(victims[k : k + size])
        k += size
    times = draw(st.lists(st.floats(0, 3600), min_size=len(nodes), max_size=len(nodes)))
    failures = [{"kind": "scheduled", "times": [f"{t} s" for t in sorted(times)], "nodes": nodes}]
    swap = draw(st.floats(0, 600))
    good = {
        "spares": draw(st.integers(0, 2)),
        "warm": draw(st.integers(0, 2)),
        "swap": swap,
        "provisioning": draw(st.floats(swap, 3600)),
        "detection": draw(st.floats(0, 600)),
        "automatic": draw(st.floats(1, 4 * 3600)),
        "manual": draw(st.floats(1, 48 * 3600)),
        "escalation": draw(st.floats(0, 1)),
    }
    worse = dict(good)
    for name in draw(st.sets(st.sampled_from(sorted(good)), min_size=1)):
        if name in ("spares", "warm"):
            worse[name] = draw(st.integers(0, good[name]))
        elif name == "escalation":
            worse[name] = draw(st.floats(good[name], 1))
        else:
            worse[name] = draw(st.floats(good[name], 2 * good[name] + 60))
    worse["provisioning"] = max(worse["provisioning"], worse["swap"])
    return failures, good, worse, draw(st.integers(0, 3))


def _operations(c: dict) -> dict:
    return {
        "spares": c["spares"],
        "warm_standbys": c["warm"],
        "swap": {"mean": f"{c['swap']} s"},
        "provisioning": {"mean": f"{c['provisioning']} s"},
        "detection": {"mean": f"{c['detection']} s"},
        "repair": {
            "automatic": {"kind": "exponential", "mean": f"{c['automatic']} s"},
            "manual": {"kind": "exponential", "mean": f"{c['manual']} s"},
            "escalation": c["escalation"],
        },
    }


def _ready_times(failures, cluster: dict, rep: int) -> list[float]:
    s = build(_operations(cluster), failures, reschedule={"mean": "0 s"})
    return [f.time_s + f.reschedule_s for f in passes(s, rep).failures()]


def _check_monotone(case) -> None:
    failures, good, worse, rep = case
    better, slower = _ready_times(failures, good, rep), _ready_times(failures, worse, rep)
    assert len(better) == len(slower)
    assert all(b <= w for b, w in zip(better, slower, strict=True)), (better, slower)


def _scheduled(times: list[float], nodes: list[str]) -> list[dict]:
    return [
        {"kind": "scheduled", "times": [f"{t} s" for t in times], "nodes": [[n] for n in nodes]}
    ]


_QUICK = {
    "spares": 0,
    "warm": 0,
    "swap": 0.0,
    "provisioning": 0.0,
    "detection": 0.0,
    "automatic": 1.0,
    "manual": 1.0,
    "escalation": 0.0,
}
SLOWER_DIAGNOSIS = (
    _scheduled([0, 0, 1], ["trainer0", "trainer1", "trainer2"]),
    _QUICK,
    {**_QUICK, "detection": 1.0},
    0,
)
"""Found by hypothesis with :func:`_draws_at_diagnosis` planted (then shrunk)."""
ONE_SPARE_LESS = (
    _scheduled([0, 0, 0, 1, 1], ["trainer0", "trainer1", "trainer2", "trainer3", "emb_ps0"]),
    {**_QUICK, "spares": 1},
    _QUICK,
    0,
)
"""Found by hypothesis with :func:`_draws_when_installing` planted (then shrunk)."""


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
@example(SLOWER_DIAGNOSIS)
@example(ONE_SPARE_LESS)
def test_fewer_spares_or_slower_repair_never_makes_a_replacement_earlier(case):
    """Per failure, on common random numbers: with fewer spares or standbys, or a slower
    detection, swap, provisioning or repair, or more escalations, every replacement is
    ready no earlier (requests are served first come, first served: the k-th request gets
    the k-th node to come free, and every resource only moves those instants later)."""
    _check_monotone(case)


def _draws_at_diagnosis(monkeypatch):
    """Bug: a failed node's repair and replacement are drawn at its diagnosis, from the
    stream as it stands then: how they interleave with the draws of other failures changes
    with the detection delay (no common random numbers across clusters)."""
    original = operations.ClusterOperations._diagnose

    def diagnose(self, time_s, record):
        for fate in record.new:
            fate.draws = self._draws.take(operations._PER_NODE)
        original(self, time_s, record)

    monkeypatch.setattr(operations.ClusterOperations, "_diagnose", diagnose)


def _draws_when_installing(monkeypatch):
    """Bug: the swap or provisioning time is drawn only when a free node is installed (the
    draws of later failures then shift with the number of spares)."""
    original = operations.ClusterOperations._replace

    def replace(self, fate, time_s):
        if self._standbys or self._pool._fresh or self._pool._returned:
            fate.draws[operations._INSTALL] = self._draws.take(1)[0]
        original(self, fate, time_s)

    monkeypatch.setattr(operations.ClusterOperations, "_replace", replace)


@pytest.mark.parametrize(
    ("bug", "case"),
    [(_draws_at_diagnosis, SLOWER_DIAGNOSIS), (_draws_when_installing, ONE_SPARE_LESS)],
)
def test_the_monotonicity_check_catches_uncoupled_draws(bug, case, monkeypatch):
    _check_monotone(case)
    bug(monkeypatch)
    with pytest.raises(AssertionError):
        _check_monotone(case)


def _check_first_come_first_served() -> None:
    """No spare: two failed nodes wait for repaired hosts, first come, first served (the
    first host back, at 1 h + 10 h, replaces the node that failed first)."""
    repair = {"automatic": {"mean": "10 h"}, "escalation": 0}
    s = build(
        {"spares": 0, "provisioning": {"mean": "0 s"}, "repair": repair},
        _scheduled([3600, 7200], ["emb_ps0", "emb_ps1"]),
        reschedule={"mean": "0 s"},
    )
    ready = [f.time_s + f.reschedule_s for f in passes(s).failures()]
    assert ready == [11 * 3600, 12 * 3600]


def test_a_host_back_from_repair_serves_the_earliest_request():
    _check_first_come_first_served()


class _Stack(deque):
    """Bug: a host back from repair serves the newest request (last come, first served)."""

    def popleft(self):
        return self.pop()


def test_the_first_come_check_catches_last_come_first_served(monkeypatch):
    original = ClusterOperations.__init__

    def init(self, *args):
        original(self, *args)
        self._waiting = _Stack()

    monkeypatch.setattr(ClusterOperations, "__init__", init)
    with pytest.raises(AssertionError):
        _check_first_come_first_served()


# -- a late replacement stalls what the policy awaits -------------------------------------------

SLOW = {
    "spares": 0,
    "provisioning": {"mean": "20 min"},
    "repair": {"automatic": {"mean": "10 h"}, "escalation": 0},
}
"""No spare, a constant 10 h repair: the replacement is the failed node itself, repaired."""


def _late_replacement(failed: str):
    policies = [
        {"kind": "full", "interval": "20 min"},
        {"kind": "cpr", "target_pls": 0.1},
        {"kind": "ecrm", "k": 2, "r": 1, "interval": "1 h"},
    ]
    data = copy.deepcopy(BASE)
    data["cluster"].update(operations=SLOW, reschedule={"mean": "1 min"})
    data["failures"] = _scheduled([3600], [failed])
    data["policies"] = policies
    return validate_scenario(data, SMOKE, warn=False)


def test_a_zero_spare_slow_repair_cluster_charges_the_wait_to_reschedule():
    """The job waits 10 h of repair + 20 min of provisioning + the 1 min restart, charged
    to ``reschedule`` by every policy whose recovery needs the node; ECRM decodes a lost
    embedding PS from parity and trains on degraded: only its rebuild waits for the node."""
    s = _late_replacement("emb_ps0")
    wait_h = 10 + 20 / 60 + 1 / 60
    full, cpr, ecrm = (simulate(s, i, 0) for i in range(3))
    for sim in (full, cpr):
        row = sim.row()
        assert row["reschedule_h"] == pytest.approx(wait_h, rel=1e-12)
        assert row["spare_wait_h"] == pytest.approx(10, rel=1e-12)
        assert row["n_waited_for_repair"] == 1
    row = ecrm.row()
    assert row["reschedule_h"] == 0
    assert row["degraded_h"] > 0 and not ecrm.policy.recovery_s  # rebuilt after the job
    assert row["wall_h"] < 1 + 10


def test_a_trainer_waits_for_its_replacement_under_every_policy():
    s = _late_replacement("trainer0")
    for i in range(3):
        assert simulate(s, i, 0).row()["reschedule_h"] == pytest.approx(10 + 21 / 60, rel=1e-12)


def test_the_reschedule_check_catches_a_spare_that_is_always_free(monkeypatch):
    monkeypatch.setattr(operations._Pool, "take", lambda self: operations.Host(False))
    row = simulate(_late_replacement("emb_ps0"), 0, 0).row()
    assert row["reschedule_h"] == pytest.approx(21 / 60, rel=1e-12)  # not the 10 h wait


# -- statistical: the mean overhead on common random numbers ---------------------------------

RATE = {
    "repair": {
        "automatic": {"kind": "exponential", "mean": "30 min"},
        "escalation": 0.2,
        "manual": {"kind": "exponential", "mean": "4 h"},
    },
    "provisioning": {"mean": "10 min"},
}
MEAN_REPS = 30


def _overheads(operations_section: dict) -> np.ndarray:
    """Overhead per policy (rows) and replication (columns) of smoke with operations and a
    job MTBF of 4 h."""
    failures = [{"kind": "exponential", "role": "any", "job_mtbf": "4 h"}]
    s = build(operations_section, failures)
    return np.array(
        [[simulate(s, i, rep).row()["overhead_frac"] for rep in range(MEAN_REPS)] for i in range(3)]
    )


def _check_mean_overhead_monotone() -> None:
    """Per policy: fewer spares, or slower repair, never lower the mean overhead by more
    than the 99.8% interval of the paired difference (12 comparisons), and no spare at all
    costs significantly more than unlimited spares (99%: the check can tell)."""
    ladder = [_overheads({**RATE, "spares": spares}) for spares in ("unlimited", 2, 1, 0)]
    slow = {
        **RATE,
        "repair": {**RATE["repair"], "automatic": {"kind": "exponential", "mean": "2 h"}},
    }
    ladder.append(_overheads({**slow, "spares": 0}))
    for more, fewer in itertools.pairwise(ladder):
        for policy in range(3):
            d = t_interval(fewer[policy] - more[policy], confidence=0.99)
            assert d["high"] >= 0, (policy, d)
    for policy in range(3):
        d = t_interval(ladder[3][policy] - ladder[0][policy], confidence=0.99)
        assert d["low"] > 0, (policy, d)


def test_fewer_spares_or_slower_repair_never_lower_the_mean_overhead():
    _check_mean_overhead_monotone()


def test_the_mean_overhead_check_catches_replacements_that_do_not_stall(monkeypatch):
    """Bug: each failure's delay is the restart alone (the wait for its node is lost)."""
    original = operations.ClusterOperations.failures

    def failures(self):
        restart = self.scenario.cluster.reschedule
        for f in original(self):
            yield dataclasses.replace(f, reschedule_s=restart.expected_s)

    monkeypatch.setattr(operations.ClusterOperations, "failures", failures)
    with pytest.raises(AssertionError):
        _check_mean_overhead_monotone()


# -- bad nodes: closed forms -----------------------------------------------------------------


def drift(rate: float, share: float, multiplier: float, horizon: float) -> tuple[float, float]:
    """Expected failures of one place in [0, horizon], all and of bad hosts, when every
    failed host is replaced at once by a fresh one (bad with probability ``share``) and
    the fleet's mean rate is ``rate``: a two-state Markov chain of the place's host class
    (good → bad at g·s, bad → good at m·g·(1 − s), g = rate / (1 − s + s·m)), whose
    probability of a bad host relaxes from s to π = g·s / λ at λ = g·s + m·g·(1 − s)."""
    g = rate / (1 - share + share * multiplier)
    lam = g * share + multiplier * g * (1 - share)
    pi = g * share / lam
    bad_time = pi * horizon + (share - pi) * -math.expm1(-lam * horizon) / lam
    bad = multiplier * g * bad_time
    return g * (horizon - bad_time) + bad, bad


def _class_counts(s, horizon_s: float, reps: int) -> tuple[np.ndarray, np.ndarray]:
    """Per replication: failures up to ``horizon_s``, and those of bad hosts."""
    total, bad = [], []
    for rep in range(reps):
        ops = passes(s, rep)
        n = len(until(ops, horizon_s))
        columns = ops.columns(n)
        total.append(n)
        bad.append(columns["n_node_failures_bad"])
    return np.array(total, float), np.array(bad, float)


def _check_class_drift(s, rate_per_s: float, horizon_s: float, reps: int) -> None:
    bad_nodes = s.cluster.operations.bad_nodes
    per_place = drift(rate_per_s, bad_nodes.share, bad_nodes.multiplier, horizon_s)
    total, bad = _class_counts(s, horizon_s, reps)
    for got, expected in zip((total, bad), per_place, strict=True):
        ci = t_interval(got / s.cluster.n_nodes, confidence=0.99)
        assert ci["low"] <= expected <= ci["high"], (ci, expected)


def test_bad_nodes_keep_the_fleet_rate_and_drift_as_the_closed_form_says():
    """200 places failing at a fleet rate of one per 80 min, 20% bad hosts at 10× a good
    one's rate, fresh replacements at once: the failures in 4 h and those of bad hosts
    follow the two-state closed form (3 failures per place at the fleet rate without the
    drift to good hosts; 1.50 with it)."""
    s = build(
        {**INSTANT, "bad_nodes": {"share": 0.2, "multiplier": 10}},
        [{"kind": "exponential", "role": "any", "node_mtbf": "80 min"}],
        trainers=100,
        emb_ps=100,
    )
    _check_class_drift(s, 1 / 4800, 4 * 3600, reps=30)


def test_a_preset_keeps_its_published_rate_as_the_fleet_mean():
    """llama3_405b on its 2,048 nodes over its 54 days with 10% bad nodes at 5×: at t = 0
    the fleet fails at the published 419 / 54 days; over the period, as the closed form."""
    from ftsim.sim.presets import DAY_S, LLAMA3_405B

    s = build(
        {**INSTANT, "bad_nodes": {"share": 0.1, "multiplier": 5}},
        [{"preset": "llama3_405b"}],
        trainers=2047,
        emb_ps=1,
    )
    rate = LLAMA3_405B.rate_per_node_day / DAY_S
    _check_class_drift(s, rate, 54 * DAY_S, reps=12)


def test_the_class_drift_check_catches_rates_not_kept_as_the_fleet_mean(monkeypatch):
    """Bug: a good host fails at the source's rate and a bad one at m times it."""
    original = operations._Classes.__init__

    def init(self, spec, seed, rep):
        original(self, spec, seed, rep)
        self.stretch = {False: 1.0, True: 1.0 / self.multiplier}

    monkeypatch.setattr(operations._Classes, "__init__", init)
    s = build(
        {**INSTANT, "bad_nodes": {"share": 0.2, "multiplier": 10}},
        [{"kind": "exponential", "role": "any", "node_mtbf": "80 min"}],
        trainers=100,
        emb_ps=100,
    )
    with pytest.raises(AssertionError):
        _check_class_drift(s, 1 / 4800, 4 * 3600, reps=30)


def test_the_share_of_bad_hosts_is_drawn_per_host():
    """At t = 0 the job's hosts are bad with probability ``share`` (binomial, 99% interval)
    and every policy's replication meets the same ones."""
    s = build({"spares": 2, "bad_nodes": {"share": 0.3, "multiplier": 3}}, trainers=500, emb_ps=500)
    shares = [np.mean([h.bad for h in passes(s, rep)._hosts]) for rep in range(10)]
    ci = t_interval(shares, confidence=0.99)
    assert ci["low"] <= 0.3 <= ci["high"]
    assert [h.bad for h in passes(s, 3)._hosts] == [h.bad for h in passes(s, 3)._hosts]


# -- retirement -------------------------------------------------------------------------------

RETIRING = {
    "spares": 2,
    "provisioning": {"mean": "5 min"},
    "repair": {"automatic": {"kind": "exponential", "mean": "20 min"}, "escalation": 0},
    "bad_nodes": {"share": 0.3, "multiplier": 8},
    "retirement": {"failures": 2, "window": "6 h"},
}
"""Bad hosts failing often, repaired quickly, back in the job: some retire."""


def _check_retirements(rep: int) -> int:
    """Every diagnosed failure retires its host exactly when the host failed
    ``retirement.failures`` times within the window up to it, and a retired host never
    fails again; returns the retirements."""
    s = build(RETIRING, [{"kind": "exponential", "role": "any", "node_mtbf": "8 h"}], emb_ps=12)
    rule = s.cluster.operations.retirement
    ops = passes(s, rep)
    n = len(until(ops, 12 * 3600))
    retired = set()
    for record in ops.seen[:n]:
        for fate in record.new:
            assert id(fate.host) not in retired
            times = [t for t in fate.host.failures if t <= record.time_s]
            recent = sum(record.time_s - rule.window <= t for t in times)
            assert fate.retired == (recent >= rule.failures)
            if fate.retired:
                retired.add(id(fate.host))
    assert ops.columns(n)["n_retired"] == len(retired)
    return len(retired)


def test_a_host_retires_at_its_nth_failure_within_the_window():
    assert sum(_check_retirements(rep) for rep in range(5)) >= 5


def test_an_unfinished_row_charges_the_phase_under_way_at_the_cut():
    """One PS, one spare, its second and fourth failures retire it: from 4 h no host is
    left, and the job waits until the cut at 3 × 10 h. That wait was left out of the row
    (reschedule_h 0, the categories summing to 12 h of a 30 h wall); the cut now charges
    the phase under way, and wall = progress + categories holds for unfinished rows too."""
    one_ps = {
        "spares": 1,
        "provisioning": {"mean": "0 s"},
        "repair": {"automatic": {"kind": "constant", "mean": "30 min"}, "escalation": 0},
        "retirement": {"failures": 2, "window": "2.5 h"},
    }
    data = copy.deepcopy(BASE)
    data["cluster"].update(trainers=1, emb_ps=1, operations=one_ps)
    data["failures"] = _scheduled([3600.0 * h for h in (1, 2, 3, 4)], ["emb_ps0"] * 4)
    data["job"]["training"] = "10 h"
    data["run"]["max_wall_factor"] = 3
    row = simulate(validate_scenario(data, SMOKE, warn=False), 0, 0).row()
    assert not row["completed"] and row["wall_h"] == pytest.approx(30)
    categories = sum(row[f"{c}_h"] for c in ("save", "load", "lost", "reschedule", "degraded"))
    categories += row["other_h"]
    assert row["ettr"] * row["wall_h"] + categories == pytest.approx(row["wall_h"], rel=1e-12)
    assert 26 < row["reschedule_h"] < 26.2  # from the last failure at 4 h to the cut


def test_a_cut_simulation_is_collected_without_ending_its_phase_again():
    """After the cut-off charged the compute under way, collecting the simulation closed the
    job's generator, whose ``finally`` ended that compute again: 'cannot unpack NoneType'
    (an unraisable exception, seen by a new policy's author). Nothing is raised now, and
    the row stays as the cut made it."""
    import gc
    import sys

    data = copy.deepcopy(BASE)
    data["failures"] = [{"kind": "exponential", "role": "any", "job_mtbf": "5 min"}]
    data["policies"] = [{"kind": "full", "interval": "2 h"}]
    s = validate_scenario(data, SMOKE, warn=False)
    seen, hook = [], sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        sim = simulate(s, 0, 0)
        row = sim.row()
        assert not row["completed"]
        del sim
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert not seen, [str(u.exc_value) for u in seen]


def test_the_retirement_check_catches_an_off_by_one(monkeypatch):
    """Bug: the failure being diagnosed is not counted."""
    original = operations.retires
    monkeypatch.setattr(
        operations,
        "retires",
        lambda host, t, rule: original(operations.Host(host.bad, host.failures[:-1]), t, rule),
    )
    with pytest.raises(AssertionError):
        for rep in range(5):
            _check_retirements(rep)


def test_the_columns_count_every_failed_node_once():
    """Failed hosts by class plus the nodes struck while still waiting (given failures) are
    the failed nodes; the columns are the same for every policy of a replication."""
    s = build({"spares": 0}, [{"kind": "scheduled", "count": 6, "nodes_per_failure": 3}])
    rows = [simulate(s, i, 1).row() for i in range(3)]
    row = rows[0]
    hosts = row["n_node_failures_good"] + row["n_node_failures_bad"]
    assert 0 < hosts <= row["n_failed_nodes"]
    keys = ("n_node_failures_good", "n_retired", "n_waited_for_repair", "spare_wait_h")
    assert all(r[k] == row[k] for r in rows for k in keys if r["n_failures"] == row["n_failures"])


def test_the_run_table_shows_the_operations_columns_of_summary_records(tmp_path, capsys):
    """``run`` prints the waits, bad-node failures and retirements when operations ran: the
    table reads the summary's records (not a DataFrame), whose column names are the rows'
    keys; without operations, no such columns."""
    from ftsim.cli import main

    for path, shown in ((SCENARIOS / "operations.yaml", True), (SMOKE, False)):
        out = tmp_path / path.stem
        assert main(["run", str(path), "--reps", "2", "--no-trainer", "-o", str(out)]) == 0
        header = capsys.readouterr().out.splitlines()[0].split()
        assert (header[-3:] == ["spare_wait_h", "bad_failures", "retired"]) == shown


@pytest.mark.parametrize("value", ["two", -1, 2.5])
def test_a_spares_count_that_is_no_count_names_both_forms(value):
    """``spares=two`` said "expected a whole number such as 1000 or 1e9", without the word
    the field also takes (a new user's study)."""
    from ftsim.scenario.loader import ScenarioError

    with pytest.raises(ScenarioError) as refused:
        scenario("operations", f"cluster.operations.spares={value}")
    [(path, message)] = refused.value.problems
    assert path == "cluster.operations.spares"
    assert message == f"expected a whole number of nodes >= 0, or unlimited (got {value!r})"
