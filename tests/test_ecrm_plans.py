"""A shard's rebuild plan made cheaper (100× nodes plan ~1,800 of them): a sum in order in
NumPy, a compact array's common value found from one candidate when it is a majority, equal
caps not sorted. Each gives the same floats and arrays, bit for bit."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftsim.experiments.prepare import prepare
from ftsim.policies.ecrm import Ecrm, EcrmPlan, RebuildPlan, plan_rebuild, sequential_sum
from ftsim.stripes import CompactArray
from tests.conftest import scenario
from tests.test_ecrm_memos import VARIANTS, _runs

FLOATS = st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, 1.1])


def _bits(values) -> bytes:
    return np.asarray(values, dtype=np.float64).tobytes()


@settings(max_examples=300, deadline=None)
@given(values=st.lists(FLOATS | st.sampled_from([np.nan, np.inf, -np.inf]), max_size=60))
def test_a_sequential_sum_is_pythons_sum_bit_for_bit(values):
    """``sequential_sum`` of an array is Python's ``sum`` of its list (3.11: left to right
    from 0), bit for bit: signs of zero and overflow to infinity included (a NaN is a NaN;
    its sign bit may differ)."""
    with np.errstate(over="ignore", invalid="ignore"):
        got = sequential_sum(np.array(values, dtype=np.float64))
    want = float(sum(values))
    assert type(got) is float
    assert _bits([got]) == _bits([want]) or (math.isnan(got) and math.isnan(want))


def test_a_pairwise_sum_would_differ_from_pythons():
    """``np.sum`` (a planted bug: it adds pairwise) gives other last bits on a plan's 1,800
    sizes of mixed magnitudes; the sum in order does not."""
    sizes = np.random.default_rng(7).lognormal(14, 3, 1800)
    assert sequential_sum(sizes) == sum(sizes.tolist())
    assert float(np.sum(sizes)) != sum(sizes.tolist())


def _three_candidates(array: np.ndarray) -> CompactArray:
    """:meth:`CompactArray.of` as it reads: of the entries at a half, a quarter and three
    quarters of the array (in that order), the first with the fewest others."""
    floats = np.array(array, dtype=np.float64).ravel()
    bits = floats.view(np.int64)
    n = len(bits)
    best, fewest = 0, n + 1
    for at in (n // 2, n // 4, 3 * n // 4):
        others = np.count_nonzero(bits != bits[at])
        if others < fewest:
            best, fewest = at, others
    positions = np.flatnonzero(bits != bits[best])
    return CompactArray(n, float(floats[best]), positions, floats[positions])


def _same(a: CompactArray, b: CompactArray) -> bool:
    return (
        a.size == b.size
        and _bits([a.common]) == _bits([b.common])
        and np.array_equal(a.positions, b.positions)
        and a.positions.dtype == b.positions.dtype
        and _bits(a.values) == _bits(b.values)
    )


@settings(max_examples=500, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, -0.0, 1.0, 2.5, np.nan]), min_size=1, max_size=24))
def test_a_compact_array_keeps_the_three_candidates_choice(values):
    """:meth:`CompactArray.of`, which tries the other two candidates only when the middle
    entry is no majority, makes the same compact array as trying all three: same common
    value, positions and values (the choice decides the common part ECRM's ranges use)."""
    array = np.array(values)
    assert _same(CompactArray.of(array), _three_candidates(array))


def test_a_middle_entry_kept_without_a_majority_would_be_another_choice():
    """Keeping the middle entry when it is not a majority (a planted bug) gives another
    compact array than the three candidates' (the same array back, but its common value
    is the minority one)."""
    array = np.array([1.0, 1.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0])
    middle = CompactArray(8, 5.0, np.flatnonzero(array != 5.0), array[array != 5.0])
    assert _same(CompactArray.of(array), _three_candidates(array))
    assert not _same(middle, _three_candidates(array))
    assert CompactArray.of(array).common == 1.0


def _plan(*extra: str):
    """prod50h's ECRM plan (policy 4), with overrides of its parameters."""
    sets = [f"policies.4.{item}" for item in extra]
    return prepare(scenario("prod50h", "trainer.enabled=false", *sets), 4).plan


def _fields(plan: RebuildPlan) -> tuple:
    return (
        plan.ranges,
        _bits(plan.range_B),
        _bits([plan.transfer_s, plan.gap_s]),
        _bits(plan.pauses_s),
        _bits(plan.busy),
    )


@pytest.mark.parametrize("extra", [(), ("freeze=false",), ("rebuild_scope=values", "k=3")])
def test_a_plans_switch_pauses_worked_out_once_are_each_shards(extra):
    """Every shard's rebuild as the plan keeps it, its switch pauses worked out once for all
    shards, is :func:`plan_rebuild` working them out for the shard, bit for bit."""
    plan = _plan(*extra)
    inputs = plan.inputs
    for shard in range(plan.n_shards):
        alone = plan_rebuild(
            plan.params,
            inputs.job,
            inputs.cluster,
            plan.layout.shard_bytes,
            plan.stripes.rebuild_reads(shard),
            plan.parity_Bps,
        )
        assert _fields(plan.rebuild(shard)) == _fields(alone)


@pytest.mark.parametrize("extra", [(), ("layout=grouped",), ("rebuild_scope=values", "k=3")])
def test_a_plans_range_parts_are_each_shards_range_bytes(extra):
    """:meth:`EcrmPlan.range_parts` (the common part and the others by survivor, in
    Python floats) gives back every shard's ``range_B``, bit for bit, at every survivor."""
    plan = _plan(*extra)
    for shard in range(plan.n_shards):
        common, others = plan.range_parts(shard)
        parts = [others.get(h, common) for h in range(plan.n_shards)]
        assert _bits(parts) == _bits(plan.rebuild(shard).range_B)


def test_switch_pauses_kept_from_another_layout_would_differ(monkeypatch):
    """Pauses worked out once for another shard size (a planted bug) are not the shard's:
    the check above compares them."""
    plan, other = _plan(), _plan("rebuild_ranges=5")
    monkeypatch.setattr(plan, "_pauses_alone", other._pauses_alone)
    inputs = plan.inputs
    reads = plan.stripes.rebuild_reads(0)
    args = (plan.params, inputs.job, inputs.cluster, plan.layout.shard_bytes, reads)
    assert _fields(plan.rebuild(0)) != _fields(plan_rebuild(*args, plan.parity_Bps))


def _fresh_update(self, sim) -> None:
    """``Ecrm._update`` as it was: the slowdown made anew each time from the plan's parts."""
    out = {"other": self.plan.parity_slowdown} if self.plan.parity_slowdown else {}
    if self.degraded:
        reads = self.plan.reads_slowdown(self.degraded.items())
        out["degraded"] = reads + self.plan.sending_slowdown(tuple(self._sending.values()))
    if out != self._slowdown:
        self._slowdown = out
        sim.replan()


def _fresh_pause_s(self, shards, j) -> float:
    """``EcrmPlan.switch_pause_s`` as it was: one switch's pauses summed each time."""
    return sum(self.compact_rebuild(x).pauses_s[j] for x in shards)


@pytest.mark.parametrize("extra", VARIANTS[:3])
def test_slowdowns_and_pauses_kept_per_state_change_no_result(extra, monkeypatch):
    """Rows, timelines and SimPy events are the same, bit for bit, whether the plan keeps
    the slowdown of each (degraded, sending) state and every switch's pause of a set of
    shards, or the replication works them out each time as before."""
    kept = _runs(extra)
    monkeypatch.setattr(Ecrm, "_update", _fresh_update)
    monkeypatch.setattr(EcrmPlan, "switch_pause_s", _fresh_pause_s)
    assert kept == _runs(extra)


def test_a_slowdown_kept_without_the_ranges_moving_fails_the_check(monkeypatch):
    """A state's slowdown kept by its degraded shards alone (a planted bug: the ranges on
    their way left out of the key) changes the runs: the check above compares them."""
    kept = _runs(())
    slowdown_while = EcrmPlan.slowdown_while

    def by_degraded(self, degraded, sending):
        return self._slowdowns.get((degraded, ())) or slowdown_while(self, degraded, ())

    monkeypatch.setattr(EcrmPlan, "slowdown_while", by_degraded)
    assert kept != _runs(())
