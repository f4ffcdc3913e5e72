"""ECRM: parity traffic, degraded recovery, per-row fall-back, rebuild ownership, stripe
layouts, and exact decoding on the real model."""

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftsim.cosim.replay import cosimulate, run_models
from ftsim.experiments.runner import simulate
from ftsim.notices import RenamedField
from ftsim.policies.ecrm import (
    DecodeShards,
    EcrmParams,
    EcrmPlan,
    EcrmSide,
    quick_memcpy_s,
    range_arrays_B,
    switch_pauses_s,
)
from ftsim.scenario.loader import ScenarioError, load_scenario
from ftsim.sim.accounting import CATEGORIES
from ftsim.stripes import StripeLayout
from ftsim.trainer import ShardedEmbeddings, ShardingConfig, SparseOptimizerConfig, Trainer
from ftsim.trainer.parity import ParityCode
from tests.conftest import SCENARIOS, scenario
from tests.test_cosim import SMALL_TRAINER
from tests.trainer.conftest import small_config

SINGLE_FAILURES = "failures=[{kind: scheduled, times: [10 h, 30 h], nodes: [[emb_ps3], [emb_ps7]]}]"
NIC = 3.125e9  # 25 Gbit/s


def _ecrm(*extra):
    return scenario(
        "prod50h", "policies=[{kind: full}, {kind: ecrm, k: 2, r: 1}]", SINGLE_FAILURES, *extra
    )


def _at(*times_and_nodes: tuple[str, list[str]]) -> str:
    """A scheduled failure source from (time, victims) pairs."""
    times = ", ".join(t for t, _ in times_and_nodes)
    nodes = ", ".join("[" + ", ".join(v) + "]" for _, v in times_and_nodes)
    return f"failures=[{{kind: scheduled, times: [{times}], nodes: [{nodes}]}}]"


class Rates:
    """prod50h's ECRM costs recomputed from the scenario's numbers (k = 2, r = 1, rotating,
    the policy's defaults; ``unique`` touched rows per lookup), independent of the policy's
    code. A shard holds 33 M · 26 / 18 rows of 512 B of values and 4 B of row-wise state."""

    def __init__(self, sim, unique: float = 1.0):
        self.shard = shard = sim.layout.shard_bytes
        per_shard = 20480 * 26 * unique / 18  # touched rows per server and iteration
        self.parity = per_shard * 516 / NIC / 0.1
        free = NIC - per_shard * 516 / 0.1  # what the parity stream leaves of a PS NIC
        survivor = per_shard * 512 / NIC / 0.1  # one extra row served per lost lookup
        worker = per_shard / 20 * 512 / NIC / 0.1  # k - 1 = 1 extra row per lost lookup
        decode = 2 * per_shard / 20 * 512 / 20e9 / 0.1  # a worker sums k = 2 rows
        self.read = max(survivor, worker) + decode
        self.traffic = 2 * survivor  # pull + push of a server's touched rows
        # Rebuild of emb_ps3: its data partner emb_ps2 sends 1 row per data row, the 16
        # others 1/16 (parity of its stripes) + 1/16 (data of the stripes whose parity it
        # holds): 3 rows of 516 B per data row, over 10 ranges. The replacement's NIC is the
        # bottleneck (the partner's flow alone still fills it).
        self.range_B = 3 * shard / 10
        self.latency = 50e-6  # prod50h's network latency, once per transfer
        self.transfer = self.range_B / free + self.latency
        self.busy = shard / 10 / self.transfer / NIC  # the partner's share of its NIC
        self.gap = 10 * 100e-6 + self.range_B / 20e9  # 10 batches' latency, then decoding
        # A switch copies a range's values (2.44 GB: two QuickMemcpy blocks, 1 GiB and the
        # rest, together at 8 GB/s each) and its row-wise state (one memcpy at 8 GB/s).
        values, state = shard * 512 / 516 / 10, shard * 4 / 516 / 10
        assert 2**31 <= values < 3 * 2**30
        copy = (values - 2**30) / 8e9 + state / 8e9
        self.pauses = [0.1 + copy] + [0.1 + 2 * copy] * 9 + [0.1 + copy]

    def interference(self) -> float:
        return self.traffic * self.busy / (1 - self.busy)

    def duration(self, share: float = 1.0, shards: int = 1) -> float:
        """Wall seconds of a rebuild of ``shards`` shards' share ``share`` (in step)."""
        moving = share * (self.transfer - self.latency) + self.latency
        return 10 * (moving + share * self.gap) + shards * sum(self.pauses)

    def charged(self, wall_s: float, slowdown: float) -> float:
        """Degraded seconds charged over ``wall_s`` of training at this slowdown."""
        return wall_s * slowdown / (1 + self.parity + slowdown)

    def rebuild_charged(self, share: float = 1.0, shards: int = 1) -> float:
        """Degraded seconds of a rebuild: its switches stop training; during its ranges the
        degraded reads, and the survivors' interference while the flows move."""
        moving = share * (self.transfer - self.latency) + self.latency
        per_range = self.charged(moving, self.read * shards + self.interference())
        per_range += self.charged(share * self.gap, self.read * shards)
        return shards * sum(self.pauses) + 10 * per_range

    def walk_charged(self, wall_s: float) -> float:
        """Degraded seconds of the first ``wall_s`` seconds of a rebuild (cut short)."""
        steps = []
        for pause in self.pauses[:-1]:
            steps += [(pause, None), (self.transfer, self.read + self.interference())]
            steps.append((self.gap, self.read))
        charged = 0.0
        for length, slowdown in steps:
            part = min(length, wall_s)
            charged += part if slowdown is None else self.charged(part, slowdown)
            wall_s -= part
        return charged


