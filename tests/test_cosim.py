"""Co-simulation: what each policy does to the real model, at small scale."""

import numpy as np
import pytest

from ftsim.cosim.replay import PolicyModel, cosimulate, run_models, trainer_config
from ftsim.experiments.runner import simulate
from ftsim.policies.events import RestoreAll, RestoreShards
from ftsim.scenario.loader import load_scenario
from ftsim.trainer import Trainer
from tests.conftest import SCENARIOS

SMALL_TRAINER = (
    "trainer={steps: 120, batch_size: 64, replications: 1, eval_samples: 2048,"
    " model: {embedding_dim: 8, bottom_mlp: [16, 8], top_mlp: [16, 1]},"
    " data: {kind: synthetic, row_cap: 500}}"
)
# Two failures of two embedding PS each, after the first checkpoint; CPR saves every 10 h
# (prod50h's policies: full, cpr, cpr_mfu, cpr_ssu).
SETUP = (
    SMALL_TRAINER,
    "failures=[{kind: scheduled, times: [14 h, 31 h],"
    " nodes: [[emb_ps1, emb_ps5], [emb_ps5, emb_ps9]]}]",
    "policies.0.interval=5 h",
    *[f"policies.{i}.{key}" for i in (1, 2, 3) for key in ("target_pls=null", "interval=10 h")],
)


def _scenario(*extra):
    return load_scenario(SCENARIOS / "prod50h.yaml", [*SETUP, *extra])


def _params(trainer):
    return [p.copy() for p in trainer.model.params] + [trainer.embeddings.weights.copy()]


def test_full_recovery_replays_to_the_failure_free_model_bit_for_bit():
    s = _scenario("trainer.share_prefix=false")
    sim = simulate(s, 0, 0)
    assert any(isinstance(e, RestoreAll) for e in sim.model_events)
    base, [model] = run_models(s, [sim])
    assert model.trainer.step == base.step
    for a, b in zip(_params(base), _params(model.trainer), strict=True):
        assert np.array_equal(a, b)
    [cols] = cosimulate(s, [sim])
    assert cols["logloss_delta"] == 0 and cols["pls_measured"] == 0


def test_shared_prefix_gives_the_same_results_as_training_every_policy_alone():
    shared, alone = _scenario(), _scenario("trainer.share_prefix=false")
    a = cosimulate(shared, [simulate(shared, i, 0) for i in range(4)])
    b = cosimulate(alone, [simulate(alone, i, 0) for i in range(4)])
    own = "trainer_own_steps"  # the cost of each policy's own trainer: what sharing saves
    assert [{k: v for k, v in c.items() if k != own} for c in a] == [
        {k: v for k, v in c.items() if k != own} for c in b
    ]
    assert [c[own] for c in b] == [134, 120, 120, 120]  # full redoes 14 after its rollbacks
    assert a[0][own] == 0 and all(0 < c[own] < 120 for c in a[1:])


def test_cpr_restores_only_the_failed_shards_from_the_checkpoint():
    s = _scenario("trainer.share_prefix=false")
    sim = simulate(s, 1, 0)  # cpr
    restores = [e for e in sim.model_events if isinstance(e, RestoreShards)]
    assert [e.shards for e in restores] == [(1, 5), (5, 9)]
    first = restores[0]
    events = sim.model_events[: sim.model_events.index(first)]
    # Re-run by hand up to the first restore, then apply it and compare shards.
    cfg = trainer_config(s, 0)
    pm = PolicyModel(sim, cfg, s.trainer.steps)
    trainer = Trainer(cfg)
    pm.trainer = trainer
    pm.follow(trainer, own=True)
    for event in events:
        pm._advance(trainer, pm.step_of(event))
        pm.apply(event, trainer)
    pm._advance(trainer, pm.step_of(first))
    before = trainer.snapshot()
    checkpoint = pm.checkpoints[first.key]
    pm.apply(first, trainer)
    emb = trainer.embeddings
    for shard in range(emb.n_shards):
        rows = emb.shard_rows(shard)
        now = trainer.read_shard(shard)
        if shard in (1, 5):
            expected = checkpoint.embeddings.subset(rows)
        else:
            expected = before.embeddings.subset(rows)
        assert np.array_equal(now.values, expected.values), shard
        for name in now.state:
            assert np.array_equal(now.state[name], expected.state[name])
    changed = ~np.all(before.embeddings.values == emb.weights, axis=1)
    assert set(np.unique(emb.shard_of_global(np.flatnonzero(changed)))) <= {1, 5}
    assert changed.any()
    # Dense parameters are untouched by a shard restore.
    for a, b in zip(before.dense, trainer.model.params, strict=True):
        assert np.array_equal(a, b)
    assert pm.lost_lookups > 0


