"""Failure processes: rates, distributions, victims, replay, common random numbers."""

import copy
import itertools
import math
import pickle

import numpy as np
import pytest
import yaml

from ftsim.scenario.loader import load_scenario, read_yaml
from ftsim.sim.failures import failure_sequence, job_mtbf_s
from ftsim.sim.rng import LazyStream, Purpose, stream
from tests.conftest import SCENARIOS, scenario


def _draw(s, rep=0, until_s=math.inf, limit=100_000):
    streams = [stream(s.run.seed, rep, Purpose.FAILURES, i) for i in range(len(s.failures))]
    seq = failure_sequence(s.failures, streams, s)
    return [f for f in itertools.islice(seq, limit) if f.time_s <= until_s]


def test_exponential_job_rate_is_nodes_over_node_mtbf():
    s = scenario("smoke", "failures.0.job_mtbf=null", "failures.0.node_mtbf=8 h")
    # 8 nodes with an 8 h MTBF each: the job sees one failure per hour.
    assert job_mtbf_s(s) == pytest.approx(3600)
    failures = _draw(s, limit=20_000)
    gaps = np.diff([0.0] + [f.time_s for f in failures])
    mean, se = gaps.mean(), gaps.std(ddof=1) / math.sqrt(len(gaps))
    assert abs(mean - 3600) < 4 * se
    # Memoryless superposition: gaps have coefficient of variation 1.
    assert gaps.std() / mean == pytest.approx(1.0, abs=0.03)
    # Victims are uniform over all 8 nodes.
    counts = np.bincount([f.nodes[0] for f in failures], minlength=8)
    assert counts.min() > 0.9 * len(failures) / 8


def test_weibull_lifetimes_have_the_configured_mean():
    s = scenario(
        "smoke",
        "failures.0={kind: weibull, shape: 0.7, role: emb_ps, node_mtbf: 10 h}",
    )
    failures = _draw(s, limit=20_000)
    assert all(4 <= f.nodes[0] < 8 for f in failures)
    per_node = {}
    for f in failures:
        per_node.setdefault(f.nodes[0], []).append(f.time_s)
    lifetimes = np.concatenate([np.diff([0.0] + times) for times in per_node.values()])
    se = lifetimes.std(ddof=1) / math.sqrt(len(lifetimes))
    assert abs(lifetimes.mean() - 36000) < 4 * se
    # Shape 0.7 < 1: more variable than exponential (CV = 1.46 for k = 0.7).
    assert lifetimes.std() / lifetimes.mean() == pytest.approx(1.46, abs=0.08)


def _failures_in(s, rep: int, until_s: float) -> int:
    """Failures of replication ``rep`` up to ``until_s`` (drawn only that far)."""
    streams = [stream(s.run.seed, rep, Purpose.FAILURES, i) for i in range(len(s.failures))]
    seq = failure_sequence(s.failures, streams, s)
    return sum(1 for _ in itertools.takewhile(lambda f: f.time_s <= until_s, seq))


def _weibull(shape: float, start: str = "equilibrium"):
    return scenario(
        "prod50h",
        f"failures.0={{kind: weibull, role: any, job_mtbf: 5 h, shape: {shape}, start: {start}}}",
    )


@pytest.mark.parametrize("shape", [0.7, 2.0])
def test_weibull_nodes_in_equilibrium_fail_at_the_mtbfs_rate_from_the_start(shape):
    """A new user's job_mtbf 5 h, shape 0.7 saw 19 failures in 50 h, not 10: every node was
    new at t = 0. In equilibrium (the default) a node's first failure comes after what is
    left of a lifetime in progress, whose mean is MTBF (1 + CV²) / 2, and the job sees
    50 h / 5 h = 10 failures on average, as planned."""
    s = _weibull(shape)
    mean_s = 5 * 3600 * 38  # job_mtbf × nodes
    k = shape
    cv2 = math.gamma(1 + 2 / k) / math.gamma(1 + 1 / k) ** 2 - 1
    source = s.failures[0]
    first = np.concatenate(
        [source.lifetime_block(np.random.default_rng(i), s, first=True)[:, 0] for i in range(300)]
    )
    se = first.std(ddof=1) / math.sqrt(len(first))
    assert abs(first.mean() - mean_s * (1 + cv2) / 2) < 4 * se
    later = source.lifetime_block(np.random.default_rng(0), s, first=True)[:, 1:]
    assert later.shape == (38, 7)  # the rest of the block: whole lifetimes
    counts = np.array([_failures_in(s, rep, 50 * 3600) for rep in range(600)])
    se = counts.std(ddof=1) / math.sqrt(len(counts))
    assert abs(counts.mean() - 10.0) < 4 * se