def test_single_failures_are_decoded_without_stopping_training():
    sim = simulate(_ecrm(), 1, 0)
    row, rates = sim.row(), Rates(sim)
    assert row["n_fallbacks"] == 0
    assert row["lost_h"] == pytest.approx(0, abs=1e-9)
    assert row["load_h"] == 0 and row["reschedule_h"] == 0  # training never stops
    assert row["parity_mem_frac"] == 0.5
    assert sim.policy.plan.parity_slowdown == pytest.approx(rates.parity)
    # Recovery = rescheduling delay + the rebuild's 10 ranges and 11 switches
    assert row["recovery_s"] == pytest.approx(60 + rates.duration())
    per_failure = rates.charged(60, rates.read) + rates.rebuild_charged()
    assert row["degraded_h"] * 3600 == pytest.approx(2 * per_failure, rel=1e-9)
    # while a shard is rebuilt: its ranges at the degraded rate, no training at a switch
    moving = 10 * rates.transfer / (1 + rates.parity + rates.read + rates.interference())
    waiting = 10 * rates.gap / (1 + rates.parity + rates.read)
    alone = (moving + waiting) * (1 + rates.parity) / rates.duration()
    assert row["degraded_throughput_frac"] == pytest.approx(alone)
    gap = row["ideal_h"] + sum(row[f"{c}_h"] for c in CATEGORIES) - row["wall_h"]
    assert abs(gap) < 1e-9 * row["wall_h"]


def test_range_switches_stop_training_for_exactly_their_pauses():
    """With (almost) no traffic, the degraded time of a rebuild is its switches' pauses,
    to the second: the switches are phases of the job. (The model before charged them as a
    slowdown P/(T + P) spread over the rebuild: P·(T + P)/(T + 2P), 5.56 of 6.51 s.)"""
    tiny = "policies.1.unique_lookup_fraction=1e-9"
    sim = simulate(_ecrm(tiny, _at(("10 h", ["emb_ps3"]))), 1, 0)
    rates = Rates(sim, unique=1e-9)
    switches = [p for p in sim.timeline if p.activity == "range switch"]
    assert [p.end_s - p.start_s for p in switches] == pytest.approx(rates.pauses)
    assert sim.row()["degraded_h"] * 3600 == pytest.approx(sum(rates.pauses), rel=1e-6)
    # the throughput while rebuilding counts a pause as time without training: 1 − P/W
    frac = sim.row()["degraded_throughput_frac"]
    assert frac == pytest.approx(1 - sum(rates.pauses) / rates.duration(), rel=1e-6)


def test_parity_traffic_slowdown_follows_bytes_over_bandwidth():
    sim = simulate(_ecrm("policies.1.unique_lookup_fraction=0.25"), 1, 0)
    job = sim.scenario.job
    rows = job.samples_per_iteration * 26 * 0.25 / 18
    expected = rows * job.mean_row_bytes * 1 / 3.125e9 / job.iteration_s
    assert sim.policy.plan.parity_slowdown == pytest.approx(expected)
    overlapped = simulate(_ecrm("policies.1.parity_overlap=1"), 1, 0).row()
    assert overlapped["other_h"] == 0


