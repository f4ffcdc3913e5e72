"""ECRM: parity traffic, degraded recovery, fall-back, and exact decoding on the real model."""

import math

import numpy as np
import pytest

from ftsim.cosim.replay import cosimulate, run_models
from ftsim.policies.ecrm import DecodeShards
from ftsim.sim.accounting import CATEGORIES
from ftsim.sim.engine import simulate
from ftsim.stripes import survives
from tests.conftest import scenario
from tests.test_cosim import SMALL_TRAINER

SINGLE_FAILURES = "failures=[{kind: scheduled, times: [10 h, 30 h], nodes: [[emb_ps3], [emb_ps7]]}]"


def _ecrm(*extra):
    return scenario(
        "prod50h", "policies=[{kind: full}, {kind: ecrm, k: 2, r: 1}]", SINGLE_FAILURES, *extra
    )


def test_single_failures_are_decoded_without_stopping_training():
    sim = simulate(_ecrm(), 1, 0)
    row = sim.row()
    assert row["n_fallbacks"] == 0
    assert row["lost_h"] == pytest.approx(0, abs=1e-9)
    assert row["load_h"] == 0 and row["reschedule_h"] == 0  # training never stops
    assert row["degraded_h"] > 0 and row["other_h"] > 0
    assert row["parity_mem_frac"] == 0.5
    # Recovery = rescheduling delay + rebuild of one shard: k · shard bytes at half a NIC.
    rebuild_s = 2 * sim.layout.shard_bytes / (3.125e9 * 0.5)
    assert row["recovery_s"] == pytest.approx(60 + rebuild_s)
    gap = row["ideal_h"] + sum(row[f"{c}_h"] for c in CATEGORIES) - row["wall_h"]
    assert abs(gap) < 1e-9 * row["wall_h"]


def test_parity_traffic_slowdown_follows_bytes_over_bandwidth():
    sim = simulate(_ecrm("policies.1.unique_lookup_fraction=0.25"), 1, 0)
    job = sim.scenario.job
    rows = job.samples_per_iteration * 26 * 0.25 / 18
    expected = rows * job.mean_row_bytes * 1 / 3.125e9 / job.iteration_s
    assert sim.policy.parity_slowdown == pytest.approx(expected)
    overlapped = simulate(_ecrm("policies.1.parity_overlap=1"), 1, 0).row()
    assert overlapped["other_h"] == 0


def test_two_servers_at_once_exceed_r1_and_fall_back_to_the_checkpoint():
    # Under the rotating layout every pair of servers shares a stripe: r = 1 survives one.
    assert not survives(18, 2, 1, {3, 4}) and survives(18, 2, 1, {3})
    assert survives(18, 4, 2, {3, 4}) and not survives(18, 4, 2, {3, 4, 5})
    s = _ecrm("failures=[{kind: scheduled, times: [30 h], nodes: [[emb_ps3, emb_ps4]]}]")
    sim = simulate(s, 1, 0)
    row = sim.row()
    assert row["n_fallbacks"] == 1
    # Rollback to the fall-back checkpoint taken after 24 h of compute: the compute done
    # between the end of that save and the failure (at the parity-slowed rate) is lost.
    saved_at = next(p.end_s for p in sim.timeline if p.kind == "save")
    lost_s = (30 * 3600 - saved_at) / (1 + sim.policy.parity_slowdown)
    assert row["lost_h"] == pytest.approx(lost_s / 3600)


def test_partial_fallback_loses_updates_instead_of_work():
    s = _ecrm(
        "failures=[{kind: scheduled, times: [30 h], nodes: [[emb_ps3, emb_ps4]]}]",
        "policies.1.fallback=partial",
    )
    row = simulate(s, 1, 0).row()
    assert row["n_fallbacks"] == 1 and row["lost_h"] == pytest.approx(0, abs=1e-9)
    assert row["pls_model"] > 0


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