def test_weibull_nodes_new_at_the_start_fail_more_early_with_infant_mortality():
    """``start: new``: every node is new at t = 0; with k = 0.7 the first 50 h hold about
    18.5 failures, not 10 (each node's first failure is before 50 h with probability
    1 - exp(-(50 h / λ)^0.7) = 0.37, λ = 190 h / Γ(1 + 1/0.7), 14.1 of the 38 nodes, and
    renewals add to it)."""
    s = _weibull(0.7, "new")
    counts = np.array([_failures_in(s, rep, 50 * 3600) for rep in range(300)])
    scale_h = 190 / math.gamma(1 + 1 / 0.7)
    first_failures = 38 * (1 - math.exp(-((50 / scale_h) ** 0.7)))
    assert first_failures == pytest.approx(14.1, abs=0.05)
    assert counts.mean() > first_failures + 2  # and renewals after them


def test_scheduled_count_failures_take_distinct_nodes_of_the_role():
    s = scenario("prod50h")
    failures = _draw(s)
    assert len(failures) == 5
    assert all(0 <= f.time_s <= 50 * 3600 for f in failures)
    assert [f.time_s for f in failures] == sorted(f.time_s for f in failures)
    for f in failures:
        assert len(set(f.nodes)) == 4
        assert all(20 <= n < 38 for n in f.nodes)  # embedding PS only
    assert job_mtbf_s(s) == pytest.approx(10 * 3600)


def test_scheduled_explicit_times_and_victims():
    s = scenario(
        "smoke",
        "failures.0={kind: scheduled, times: [2 h, 30 min],"
        " nodes: [[emb_ps1], [trainer0, emb_ps3]]}",
    )
    failures = _draw(s)
    assert [(f.time_s, f.nodes) for f in failures] == [(1800.0, (0, 7)), (7200.0, (5,))]


def test_scheduled_victims_are_distinct_and_never_none():
    """A victim listed twice counted two failed nodes (CPR reloaded one shard), and an empty
    list was a failure of nothing that still rolled full checkpointing back."""
    from ftsim.scenario.loader import ScenarioError

    def problems(nodes: str) -> list:
        with pytest.raises(ScenarioError) as refused:
            scenario("smoke", f"failures.0={{kind: scheduled, times: [1 h, 2 h], nodes: {nodes}}}")
        return refused.value.problems

    assert problems("[[emb_ps1, trainer0, emb_ps1], [trainer2]]") == [
        ("failures.0.nodes.0.2", "emb_ps1 is already a victim (nodes.0.0)")
    ]
    assert problems("[[trainer0], []]") == [
        ("failures.0.nodes.1", "a failure needs at least one victim (got [])")
    ]


def test_even_spacing():
    s = scenario("smoke", "failures.0={kind: scheduled, count: 3, spacing: even}")
    assert [f.time_s for f in _draw(s)] == pytest.approx([3600, 7200, 10800])


def test_correlated_domain_failures_take_the_whole_rack():
    s = scenario(
        "smoke",
        "failures.0={kind: correlated, role: any, domain_size: 4, domain_mtbf: 2 h}",
    )
    failures = _draw(s, limit=4000)
    racks = {(0, 1, 2, 3), (4, 5, 6, 7)}
    assert {f.nodes for f in failures} == racks
    gaps = np.diff([0.0] + [f.time_s for f in failures])
    assert gaps.mean() == pytest.approx(3600, rel=0.06)  # two racks, 2 h each


def test_uneven_domains_plan_the_nodes_a_failure_takes_on_average():
    """8 nodes in domains of 3 are domains of 3, 3 and 2: a failure takes 8/3 nodes on
    average, which planning (CPR's m) must use; it used 3 for every domain. Per role, the
    planned victims are the drawn failures' mean."""
    s = scenario(
        "smoke",
        "failures.0={kind: correlated, role: any, domain_size: 3, domain_mtbf: 2 h}",
    )
    source = s.failures[0]
    assert source.victims(s, "any") == pytest.approx(8 / 3, rel=1e-12)
    failures = _draw(s, limit=20_000)
    trainers = s.cluster.trainers
    for role, mine in (("trainer", lambda n: n < trainers), ("emb_ps", lambda n: n >= trainers)):
        drawn = np.array([sum(map(mine, f.nodes)) for f in failures])
        se = drawn.std(ddof=1) / math.sqrt(len(drawn))
        assert abs(drawn.mean() - source.victims(s, role)) < 4 * se