def test_a_second_failure_during_a_rebuild_keeps_the_shard_degraded():
    """emb_ps3 fails at 10 h and again 80 s later, while its first rebuild (from 60 s) runs:
    the first rebuild stops there (its range's flows are cancelled, its switches no longer
    served) and must not clear the degraded state; the second rebuild (from 140 s) does."""
    sim = simulate(_ecrm(_at(("10 h", ["emb_ps3"]), ("36080 s", ["emb_ps3"]))), 1, 0)
    row, rates = sim.row(), Rates(sim)
    expected = (
        rates.charged(60, rates.read)  # first replacement on its way
        + rates.walk_charged(20)  # first rebuild, until the second failure
        + rates.charged(60, rates.read)  # second replacement on its way
        + rates.rebuild_charged()  # second rebuild
    )
    assert row["degraded_h"] * 3600 == pytest.approx(expected, rel=1e-9)
    [rebuild] = [p for p in sim.timeline if p.category == "rebuild"]
    assert rebuild.start_s == pytest.approx(10 * 3600 + 140)
    assert rebuild.end_s == pytest.approx(10 * 3600 + 140 + rates.duration())
    assert row["recovery_s"] == pytest.approx(60 + rates.duration())
    assert not sim.policy.degraded and not sim.policy._under_way
    assert not sim.net.net.flows  # the first rebuild's flows did not go on


def test_two_servers_at_once_exceed_r1_and_roll_back_to_the_checkpoint():
    # Under the rotating layout every pair of servers shares a stripe: r = 1 survives one.
    r1, r2 = StripeLayout(18, 2, 1), StripeLayout(18, 4, 2)
    assert not r1.survives({3, 4}) and r1.survives({3})
    assert r2.survives({3, 4}) and not r2.survives({3, 4, 5})
    sim = simulate(
        _ecrm(_at(("30 h", ["emb_ps3", "emb_ps4"])), "policies.1.fallback=rollback"), 1, 0
    )
    row = sim.row()
    assert row["n_fallbacks"] == 1 and row["degraded_h"] == 0
    # Rollback to the fall-back checkpoint taken after 24 h of compute: the compute done
    # between the end of that save and the failure (at the parity-slowed rate) is lost,
    # decodable rows included (a rollback moves the whole model back).
    saved_at = next(p.end_s for p in sim.timeline if p.category == "save")
    lost_s = (30 * 3600 - saved_at) / (1 + sim.policy.plan.parity_slowdown)
    assert row["lost_h"] == pytest.approx(lost_s / 3600)
    assert row["load_h"] == pytest.approx(sim.layout.full_load_s() / 3600)


def test_partial_fallback_reloads_only_the_undecodable_rows():
    """emb_ps3 and emb_ps4 at once (rotating, k = 2, r = 1): their data partners are emb_ps2
    and emb_ps5, and each one's stripes put their parity on the other in 1 of 16 rotations:
    1/16 of each shard's rows are undecodable. Only those rows are reloaded and lose their
    updates; the other 15/16 are decoded and rebuilt after the reload."""
    sim = simulate(
        _ecrm(_at(("30 h", ["emb_ps3", "emb_ps4"])), "policies.1.fallback=partial"), 1, 0
    )
    row, rates, shard = sim.row(), Rates(sim), sim.layout.shard_bytes
    assert sim.policy.plan.stripes.loss({3, 4}).undecodable == {3: 1 / 16, 4: 1 / 16}
    [event] = [e for e in sim.model_events if isinstance(e, DecodeShards)]
    assert event.shards == (3, 4) and event.key == 24 * 3600
    assert row["n_fallbacks"] == 1 and row["undecodable_frac"] == 1 / 16
    assert row["lost_h"] == pytest.approx(0, abs=1e-9)
    lost_s = event.progress_s - event.key
    assert row["pls_model"] == pytest.approx(2 / 16 * lost_s / (50 * 3600 * 18))
    # each replacement reads 1/16 of a shard from storage (4 GB/s each of 8) through its
    # NIC, less the parity updates streaming through it
    reload_s = shard / 16 / (NIC - rates.parity * NIC) + rates.latency
    assert row["load_h"] * 3600 == pytest.approx(reload_s)
    assert row["reschedule_h"] * 3600 == pytest.approx(60)
    # both shards rebuild 15/16 of their rows in step: one transfer per range into the two
    # replacements, each switch pausing for both
    rebuilt = 60 + reload_s + rates.duration(15 / 16, shards=2)
    assert sim.policy.recovery_s == pytest.approx([rebuilt, rebuilt])
    assert row["degraded_h"] > 0


