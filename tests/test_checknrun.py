"""Check-N-Run: differential checkpoints (one-shot, consecutive), quantized checkpoints."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftsim.cli import main
from ftsim.cosim.replay import cosimulate, run_models, trainer_config
from ftsim.experiments.runner import simulate
from ftsim.policies.checknrun import (
    CheckNRunSide,
    DiffCheckpoint,
    RestoreChain,
    RestoreQuantizedChain,
    quantize,
)
from ftsim.policies.inputs import PlanInputs
from ftsim.scenario.loader import ScenarioError
from ftsim.sim.failures import job_mtbf_s
from ftsim.sim.theory import daly_interval_s
from ftsim.trainer import Trainer
from tests.conftest import scenario
from tests.test_cosim import SMALL_TRAINER
from tests.test_engine import assert_accounting

# smoke: 4 tables × 1 M rows × 64 fp32 (256 B a row, no optimizer state), 4 embedding PS,
# 1024 samples per 50-ms iteration. A checkpoint every 10 s of compute is 200 iterations:
# D = 204,800 lookups of every table. With uniform popularity (Zipf exponent 0) a table of
# N rows has N·(1 − (1 − 1/N)^D) distinct rows among D lookups.
N, E, ROW_B, D = 1_000_000, 4, 256, 204_800
BITMAP_B = N / 8  # a differential checkpoint's row bitmap, per PS (1 M rows each)
TINY = ("failures=[]", "job.training=2 min")


def _cnr(**fields):
    body = ", ".join(f"{k}: {v}" for k, v in fields.items())
    return f"policies=[{{kind: checknrun, interval: 10 s, popularity_exponent: 0, {body}}}]"


def _alike(per_ps):
    """The value of a per-PS tuple when every PS has the same (no partial restore)."""
    assert len(set(per_ps)) == 1, per_ps
    return per_ps[0]


def _touched(draws):
    """Distinct rows of one table among ``draws`` uniform lookups (by hand)."""
    return N * (1 - (1 - 1 / N) ** draws)


def test_bytes_per_checkpoint_match_the_closed_form_for_uniform_popularity():
    def saves(**fields):
        return simulate(scenario("smoke", *TINY, _cnr(**fields)), 0, 0).policy

    one_shot, consecutive = saves(differential="one_shot"), saves(differential="consecutive")
    # checkpoints at 10, 20, …, 110 s: a baseline every 4th, from the first
    assert [k.baseline for k in one_shot.saves] == ([True] + [False] * 3) * 2 + [True, False, False]
    baseline = N * ROW_B  # every row of the PS
    # one-shot: the k-th differential checkpoint after a baseline holds the rows changed in
    # k intervals; consecutive: those changed in one
    expected_one_shot = [baseline] + [_touched(k * D) * ROW_B + BITMAP_B for k in (1, 2, 3)]
    expected_consecutive = [baseline] + [_touched(D) * ROW_B + BITMAP_B] * 3
    for policy, expected in ((one_shot, expected_one_shot), (consecutive, expected_consecutive)):
        got = [_alike(k.shard_bytes) for k in policy.saves[:4]]
        assert got == pytest.approx(expected, rel=1e-9)
        assert got[1:4] == pytest.approx(
            [_alike(k.shard_bytes) for k in policy.saves[5:8]], rel=1e-12
        )
    assert _touched(D) / N == pytest.approx(0.185190, abs=1e-6)  # 1 − e^−0.2048, by hand
    # quantized to 4 bits with a range per row: 64 values × ½ B + 2 × fp32 = 40 B a row
    q4 = saves(quantize_bits=4)
    assert _alike(q4.saves[0].shard_bytes) == pytest.approx(N * 40)
    assert _alike(q4.saves[1].shard_bytes) == pytest.approx(_touched(D) * 40 + BITMAP_B)
    # 8 bits with one range for the whole checkpoint: 64 B a row
    assert _alike(saves(quantize_bits=8, quantization="uniform").saves[0].shard_bytes) == N * 64


def test_saves_are_flows_that_stall_for_the_lone_transfer_and_the_quantization():
    for policy in (_cnr(differential="consecutive"), _cnr(quantize_bits=4)):
        sim = simulate(scenario("smoke", *TINY, policy), 0, 0)
        p, layout = sim.policy, sim.layout
        expected = sum(
            _alike(k.codec_bytes) / p.params.codec_bandwidth
            + layout.write_s([*k.shard_bytes, layout.dense_bytes])
            for k in p.saves
        )
        assert sim.charged["save"] == pytest.approx(expected, rel=1e-9)
        row = sim.row()
        assert row["wall_h"] == pytest.approx(row["ideal_h"] + row["save_h"], rel=1e-12)


@pytest.mark.parametrize("variant", ["one_shot", "consecutive"])
def test_a_restore_reads_the_baseline_and_the_differential_checkpoints_it_needs(variant):
    # the failure at 45 s finds the baseline of 10 s and the differential ones of 20, 30, 40 s
    s = scenario(
        "smoke",
        "job.training=2 min",
        "failures=[{kind: scheduled, times: [45 s], role: emb_ps, nodes_per_failure: 1}]",
        "cluster.reschedule={kind: constant, mean: 5 s}",
        _cnr(differential=variant),
    )
    sim = simulate(s, 0, 0)
    policy, layout = sim.policy, sim.layout
    saves = policy.saves[:4]
    chain = saves if variant == "consecutive" else [saves[0], saves[3]]
    per_shard = sum(_alike(k.shard_bytes) for k in chain)
    read_s = layout.read_s([per_shard] * E + [layout.dense_bytes] * 4)
    assert sim.charged["load"] == pytest.approx(read_s, rel=1e-9)
    [restore] = [e for e in sim.model_events if isinstance(e, RestoreChain)]
    assert type(restore) is RestoreChain and restore.key == pytest.approx(40.0)
    lost = restore.progress_s - restore.key  # the failure strikes at 45 s of wall time
    assert sim.breakdown_s()["lost"] == pytest.approx(lost, abs=1e-9) and 0 < lost < 5
    row = sim.row()
    assert row["restore_gb"] * 1e9 == pytest.approx(per_shard * E + layout.dense_bytes)
    # storage keeps the chain (and one dense copy); full checkpoints keep one
    largest = max(per_shard, _alike(saves[0].shard_bytes) + _alike(saves[-1].shard_bytes))
    full = layout.total_bytes
    assert row["storage_gb"] * 1e9 == pytest.approx(largest * E + layout.dense_bytes)
    assert row["capacity_reduction"] == pytest.approx(full / (row["storage_gb"] * 1e9))
    written = sum(sum(k.shard_bytes) + layout.dense_bytes for k in policy.saves)
    assert row["write_reduction"] == pytest.approx(len(policy.saves) * full / written)


def test_a_failure_before_the_first_checkpoint_restarts_from_the_initial_model():
    s = scenario(
        "smoke",
        "failures=[{kind: scheduled, times: [5 s], role: any}]",
        "cluster.reschedule={kind: constant, mean: 5 s}",
        *TINY[1:],
        _cnr(quantize_bits=4),
    )
    sim = simulate(s, 0, 0)
    [restore] = [e for e in sim.model_events if isinstance(e, RestoreChain)]
    assert type(restore) is RestoreChain and restore.key == 0.0  # exact: nothing quantized yet
    assert sim.charged["load"] == 0 and sim.breakdown_s()["lost"] == pytest.approx(5.0)
    assert sim.row()["restore_gb"] != sim.row()["restore_gb"]  # NaN: nothing was read


def test_model_events_name_every_commit_and_restore_the_last_one():
    s = scenario("checknrun", "run.replications=1", "trainer=null")
    for index, kind in ((2, RestoreChain), (3, RestoreChain), (5, RestoreQuantizedChain)):
        sim = simulate(s, index, 0)
        saves = [e for e in sim.model_events if isinstance(e, DiffCheckpoint)]
        assert len(saves) == sim.row()["n_checkpoints"] == len(sim.policy.saves)
        assert sum(e.baseline for e in saves) == sim.row()["n_baselines"]
        restores = [e for e in sim.model_events if isinstance(e, RestoreChain)]
        assert len(restores) == len(sim.failures_seen) == 5
        last = None  # the last committed checkpoint, in the order of events
        for event in sim.model_events:
            if isinstance(event, DiffCheckpoint):
                last = event
            else:
                assert type(event) is (kind if last else RestoreChain)
                assert event.key == (last.key if last else 0.0)
    assert RestoreChain.exact and not RestoreQuantizedChain.exact
    assert RestoreQuantizedChain.modifies and not DiffCheckpoint.modifies


def test_daly_interval_is_the_fixed_point_of_the_mean_cycle_stall():
    s = scenario("checknrun", "policies.5.interval=daly", "trainer=null")
    policy = simulate(s, 5, 0).policy.plan
    stall, _ = policy._planned_costs(policy.interval_s)
    assert policy.interval_s == pytest.approx(daly_interval_s(stall, job_mtbf_s(s)), rel=1e-8)
    assert stall < policy.layout.full_save_s() / 4  # 4-bit differential saves are cheaper


# -- accounting --------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    minutes=st.floats(1, 60),
    variant=st.sampled_from(["one_shot", "consecutive"]),
    bits=st.sampled_from(["null", 2, 3, 4, 8]),
    scheme=st.sampled_from(["uniform", "adaptive"]),
    every=st.integers(1, 6),
    recovery=st.sampled_from(["full", "partial"]),
    mtbf_min=st.floats(5, 300),
    rep=st.integers(0, 1000),
)
def test_accounting_identity_holds(minutes, variant, bits, scheme, every, recovery, mtbf_min, rep):
    policy = (
        f"policies=[{{kind: checknrun, interval: {minutes} min, differential: {variant},"
        f" quantize_bits: {bits}, quantization: {scheme}, baseline_every: {every},"
        f" recovery: {recovery}}}]"
    )
    s = scenario("smoke", policy, f"failures.0.job_mtbf={mtbf_min} min")
    assert_accounting(simulate(s, 0, rep).row())


# -- quantization ------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_quantization_error_is_at_most_half_a_step_of_its_range(bits):
    rng = np.random.default_rng(bits)
    scales = 10.0 ** rng.uniform(-3, 1, size=(300, 1))
    values = (rng.normal(size=(300, 16)) * scales + rng.normal(size=(300, 1))).astype(np.float32)
    values[7] = 0.25  # a constant row: range 0, exact
    levels = 2**bits - 1
    ulp = 4 * np.spacing(np.abs(values).max())  # fp32 rounding of the range and result
    uniform = quantize(values, bits, "uniform")
    err = np.abs(uniform.dequantize().astype(np.float64) - values)
    step = (float(values.max()) - float(values.min())) / levels
    assert err.max() <= step / 2 + ulp
    assert err.max() > 0.4 * step  # the bound is nearly reached: not trivially exact
    adaptive = quantize(values, bits, "adaptive")
    err = np.abs(adaptive.dequantize().astype(np.float64) - values)
    x = values.astype(np.float64)
    row_step = (x.max(axis=1) - x.min(axis=1)) / levels
    assert np.all(err.max(axis=1) <= row_step / 2 + 4 * np.spacing(np.abs(values).max(axis=1)))
    assert err[7].max() == 0
    for q in (uniform, adaptive):
        assert q.codes.max() <= levels and q.dequantize().dtype == np.float32
    # bytes written: n bits per value, and one range (2 × fp32) per row (adaptive) or in all
    assert adaptive.nbytes == math.ceil(300 * 16 * bits / 8) + 300 * 8
    assert uniform.nbytes == math.ceil(300 * 16 * bits / 8) + 8


def checknrun_side(index, bits, differential):
    """A small trainer and, watching it, the trainer side of checknrun.yaml's policy
    ``index`` with these ``quantize_bits`` and ``differential``."""
    s = scenario(
        "checknrun",
        SMALL_TRAINER,
        "trainer.optimizer={sparse: {kind: rowwise_adagrad, lr: 0.1}}",
        f"policies.{index}.quantize_bits={bits}",
        f"policies.{index}.differential={differential}",
    )
    trainer = Trainer(trainer_config(s, 0))
    side = CheckNRunSide(s.policies[index], model=None)
    side.attach(trainer, own=True)
    return trainer, side


def _side_round_trip(bits, differential="one_shot"):
    """Train, save a baseline and a differential checkpoint, train on, restore: the trainer
    state right after the restore and the state that was checkpointed."""
    trainer, side = checknrun_side(2, bits, differential)
    trainer.train(3)
    side.save(trainer, 1.0, baseline=True)
    trainer.train(3)
    side.save(trainer, 2.0, baseline=False)
    trainer.train(2)
    saved = trainer.snapshot()
    side.save(trainer, 3.0, baseline=False)
    trainer.train(4)
    side.restore(trainer, 3.0)
    return trainer, saved, side


@pytest.mark.parametrize("differential", ["one_shot", "consecutive"])
def test_unquantized_restore_is_the_checkpointed_state_bit_for_bit(differential):
    trainer, saved, side = _side_round_trip("null", differential)
    assert len(side.chain) == (2 if differential == "one_shot" else 3)
    assert trainer.step == saved.step
    assert np.array_equal(trainer.embeddings.weights, saved.embeddings.values)
    assert np.array_equal(trainer.embeddings.state["accum"], saved.embeddings.state["accum"])
    for a, b in zip(trainer.model.params, saved.dense, strict=True):
        assert np.array_equal(a, b)
    # the rows changed since the baseline are those of the differential checkpoints read
    changed = np.unique(np.concatenate([stored.rows for stored in side.chain[1:]]))
    assert np.array_equal(np.flatnonzero(side.since_baseline), changed) and len(changed)
    assert not side.since_checkpoint.any()


def test_quantized_restore_carries_a_bounded_error_that_shrinks_with_bits():
    errors = []
    for bits in (2, 4, 8):
        trainer, saved, side = _side_round_trip(bits)
        # what the side stores per row is the time model's row: d values at n bits, a range
        # (2 × fp32) and the fp32 optimizer state (row-wise Adagrad: one value)
        baseline = side.chain[0]
        rows, dim = trainer.embeddings.n_rows, trainer.embeddings.dim
        assert baseline.nbytes == rows * (dim * bits / 8 + 8 + 4)
        x = saved.embeddings.values.astype(np.float64)
        err = np.abs(trainer.embeddings.weights - x).max(axis=1)
        step = (x.max(axis=1) - x.min(axis=1)) / (2**bits - 1)
        assert np.all(err <= step / 2 + 1e-6)
        # optimizer state and dense parameters are written in fp32: exact
        assert np.array_equal(trainer.embeddings.state["accum"], saved.embeddings.state["accum"])
        for a, b in zip(trainer.model.params, saved.dense, strict=True):
            assert np.array_equal(a, b)
        errors.append(err.max())
    assert errors[0] > errors[1] > errors[2] > 0


# -- the co-simulation --------------------------------------------------------------------

FAILURES = (
    "failures=[{kind: scheduled, times: [15 h, 32 h], nodes: [[emb_ps1, emb_ps5], [trainer3]]}]"
)
"""Two failures that roll back to the third differential checkpoint after a baseline (the
one-shot chain is then the baseline and rows changed over three intervals)."""


def _cosim_scenario(*extra):
    return scenario("checknrun", SMALL_TRAINER, FAILURES, "trainer.share_prefix=false", *extra)


def _params(trainer):
    return [p.copy() for p in trainer.model.params] + [trainer.embeddings.weights.copy()]


def test_unquantized_differential_recovery_replays_the_failure_free_model_bit_for_bit():
    s = _cosim_scenario("trainer.optimizer={sparse: {kind: rowwise_adagrad, lr: 0.1}}")
    sims = [simulate(s, i, 0) for i in (2, 3)]  # one-shot, consecutive
    for sim in sims:
        restores = [e for e in sim.model_events if isinstance(e, RestoreChain)]
        assert len(restores) == 2 and all(type(e) is RestoreChain for e in restores)
        saves = {e.key: e for e in sim.model_events if isinstance(e, DiffCheckpoint)}
        assert not any(saves[e.key].baseline for e in restores)  # through differential ones
    base, models = run_models(s, sims)
    for model in models:
        assert len(model.side.chain) > 1  # restored through differential checkpoints
        assert model.trainer.step == base.step
        for a, b in zip(_params(base), _params(model.trainer), strict=True):
            assert np.array_equal(a, b)
        assert np.array_equal(
            base.embeddings.state["accum"], model.trainer.embeddings.state["accum"]
        )
    for cols in cosimulate(s, sims):
        assert cols["logloss_delta"] == 0 and cols["pls_measured"] == 0


def test_quantized_recovery_is_not_exact_and_drifts_less_with_more_bits():
    distances = []
    for bits in (2, 4, 8):
        s = _cosim_scenario(f"policies.5.quantize_bits={bits}")
        sim = simulate(s, 5, 0)
        assert all(
            type(e) is RestoreQuantizedChain
            for e in sim.model_events
            if isinstance(e, RestoreChain)
        )
        base, [model] = run_models(s, [sim])
        distances.append(np.abs(model.trainer.embeddings.weights - base.embeddings.weights).max())
    assert distances[0] > distances[1] > distances[2] > 0


def test_sharing_the_failure_free_prefix_gives_the_same_results_as_training_alone():
    shared = scenario("checknrun", SMALL_TRAINER, FAILURES)
    alone = scenario("checknrun", SMALL_TRAINER, FAILURES, "trainer.share_prefix=false")
    policies = (2, 4, 5, 6)  # one-shot fp32, 8 bits, 4 bits, 8 bits with partial recovery
    a = cosimulate(shared, [simulate(shared, i, 0) for i in policies])
    b = cosimulate(alone, [simulate(alone, i, 0) for i in policies])
    own = "trainer_own_steps"  # the only column sharing changes: the steps trained alone
    assert [{**c, own: 0} for c in a] == [{**c, own: 0} for c in b]
    assert a[0][own] == 0 and b[0][own] == alone.trainer.steps  # exact: not trained shared
    assert a[0]["logloss_delta"] == 0 and a[2]["logloss_delta"] != 0


# -- the scenario file and the command line ---------------------------------------------------


def test_a_bad_parameter_is_a_located_error():
    with pytest.raises(ScenarioError, match=r"policies\.4\.quantize_bits: .*2, 3, 4 or 8"):
        scenario("checknrun", "policies.4.quantize_bits=1")
    with pytest.raises(ScenarioError, match=r"policies\.2\.baseline_every"):
        scenario("checknrun", "policies.2.baseline_every=0")
    with pytest.raises(ScenarioError, match=r"policies\.3\.differential"):
        scenario("checknrun", "policies.3.differential=incremental")
    # exponents that do not pair with the job's tables (built by hand: the trainer's own
    # validation refuses such a list first; this checks the policy's check)
    s = scenario("checknrun")
    odd = dataclasses.replace(PlanInputs.of(s), exponents=(1.0, 1.1))
    [(field, message)] = s.policies[2].input_problems(odd)
    assert field == "popularity_exponent" and "lists 2 exponents but the job has 26" in message


def test_show_policies_lists_the_policy_with_its_parameters(capsys):
    assert main(["show", "policies"]) == 0
    out = capsys.readouterr().out
    assert "checknrun: differential and quantized checkpoints (Check-N-Run" in out
    assert "``" not in out and ":class:" not in out  # plain text, no reStructuredText
    block = out[out.index("checknrun:") :]
    for name in ("interval", "differential", "baseline_every", "quantize_bits", "quantization"):
        assert f"\n    {name}: " in block