def test_prioritized_saves_lose_fewer_updates_and_cost_accuracy_less_than_vanilla():
    s = _scenario()
    sims = [simulate(s, i, 0) for i in range(4)]
    full, cpr, mfu, ssu = cosimulate(s, sims)
    assert full["pls_measured"] == 0 and full["logloss_delta"] == 0
    assert cpr["pls_measured"] > 0
    assert mfu["pls_measured"] < cpr["pls_measured"] and ssu["pls_measured"] < cpr["pls_measured"]
    # Measured PLS is what the time model predicts from shard progress, within sampling.
    cpr_row = sims[1].row()
    assert cpr["pls_measured"] == pytest.approx(cpr_row["pls_model"], rel=0.25)


def test_mfu_saves_the_most_used_rows_of_each_shard():
    s = _scenario("trainer.share_prefix=false")
    sim = simulate(s, 2, 0)
    _, [model] = run_models(s, [sim])
    saved = model.partials[-1] if model.partials else None
    assert saved is not None and len(saved.rows) > 0
    emb = model.trainer.embeddings
    fraction = s.policies[2].fraction
    per_shard = np.bincount(emb.shard_of_global(saved.rows), minlength=emb.n_shards)
    assert per_shard.max() <= np.ceil(fraction * emb.n_rows / emb.n_shards)


def test_measured_pls_agrees_with_the_prediction_on_average_over_seeds():
    # Single-shard exponential failures every 5 h over 200 h; CPR's interval for PLS 0.05 is
    # T_save = 2 · 18 · 5 h · 0.05 = 9 h. Tolerance: 15% of the prediction, about twice the
    # standard error of the mean over 12 replications × ~40 failures.
    s = load_scenario(
        SCENARIOS / "prod50h.yaml",
        [
            "trainer={steps: 400, batch_size: 32, replications: 12, eval_samples: 256,"
            " model: {embedding_dim: 4, bottom_mlp: [8, 4], top_mlp: [8, 1]},"
            " data: {kind: synthetic, row_cap: 300}}",
            "failures=[{kind: exponential, role: emb_ps, job_mtbf: 5 h}]",
            "job.training=200 h",
            "policies.1.target_pls=0.05",
        ],
    )
    measured, predicted = [], []
    for rep in range(12):
        sim = simulate(s, 1, rep)
        [cols] = cosimulate(s, [sim])
        measured.append(cols["pls_measured"])
        predicted.append(sim.row()["pls_predicted"])
    assert predicted[0] == pytest.approx(0.05)
    assert np.mean(measured) == pytest.approx(np.mean(predicted), rel=0.15)


def test_cosimulated_run_is_identical_across_processes(tmp_path):
    import os
    import subprocess
    import sys

    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / hash_seed
        subprocess.run(
            [sys.executable, "-m", "ftsim", "run", str(SCENARIOS / "prod50h.yaml"), "-q",
             "-o", str(out), "--reps", "2", "--set", SMALL_TRAINER.replace("replications: 1",
             "replications: 2")],
            check=True, env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )  # fmt: skip
        outputs.append((out / "runs.csv").read_bytes())
    assert outputs[0] == outputs[1]
    assert b"logloss_delta" in outputs[0]