def test_grouped_layout_keeps_failures_in_different_groups_decodable():
    grouped = "policies.1.layout=grouped"  # groups of k + r = 3: {0, 1, 2}, {3, 4, 5}, ...
    two_groups = _at(("30 h", ["emb_ps3", "emb_ps9"]))
    row = simulate(_ecrm(two_groups, grouped, "policies.1.fallback=partial"), 1, 0).row()
    assert row["n_fallbacks"] == 0 and row["pls_model"] == 0 and row["load_h"] == 0
    assert simulate(_ecrm(two_groups), 1, 0).row()["n_fallbacks"] == 1  # rotating
    # Two servers of one group: every stripe of the group lost two members; nothing to
    # decode, both shards reload entirely and nothing is rebuilt.
    one_group = _at(("30 h", ["emb_ps3", "emb_ps4"]))
    sim = simulate(_ecrm(one_group, grouped, "policies.1.fallback=partial"), 1, 0)
    row = sim.row()
    assert row["n_fallbacks"] == 1 and row["undecodable_frac"] == 1.0
    # NIC-bound reads (storage gives each 4 GB/s), less the parity stream on the NIC
    nic_left = NIC - Rates(sim).parity * NIC
    assert row["load_h"] * 3600 == pytest.approx(sim.layout.shard_bytes / nic_left + 50e-6)
    assert row["degraded_h"] == 0 and math.isnan(row["recovery_s"])


def test_group_size_must_divide_the_servers():
    with pytest.raises(ScenarioError, match=r"policies\.1\.group_size: n_shards \(18\) must be"):
        _ecrm("policies.1.layout=grouped", "policies.1.group_size=4")
    with pytest.raises(ScenarioError, match=r"policies\.1\.group_size: .*grouped layout only"):
        _ecrm("policies.1.group_size=3")
    _ecrm("policies.1.layout=grouped", "policies.1.group_size=6")  # valid


# -------------------------------------------------------------------- the stripe layout
def _period(layout: StripeLayout) -> int:
    """Stripes after which the layout repeats."""
    n, k, r = layout.n_shards, layout.k, layout.r
    if layout.kind == "grouped":
        return n
    return n // math.gcd(n, k) * ((n - k) // math.gcd(n - k, r))


def _brute_loss(layout: StripeLayout, failed: set[int]):
    """Undecodable share and reads per helper, counted stripe by stripe over one period."""
    stripes = np.arange(_period(layout))
    data = layout.data_rows(stripes) % layout.n_shards
    parity = layout.parity_shards(stripes)
    undecodable, reads = {}, {}
    for x in failed:
        mine = share = decoded = 0
        reads[x] = np.zeros(layout.n_shards)
        for d, p in zip(data.tolist(), parity.tolist(), strict=True):
            if x not in d:
                continue
            mine += 1
            lost_data = sum(s in failed for s in d)
            if lost_data + sum(s in failed for s in p) > layout.r:
                share += 1
                continue
            decoded += 1
            for s in [s for s in d if s not in failed] + [s for s in p if s not in failed][
                :lost_data
            ]:
                reads[x][s] += 1
        undecodable[x] = share / mine
        reads[x] /= max(decoded, 1)
    return undecodable, reads


@st.composite
def layouts(draw):
    r = draw(st.integers(1, 2))
    if draw(st.booleans()):
        n = draw(st.integers(r + 1, 24))
        return StripeLayout(n, draw(st.integers(1, n - r)), r)
    k = draw(st.integers(1, 4))
    size = draw(st.integers(k + r, k + r + 2))
    return StripeLayout(size * draw(st.integers(1, 4)), k, r, "grouped", size)


@settings(max_examples=150, deadline=None)
@given(layout=layouts(), data=st.data())
def test_loss_matches_stripe_by_stripe_count(layout, data):
    failed = data.draw(st.sets(st.integers(0, layout.n_shards - 1), min_size=1, max_size=6))
    undecodable, _ = _brute_loss(layout, failed)
    assert layout.loss(failed).undecodable == pytest.approx(undecodable, abs=1e-12)
    assert layout.survives(failed) == (max(undecodable.values()) == 0)
    x = data.draw(st.sampled_from(sorted(failed)))
    np.testing.assert_allclose(layout.reads(x), _brute_loss(layout, {x})[1][x], atol=1e-12)


def test_reads_of_a_lone_failure():
    # rotating, N = 18, k = 2: fixed data pairs (2, 3); parity over the 16 other servers
    reads = StripeLayout(18, 2, 1).reads(3)
    assert reads[2] == 1 and reads[3] == 0
    assert np.allclose(np.delete(reads, [2, 3]), 1 / 16)
    grouped = StripeLayout(18, 2, 1, "grouped").reads(3)
    assert grouped.tolist() == [0, 0, 0, 0, 1, 1] + [0] * 12  # the two other group members


