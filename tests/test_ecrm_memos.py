"""ECRM's replications made cheaper: a range's interference started by the job at the end of
its switch, memos that stay bounded at 100× nodes, compact per-shard arrays. Each gives the
same runs, bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ftsim.sim.cluster as cluster
import ftsim.sim.network as network
import ftsim.stripes as stripes
from ftsim.experiments.prepare import prepare
from ftsim.policies.ecrm import Ecrm, common_part, compact_common_part
from ftsim.stripes import CompactArray, Recent
from tests.conftest import scenario
from tests.test_ecrm_ranges import BUSY  # ranges of several failures overlap, take-overs

VARIANTS = [
    (),
    ("policies.0.fallback=rollback",),
    ("policies.0.layout=grouped", "policies.0.group_size=4"),
    ("policies.0.freeze=false",),
    ("cluster.racks={size: 8}", "policies.0.flow_bandwidth=200 Mbit/s"),
]


def _runs(extra: tuple[str, ...], reps: int = 3) -> list[tuple]:
    """Row, timeline and SimPy events of replications 0 … reps − 1, prepared once as a run
    prepares them (so the memos carry over from one replication to the next)."""
    prepared = prepare(scenario("prod50h", *BUSY, *extra), 0)
    out = []
    for rep in range(reps):
        sim = prepared.replicate(rep).run()
        out.append((sim.row(), sim.timeline, next(sim.env._eid)))
    return out


def _deferred(patch, switched=Ecrm._switched) -> None:
    """The step the job takes at the end of a range switch (start the range, or end the
    rebuild) taken instead by an event's callback, after the job has started training
    again, as the rebuild's process did when the switch's event resumed it: the range's
    slowdown then re-plans the compute just started."""

    def later(self, sim, switch):
        event = sim.event()
        event.callbacks.append(lambda _: switched(self, sim, switch))
        event.succeed()

    patch.setattr(Ecrm, "_switched", later)


@pytest.mark.parametrize("extra", VARIANTS)
def test_the_job_taking_the_step_at_a_switchs_end_changes_no_result(extra):
    """Rows and timelines are the same, bit for bit, whether the job starts a range (or ends
    the rebuild) as it ends the switch, before it trains again, or an event does after it
    started training (which then re-planned that compute at once); with freeze, three
    events fewer per range (without, or with no rebuild at all: every failure rolls back,
    as many)."""
    hooked = _runs(extra)
    with pytest.MonkeyPatch.context() as patch:
        _deferred(patch)
        plain = _runs(extra)
    assert [run[:2] for run in hooked] == [run[:2] for run in plain]
    events, before = sum(run[2] for run in hooked), sum(run[2] for run in plain)
    if {"policies.0.freeze=false", "policies.0.fallback=rollback"} & set(extra):
        assert events == before
    else:
        assert events < before


def test_the_comparison_sees_a_range_started_without_its_slowdown(monkeypatch):
    """The check above fails when the job starts a range without working out the slowdown
    it brings (a planted bug: training then goes on at the rate without the range)."""
    plain = _runs(())
    start = Ecrm._start_range

    def forgetful(self, sim, rebuild):
        if sim.env.active_process is not sim._job:
            return start(self, sim, rebuild)
        self._update = lambda sim: None
        try:
            start(self, sim, rebuild)
        finally:
            del self._update

    monkeypatch.setattr(Ecrm, "_start_range", forgetful)
    assert [run[:2] for run in _runs(())] != [run[:2] for run in plain]


@pytest.mark.parametrize("extra", VARIANTS[:3])
def test_memos_stay_bounded_and_evicting_changes_no_result(extra, monkeypatch):
    """With tiny bounds (2 repeated transfers, 8 checked routes, 2 whole arrays per memo)
    every memo stays within its bound and the runs are the same as with the defaults; the
    rebuild plans and reads every shard keeps are compact (a few exceptions each, not N
    entries)."""
    expected = _runs(extra, reps=2)
    monkeypatch.setattr(cluster, "REPEATED_SIZE", 2)
    monkeypatch.setattr(network, "_CHECKED_SIZE", 8)
    monkeypatch.setattr(stripes, "RECENT_SIZE", 2)
    prepared = prepare(scenario("prod50h", *BUSY, *extra), 0)
    got = []
    for rep in range(2):
        sim = prepared.replicate(rep).run()
        got.append((sim.row(), sim.timeline, next(sim.env._eid)))
        routes, plan = prepared.routes, prepared.plan
        assert len(routes.repeated) <= 2
        assert len(routes.topology.checked) <= 8
        assert len(plan._rebuilds._whole) <= 2 and len(plan._common) <= 2
        assert len(plan.stripes._read_memo._whole) <= 2
    assert got == expected
    n = plan.n_shards
    kept = [arrays for _, *fields in plan._rebuilds._compact.values() for arrays in fields]
    compact = [a for a in kept if isinstance(a, CompactArray)]
    compact += plan.stripes._read_memo._compact.values()
    assert len(compact) >= (3 if "policies.0.fallback=rollback" in extra else 100)
    assert all(len(a.positions) <= n // 4 for a in compact)


def test_recent_keeps_the_most_recently_used():
    """An entry read again is kept over an older one."""
    memo = Recent(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1
    memo.put("c", 3)
    assert set(memo) == {"a", "c"} and memo.get("b") is None


SPECIAL = [0.0, -0.0, 1.5, 2.0, np.nan, np.inf, 3.0e-300, 2.5e9]


def _bits(array) -> bytes:
    return np.asarray(array, dtype=np.float64).tobytes()


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.sampled_from(SPECIAL) | st.floats(), max_size=40), data=st.data())
def test_a_compact_array_gives_back_every_bit(values, data):
    """:meth:`CompactArray.array` of :meth:`CompactArray.of` an array is the array, bit for
    bit (-0.0, NaN of any payload and infinities included), read-only; :meth:`CompactArray.
    at` any positions, its entries there."""
    array = np.array(values, dtype=np.float64)
    compact = CompactArray.of(array)
    back = compact.array()
    assert _bits(back) == _bits(array) and not back.flags.writeable
    if len(array):
        indices = data.draw(st.lists(st.integers(0, len(array) - 1), max_size=10))
        assert _bits(compact.at(np.array(indices, dtype=int))) == _bits(array[indices])


def test_a_compact_array_by_float_equality_would_lose_a_sign():
    """Telling positions apart by ``!=`` on floats (a planted bug) gives -0.0 back as 0.0:
    the round trip above checks bits."""
    array = np.array([0.0, 0.0, -0.0])
    compact = CompactArray.of(array)
    wrong = np.full(3, compact.common)
    by_floats = np.flatnonzero(array != compact.common)
    wrong[by_floats] = array[by_floats]
    assert _bits(wrong) != _bits(array) and _bits(compact.array()) == _bits(array)


@settings(max_examples=500, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, -0.0, 1.0, 2.0, 3.5, 7.0]), min_size=1, max_size=30))
def test_the_common_part_of_a_compact_array_is_the_plain_one(values):
    """When :func:`compact_common_part` answers, its part and positions are those of
    :func:`common_part` of the whole array, bit for bit (it answers only when its common
    value is positive and more frequent than every other entry together)."""
    array = np.array(values)
    found = compact_common_part(CompactArray.of(array))
    if found is not None:
        part, positions = common_part(array)
        assert found[0] == part and _bits([found[0]]) == _bits([part])
        assert np.array_equal(found[1], positions) and found[1].dtype == positions.dtype


def test_a_common_part_from_half_the_servers_would_differ():
    """At exactly half (a planted bug: ``>=``) the compact array's common value may be the
    larger of two equally frequent ones, while the plain part is the smaller."""
    array = np.array([1.0, 1.0, 2.0, 2.0])
    compact = CompactArray.of(array)
    assert compact.common == 2.0 and common_part(array)[0] == 1.0
    assert compact_common_part(compact) is None