def test_operations_warn_when_other_sources_restart_weibull_lifetimes():
    """Under cluster operations another source's failure puts a new host in, whose Weibull
    lifetime starts anew: with shape 0.5 the source fails more often than its MTBF says
    (0.57 per hour for 0.4 in the fidelity audit). Said where it happens, not otherwise."""
    from ftsim.scenario.notices import ScenarioWarning

    weibull = "{kind: weibull, role: any, job_mtbf: 5 h, shape: 0.5}"
    both = f"failures=[{weibull}, {{kind: exponential, role: any, job_mtbf: 5 h}}]"
    with pytest.warns(ScenarioWarning, match=r"failures\.0\.shape: .*failures\.1 replace"):
        scenario("operations", both)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ScenarioWarning)
        scenario("operations", f"failures=[{weibull}]")  # alone: its own renewals
        scenario("prod50h", both)  # no operations: each source keeps its lifetimes


def test_trace_replay(tmp_path):
    (tmp_path / "trace.csv").write_text("time_h,node\n0.5,trainer1\n1.5,emb_ps2\n")
    data = read_yaml(SCENARIOS / "smoke.yaml")
    data["failures"] = [{"kind": "trace", "file": "trace.csv"}]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    s = load_scenario(tmp_path / "s.yaml")
    assert [(f.time_s, f.nodes) for f in _draw(s)] == [(1800.0, (1,)), (5400.0, (6,))]


def test_sources_are_independent_streams():
    one = scenario("smoke")
    two = scenario("smoke", "failures.1={kind: scheduled, count: 2}")
    first = [f for f in _draw(two, limit=60) if f.source == "exponential"]
    assert first == _draw(one, limit=len(first))


def test_replications_differ_and_repeat():
    s = scenario("smoke")
    assert _draw(s, rep=0, limit=50) == _draw(s, rep=0, limit=50)
    assert _draw(s, rep=0, limit=50) != _draw(s, rep=1, limit=50)


def test_every_failure_source_says_how_often_it_fails():
    """The event budget check of the scenario names a source's rate field and needs its
    expected failures: every kind of source must provide both (not the base class's)."""
    import typing

    from ftsim.sim.failures import FailureSourceConfig, _Source

    kinds = typing.get_args(typing.get_args(FailureSourceConfig)[0])
    assert len(kinds) >= 6
    for kind in kinds:
        assert kind.rate_field is not _Source.rate_field, kind.__name__


def test_a_lazy_stream_draws_what_its_stream_draws_and_is_made_on_first_use(monkeypatch):
    import ftsim.sim.rng as rng

    made = []
    monkeypatch.setattr(rng, "stream", lambda *key: made.append(key) or stream(*key))
    lazy = LazyStream(7, 3, Purpose.POLICY, 2)
    assert made == []  # nothing drawn, nothing made
    eager = stream(7, 3, Purpose.POLICY, 2)
    assert lazy.random(5).tolist() == eager.random(5).tolist()
    assert [g.random() for g in lazy.spawn(2)] == [g.random() for g in eager.spawn(2)]
    assert made == [(7, 3, Purpose.POLICY, 2)]  # once


@pytest.mark.parametrize("drawn", [False, True])
def test_a_lazy_stream_survives_pickle_and_copy(drawn):
    """A policy holding its stream can be copied or sent to another process, drawn from
    or not, and goes on with the same draws."""
    lazy, eager = LazyStream(7, 3, Purpose.POLICY), stream(7, 3, Purpose.POLICY)
    if drawn:
        assert lazy.random() == eager.random()
    for twin in (pickle.loads(pickle.dumps(lazy)), copy.deepcopy(lazy)):
        assert twin.random(3).tolist() == copy.deepcopy(eager).random(3).tolist()


def test_a_constant_rescheduling_delay_draws_nothing_and_the_others_draw_once():
    """Constant delays leave the stream untouched (so it is never made); a random kind draws
    exactly one uniform per failure, so its stream stays aligned with the failures."""
    for kind, draws in (("constant", 0), ("exponential", 1), ("lognormal", 1)):
        s = scenario("smoke", f"cluster.reschedule={{kind: {kind}, mean: 2 min, cv: 0.5}}")
        generator, twin = stream(1, 0, Purpose.RESCHEDULE), stream(1, 0, Purpose.RESCHEDULE)
        s.cluster.reschedule.sample(generator)
        twin.random(draws)
        assert generator.bit_generator.state == twin.bit_generator.state, kind