def _brute_rebuild_reads(layout: StripeLayout, x: int) -> np.ndarray:
    """Rows read per data row of ``x`` to rebuild every row it held, stripe by stripe over
    a period: its data rows read the other data rows and the first parity row, its parity
    rows the stripe's data rows."""
    stripes = np.arange(_period(layout))
    data = layout.data_rows(stripes) % layout.n_shards
    parity = layout.parity_shards(stripes)
    out, rows = np.zeros(layout.n_shards), 0
    for d, p in zip(data.tolist(), parity.tolist(), strict=True):
        if x in d:
            rows += 1
            for s in [s for s in d if s != x] + p[:1]:
                out[s] += 1
        elif x in p:
            for s in d:
                out[s] += 1
    return out / rows


@settings(max_examples=150, deadline=None)
@given(layout=layouts(), data=st.data())
def test_rebuild_reads_match_stripe_by_stripe_count(layout, data):
    x = data.draw(st.integers(0, layout.n_shards - 1))
    reads = layout.rebuild_reads(x)
    np.testing.assert_allclose(reads, _brute_rebuild_reads(layout, x), atol=1e-12)
    assert reads.sum() == pytest.approx(layout.k + layout.r)  # balanced: r/k parity rows


@pytest.mark.parametrize("layout", [StripeLayout(18, 2, 1), StripeLayout(18, 2, 1, "grouped")])
def test_the_trainer_code_rebuilds_with_the_bytes_the_time_model_counts(layout):
    """Over whole layout periods (2 · 288 and 360 rows per table), the parity code's
    rebuild reads of a shard are ``rebuild_reads`` summed, per data row of the shard."""
    rows = 2 * 288 if layout.kind == "rotating" else 360
    emb = ShardedEmbeddings(
        [rows], 2, ShardingConfig(n_shards=18), SparseOptimizerConfig(), np.random.default_rng(0)
    )
    code = ParityCode(emb, 2, 1, layout=layout.kind)
    per_row = code.rebuild_read_bytes(3) / emb.row_bytes / len(emb.shard_rows(3))
    assert per_row == pytest.approx(layout.rebuild_reads(3).sum())


def test_rebuild_reads_of_ecrecs_five_servers():
    """ECRec's evaluation: 5 PS, k = 2 (stripes wrap around the servers) and k = 4."""
    two = StripeLayout(5, 2, 1)
    np.testing.assert_allclose(two.reads(0), [0, 2 / 3, 1 / 3, 1 / 3, 2 / 3])
    np.testing.assert_allclose(two.rebuild_reads(0), [0, 5 / 6, 2 / 3, 2 / 3, 5 / 6])
    np.testing.assert_allclose(StripeLayout(5, 4, 1).rebuild_reads(0), [0] + [1.25] * 4)


@pytest.mark.parametrize("kind", ["rotating", "grouped"])
def test_expected_undecodable_share_does_not_depend_on_the_layout(kind):
    """Random 4-of-18 failures, k = 2, r = 1: a lost row is undecodable iff one of the other
    two members of its stripe failed too, P = 1 − C(15, 3)/C(17, 3), whatever the layout;
    grouping changes how often some row is undecodable, not how many on average."""
    layout = StripeLayout(18, 2, 1, kind)
    shares, fallbacks = [], 0
    for failed in itertools.combinations(range(18), 4):
        undecodable = layout.loss(set(failed)).undecodable
        shares.append(sum(undecodable.values()) / 4)
        fallbacks += max(undecodable.values()) > 0
    assert np.mean(shares) == pytest.approx(1 - math.comb(15, 3) / math.comb(17, 3))
    # grouped: no fall-back iff the 4 servers sit in 4 distinct groups of 3 (out of 6)
    no_fallback = math.comb(6, 4) * 3**4 / math.comb(18, 4) if kind == "grouped" else 0
    assert fallbacks / math.comb(18, 4) == pytest.approx(1 - no_fallback)


