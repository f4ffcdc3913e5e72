"""Failure presets: each reproduces its published statistic on its own cluster and period,
its causes in their published proportions, and maps onto a scenario's nodes as documented."""

import dataclasses
import functools
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from ftsim.sim import presets
from ftsim.sim.engine import simulate
from ftsim.sim.failures import failure_sequence, job_mtbf_s
from ftsim.sim.rng import Purpose, stream
from tests.conftest import scenario

REPS = {"llama3_405b": 40, "meta_rsc1": 20, "meta_rsc2": 20}
"""Replications of each preset's measured cluster and period (the CI narrows with them)."""


def _on_its_cluster(preset: presets.Preset, *extra: str):
    """The smoke scenario resized to the preset's measured cluster, failing by the preset."""
    nodes = preset.statistic.nodes
    return scenario(
        "smoke",
        f"cluster.trainers={nodes - 1}",
        "cluster.emb_ps=1",
        f"failures=[{{preset: {preset.name}}}]",
        *extra,
    )


def _counts(s, days: float, reps: int) -> list[list[str]]:
    """Per replication, the source label of every failure in the first ``days`` days."""
    out = []
    for rep in range(reps):
        seq = failure_sequence(s.failures, [stream(s.run.seed, rep, Purpose.FAILURES, 0)], s)
        inside = itertools.takewhile(lambda f: f.time_s <= days * presets.DAY_S, seq)
        out.append([f.source for f in inside])
    return out


@functools.cache
def _recovered(preset: presets.Preset) -> tuple[float, float, list[list[str]]]:
    """Mean failure count over the preset's cluster and period, the 99% t half-width, and
    the failures' labels."""
    labels = _counts(_on_its_cluster(preset), preset.statistic.days, REPS[preset.name])
    counts = np.array([len(x) for x in labels], dtype=float)
    half = stats.t.ppf(0.995, len(counts) - 1) * counts.std(ddof=1) / math.sqrt(len(counts))
    return counts.mean(), half, labels


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_each_preset_recovers_its_published_statistic_on_its_own_cluster(name):
    """419 interruptions in 54 days on 2,048 nodes (Llama 3); 6.50 and 2.34 failures per
    1000 node-days (RSC-1, RSC-2) on their ~2,000 and ~1,000 nodes over 11 months."""
    preset = presets.PRESETS[name]
    mean, half, _ = _recovered(preset)
    assert abs(mean - preset.statistic.count) <= half, (mean, half)


def test_a_wrong_rate_fails_the_statistic_check(monkeypatch):
    """The check detects a 5% error in a preset's rate (e.g. 16,384 GPUs read as 15,600)."""
    right = presets.LLAMA3_405B
    wrong = dataclasses.replace(right, rate_per_node_day=right.rate_per_node_day * 1.05)
    monkeypatch.setitem(presets.PRESETS, right.name, wrong)
    mean, half, _ = _recovered(wrong)
    assert abs(mean - right.statistic.count) > half


def _cause_fit(labels: list[list[str]], table) -> float:
    """p-value of a chi-square test: the pooled failures' causes against ``table``'s
    proportions."""
    pooled = [label for rep in labels for label in rep]
    observed = [pooled.count(f"llama3_405b: {cause}") for cause, _ in table]
    total = sum(w for _, w in table)
    expected = [len(pooled) * w / total for _, w in table]
    assert sum(observed) == len(pooled)  # every failure has one of the table's causes
    return stats.chisquare(observed, expected).pvalue


def test_llama3_causes_follow_table_5_counts():
    """Every failure is labelled with a Table 5 cause, in Table 5's proportions (chi-square
    over 40 × 419 failures); the printed percentages (faulty GPU 30.1%) are refused."""
    _, _, labels = _recovered(presets.LLAMA3_405B)
    assert _cause_fit(labels, presets.LLAMA3_405B_TABLE5) > 0.01
    printed = [
        ("faulty GPU", 30.1),
        *((c, n / 419 * 100) for c, n in presets.LLAMA3_405B_TABLE5[1:]),
    ]
    assert _cause_fit(labels, printed) < 0.01


def test_shares_use_the_counts_not_the_misprinted_percentage():
    shares = dict(presets.LLAMA3_405B.shares())
    assert shares["faulty GPU"] == pytest.approx(148 / 419)
    assert sum(shares.values()) == pytest.approx(1.0)


def test_the_rate_maps_onto_nodes_of_the_role_in_proportion_to_gpus():
    """role: trainer fails the 4 trainers only; gpus_per_node: 4 halves the 8-GPU rate;
    scale multiplies it. Job MTBF = 1 / (nodes × rate per node)."""
    day = presets.DAY_S
    rate = presets.META_RSC1.rate_per_node_day / day  # per 8-GPU node per second
    s = scenario("smoke", "failures=[{preset: meta_rsc1}]")
    assert job_mtbf_s(s) == pytest.approx(1 / (8 * rate))
    s = scenario("smoke", "failures=[{preset: meta_rsc1, role: trainer, gpus_per_node: 4}]")
    assert job_mtbf_s(s) == pytest.approx(1 / (4 * rate / 2))
    s = scenario("smoke", "failures=[{preset: meta_rsc1, scale: 3}]")
    assert job_mtbf_s(s) == pytest.approx(1 / (8 * rate * 3))
    s = scenario("smoke", "failures=[{preset: meta_rsc1, role: trainer}]", "run.seed=3")
    assert all(f.nodes[0] < 4 for f in _draw_some(s, 200))


def _draw_some(s, n):
    seq = failure_sequence(s.failures, [stream(s.run.seed, 0, Purpose.FAILURES, 0)], s)
    return list(itertools.islice(seq, n))


def test_a_simulated_run_records_each_failures_cause():
    """The engine sees the preset's failures with their labels (``ftsim trace``'s source)."""
    s = scenario("smoke", "failures=[{preset: llama3_405b, scale: 2000}]")
    sim = simulate(s, 0, 0)
    assert sim.failures_seen
    causes = {name for name, _ in presets.LLAMA3_405B_TABLE5}
    for failure in sim.failures_seen:
        preset, _, cause = failure.source.partition(": ")
        assert preset == "llama3_405b" and cause in causes


def test_the_shorthand_and_the_kind_load_the_same_source():
    a = scenario("smoke", "failures=[{preset: meta_rsc2}]")
    b = scenario("smoke", "failures=[{kind: preset, preset: meta_rsc2}]")
    assert a.failures == b.failures
    assert a.failures[0].model_dump()["kind"] == "preset"


def test_show_presets_lists_each_preset_with_its_source_and_mapping(capsys):
    from ftsim.cli import main

    assert main(["show", "presets"]) == 0
    out = capsys.readouterr().out
    assert "proportional to GPU count" in out
    for name, preset in presets.PRESETS.items():
        block = out.split(f"\n{name}: ")[1].split("\n\n")[0]
        for field in ("source:", "measured:", "assumes:", "check:"):
            assert field in block, (name, field)
        assert preset.source.split(",")[0] in block
    assert "35.3%  faulty GPU" in out