@pytest.mark.parametrize(
    "layout, rows", [(StripeLayout(18, 2, 1), 2 * 288), (StripeLayout(18, 2, 1, "grouped"), 360)]
)
def test_the_trainer_code_loses_exactly_the_rows_the_time_model_counts(layout, rows):
    """Over whole layout periods, the parity code's unrecoverable rows on each failed shard
    are the share ``Loss.undecodable`` of its rows."""
    emb = ShardedEmbeddings(
        [rows], 2, ShardingConfig(n_shards=18), SparseOptimizerConfig(), np.random.default_rng(0)
    )
    code = ParityCode(emb, 2, 1, layout=layout.kind)
    failed = {3, 4, 10, 12}
    _, unrecoverable = code.decode_recoverable(sorted(failed))
    for x, share in layout.loss(failed).undecodable.items():
        assert np.isin(unrecoverable, emb.shard_rows(x)).sum() == share * len(emb.shard_rows(x))


# ---------------------------------------------------------------------------- the trainer
@pytest.mark.parametrize(
    "kind, failed", [("rotating", (0, 2)), ("grouped", (0, 1, 3))]
)  # some stripes of the failed shards are decodable, some not
def test_decode_or_restore_rows_right_after_the_event(kind, failed):
    cfg = small_config(sparse="momentum", seed=3)
    tr = Trainer(cfg.model_copy(update={"sharding": ShardingConfig(n_shards=6)}))
    side = EcrmSide(EcrmParams(kind="ecrm", k=2, r=1, layout=kind), model=None)
    side.attach(tr, own=True)
    tr.train(30)
    checkpoint = tr.snapshot()
    tr.train(40)
    before = tr.embeddings.snapshot()
    lost = []
    model = SimpleNamespace(
        checkpoints={7.0: checkpoint}, side=side, lose=lambda _, rows: lost.append(rows)
    )
    DecodeShards(progress_s=9.0, shards=failed, key=7.0).apply(model, tr)
    code, emb = side.parity, tr.embeddings
    stripes = np.arange(code.n_stripes)
    rows, present = code.stripe_rows(stripes)
    members = np.concatenate([np.where(present, rows % 6, -1), code.parity_shards(stripes)], 1)
    bad = np.isin(members, failed).sum(axis=1) > 1
    on_failed = present & np.isin(rows % 6, failed)
    restored = np.sort(rows[bad[:, None] & on_failed])
    decoded = np.sort(rows[~bad[:, None] & on_failed])
    assert len(restored) and len(decoded)
    [counted] = lost
    np.testing.assert_array_equal(counted, restored)  # only these rows lose their updates
    after = emb.snapshot()
    np.testing.assert_array_equal(after.values[restored], checkpoint.embeddings.values[restored])
    for name in after.state:
        got, want = after.state[name][restored], checkpoint.embeddings.state[name][restored]
        np.testing.assert_array_equal(got, want)
    scale = np.abs(before.values[decoded]).max()
    assert np.abs(after.values[decoded] - before.values[decoded]).max() <= 1e-5 * scale
    for name in after.state:
        want = before.state[name][decoded]
        assert np.abs(after.state[name][decoded] - want).max() <= 1e-5 * np.abs(want).max()
    others = np.setdiff1d(np.arange(emb.n_rows), np.concatenate([restored, decoded]))
    np.testing.assert_array_equal(after.values[others], before.values[others])
    assert side.decode_error <= 1e-5
    assert max(code.consistency_error().values()) < 1e-6  # re-encoded after the restore


def test_decoding_on_the_real_model_is_exact_and_the_final_model_matches():
    s = _ecrm(SMALL_TRAINER, "trainer.optimizer={sparse: {kind: momentum}}")
    sims = [simulate(s, i, 0) for i in range(2)]
    assert sum(isinstance(e, DecodeShards) for e in sims[1].model_events) == 2
    full, ecrm = cosimulate(s, sims)
    assert ecrm["decode_max_rel_err"] <= 1e-5
    assert abs(ecrm["logloss_delta"]) < 1e-5 and ecrm["pls_measured"] == 0
    base, [_, model] = run_models(s, sims)
    a, b = base.embeddings.weights, model.trainer.embeddings.weights
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()
    assert model.side.parity.consistency_error()["values"] < 1e-5
    assert math.isfinite(full["final_logloss"])


def test_partial_fallback_on_the_real_model_counts_lost_lookups():
    s = _ecrm(SMALL_TRAINER, _at(("30 h", ["emb_ps3", "emb_ps4"])), "policies.1.fallback=partial")
    sims = [simulate(s, i, 0) for i in range(2)]
    [event] = [e for e in sims[1].model_events if isinstance(e, DecodeShards)]
    assert event.key is not None
    ecrm = cosimulate(s, sims)[1]
    # Measured: lookups of the restored rows (1/16 of the two shards') since the checkpoint;
    # predicted: the same share of the two shards' updates, with uniform row popularity.
    # Restoring every row of the two shards would measure 16 times more.
    assert 0.5 < ecrm["pls_measured"] / sims[1].row()["pls_model"] < 2
    assert ecrm["decode_max_rel_err"] <= 1e-5


@settings(max_examples=100, deadline=None)
@given(layout=layouts(), data=st.data())
def test_degraded_reads_slowdown_is_the_slower_end_of_the_lost_shards_reads(layout, data):
    """The busiest survivor's reads: max over servers of Σ share · reads(x), as an array sum
    in the degraded shards' order (the policy's running sum must equal it bit for bit), or a
    worker's k − 1 extra rows per lost lookup if slower; then the worker's decoding."""
    n = layout.n_shards
    shards = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=6, unique=True))
    shares = data.draw(
        st.lists(st.sampled_from([1.0, 0.25, 2 / 3]), min_size=len(shards), max_size=len(shards))
    )
    worker = data.draw(st.sampled_from([0.01, 2.0]))
    degraded = dict(zip(shards, shares, strict=True))
    policy = SimpleNamespace(
        stripes=layout,
        read_slowdown=0.3,
        worker_read_slowdown=worker,
        decode_slowdown=0.05,
        _reads={},
    )
    policy._busiest = lambda pairs: EcrmPlan._busiest(policy, pairs)
    served = sum(share * layout.reads(x) for x, share in degraded.items()).max()
    lost = sum(shares)
    expected = max(served * 0.3, lost * worker) + lost * 0.05
    assert EcrmPlan.reads_slowdown(policy, degraded.items()) == expected


def test_interference_takes_the_busiest_survivor_of_the_ranges_moving():
    policy = SimpleNamespace(traffic_frac=0.1, busy_limit=0.9)
    ranges = [np.array([0.0, 0.5, 0.1]), np.array([0.2, 0.25, 0.0])]  # survivor 1: 0.75
    assert EcrmPlan.interference(policy, ranges) == pytest.approx(0.1 * 0.75 / 0.25)
    assert EcrmPlan.interference(policy, ranges * 2) == pytest.approx(0.1 * 0.9 / 0.1)  # capped
    assert EcrmPlan.interference(policy, []) == 0


# ------------------------------------------------------------------ the rebuild's plan
GIB = 2**30


def test_quick_memcpy_copies_below_two_blocks_in_one_call():
    """ECRec's rule: below 2 GiB one memcpy (one thread), else 1 GiB blocks (the last 1 to
    2 GiB) copied together, each at most a thread's rate, sharing the node's copy rate."""
    assert quick_memcpy_s(1.5 * GIB, 8e9, 55e9) == 1.5 * GIB / 8e9
    assert quick_memcpy_s(2 * GIB - 1, 8e9, 4e9) == (2 * GIB - 1) / 4e9  # memory-bound
    # 2 GiB: two 1 GiB blocks in parallel, 8 GB/s each (16 < 55)
    assert quick_memcpy_s(2 * GIB, 8e9, 55e9) == pytest.approx(GIB / 8e9)
    # 10 GiB: ten blocks sharing 55 GB/s, 5.5 GB/s each
    assert quick_memcpy_s(10 * GIB, 8e9, 55e9) == pytest.approx(GIB / 5.5e9)
    # 3.5 GiB: blocks of 1, 1 and 1.5 GiB at 8 GB/s; the last moves 0.5 GiB more alone
    assert quick_memcpy_s(3.5 * GIB, 8e9, 55e9) == pytest.approx(1.5 * GIB / 8e9)
    # 30.5 GiB: 30 blocks at 55/30 GB/s until the 29 of 1 GiB end, then 0.5 GiB at 8 GB/s
    expected = GIB / (55e9 / 30) + 0.5 * GIB / 8e9
    assert quick_memcpy_s(30.5 * GIB, 8e9, 55e9) == pytest.approx(expected)
    assert quick_memcpy_s(0, 8e9, 55e9) == 0


def test_switch_pauses_copy_each_array_of_a_range_back_and_aside():
    params = EcrmParams(kind="ecrm", rebuild_ranges=4)
    arrays = ((3 * GIB, 1), (0.5 * GIB, 1))  # values (three 1 GiB blocks at once), state
    one = GIB / 8e9 + 0.5 * GIB / 8e9
    expected = [0.1 + one, 0.1 + 2 * one, 0.1 + 2 * one, 0.1 + 2 * one, 0.1 + one]
    assert switch_pauses_s(params, arrays, 55e9) == pytest.approx(expected)
    assert switch_pauses_s(params.model_copy(update={"freeze": False}), arrays, 55e9) == ()


def test_a_job_with_any_number_of_optimizer_slots_plans_its_switches_at_once():
    """The values and each optimizer slot are arrays alike, copied one after the other: a
    job of 10^15 slots (a fuzzed scenario once made a list of 10^15 arrays: MemoryError)
    pauses 1 + 10^15 times one array's copy, worked out at once."""
    job = scenario("ecrm_vs_checkpoint", "job.optimizer_slots=1e15").job
    arrays = range_arrays_B(job, job.embedding_bytes / 4, ranges=10)
    assert [count for _, count in arrays] == [1 + 10**15]  # no row-wise slots
    params = EcrmParams(kind="ecrm", rebuild_ranges=10)
    values_B = arrays[0][0]
    copy_s = quick_memcpy_s(values_B, params.memcpy_bandwidth, 55e9)
    first = params.switch_drain + (1 + 10**15) * copy_s
    assert switch_pauses_s(params, arrays, 55e9)[0] == pytest.approx(first, rel=1e-12)


def test_a_connection_cap_paces_the_rebuild_by_its_busiest_survivor():
    """With 1 Gbit/s per connection, emb_ps3's data partner sends a tenth of the shard per
    range through its cap; the replacement's NIC no longer binds."""
    capped = "policies.1.flow_bandwidth=1 Gbit/s"
    sim = simulate(_ecrm(capped, _at(("10 h", ["emb_ps3"]))), 1, 0)
    rates = Rates(sim)
    plan = sim.policy.plan.rebuild(3)
    assert plan.transfer_s == pytest.approx(rates.shard / 10 / 0.125e9 + rates.latency)
    ranges = [p for p in sim.timeline if p.activity == "range switch"]
    moving = ranges[1].start_s - ranges[0].end_s - plan.gap_s  # the run's first range
    assert moving == pytest.approx(plan.transfer_s)


def test_values_scope_pulls_what_ecrecs_prototype_pulls():
    """ECRec's loop pulls k friend rows' values for as many server slots as the shard has
    data rows: k/(k + r) of the reads of a full rebuild, and values only."""
    sim = simulate(_ecrm("policies.1.rebuild_scope=values"), 1, 0)
    full = simulate(_ecrm(), 1, 0)
    ratio = sim.policy.plan.rebuild(3).range_B.sum() / full.policy.plan.rebuild(3).range_B.sum()
    assert ratio == pytest.approx(2 / 3 * 512 / 516)


def test_old_rebuild_fields_are_accepted_with_a_notice():
    with pytest.warns(RenamedField, match="rebuild_share is deprecated and ignored"):
        params = EcrmParams(kind="ecrm", rebuild_share=0.5)
    assert "rebuild_share" not in params.model_dump()
    with pytest.warns(RenamedField, match="copy_bandwidth is deprecated: call it memcpy"):
        assert EcrmParams(kind="ecrm", copy_bandwidth="4 GB/s").memcpy_bandwidth == 4e9


def test_ecrecs_evaluation_rebuild_is_paced_by_its_busiest_connection():
    """scenarios/ecrec_eval.yaml, Criteo-8S, k = 2: ECRec's loop pulls the values of a
    shard's 316 M slots (2 friend rows each); over its 5 servers emb_ps1 and emb_ps4 send
    5/6 · 2/3 of a row per slot, through one 5 Gbit/s connection each (the replacement's
    100 Gbit/s NIC does not bind); each switch copies a range's values and accumulator,
    16.2 GB each: 15 blocks sharing 55 GB/s, the last 1.1 GiB block finishing alone."""
    s = load_scenario(SCENARIOS / "ecrec_eval.yaml", ["trainer.enabled=false"])
    sim = simulate(s, 2, 0)
    slots = 60_851_510 * 26 / 5
    busiest = slots * 512 * 5 / 6 * 2 / 3 / 10  # bytes per range
    transfer = busiest / (5e9 / 8) + 50e-6
    gap = 10 * 100e-6 + slots * 512 * 2 / 10 / 20e9
    array = slots * 512 / 10
    blocks = int(array // 2**30)
    copies = 2**30 / (55e9 / blocks) + (array - blocks * 2**30) / 8e9
    pauses = 11 * 0.1 + 20 * 2 * copies  # 2 arrays, back and aside, 10 ranges
    [rebuild] = [p for p in sim.timeline if p.category == "rebuild"]
    assert rebuild.start_s == 15 * 60  # rescheduling takes no time here
    assert rebuild.end_s - rebuild.start_s == pytest.approx(10 * (transfer + gap) + pauses)
