"""Every validation check of ``python -m ftsim validate`` earns its name: with a bug injected
into the simulator, the check fails.

Each test plants one plausible bug (monkeypatched for the test only), runs the one check in
quick mode and asserts it fails. The unmodified checks pass in ``tests/test_validate.py``
(the exact ones in quick mode; the statistical ones in the full run of ``docs/validation.md``).
The bugs are large enough that a statistical check cannot pass by chance.
"""

import numpy as np
import pytest

import ftsim.policies.cpr
import ftsim.sim.cluster
import ftsim.sim.engine
from ftsim.policies.events import RestoreAll
from ftsim.validation.suite import CALIBRATION, REGISTRY, run_checks


def _passes(name: str, tmp_path) -> bool:
    [section] = run_checks(quick=True, figures=tmp_path, names=[name])
    return all(check.passed for check in section.checks)


def _closed_form_save_10pct_slow(monkeypatch):
    """The storage closed form overstates every write by 10%."""
    original = ftsim.sim.cluster.StateLayout.full_save_s
    monkeypatch.setattr(
        ftsim.sim.cluster.StateLayout, "full_save_s", lambda self: 1.1 * original(self)
    )


def _lost_work_quartered(monkeypatch):
    """A rollback discards only a quarter of the work since the checkpoint."""

    def rollback_to(self, progress_s):
        if progress_s < self.progress_s:
            self.progress_s -= (self.progress_s - progress_s) / 4

    monkeypatch.setattr(ftsim.sim.engine.Simulation, "rollback_to", rollback_to)


def _saves_move_half_the_bytes(monkeypatch):
    """The simulated save moves half the bytes the planning closed form counts."""
    original = ftsim.sim.cluster.ClusterNetwork.full_save
    monkeypatch.setattr(
        ftsim.sim.cluster.ClusterNetwork,
        "full_save",
        lambda self: tuple((size / 2, route) for size, route in original(self)),
    )


def _rescheduling_not_charged(monkeypatch):
    """Time waiting for replacements passes but is charged to no category."""
    original = ftsim.sim.engine.Simulation._charge

    def charge(self, category, start, detail, part=None, activity=None):
        if category != "reschedule":
            original(self, category, start, detail, part, activity)

    monkeypatch.setattr(ftsim.sim.engine.Simulation, "_charge", charge)


def _checkpoint_misses_dense_state(monkeypatch):
    """A rollback restores the embedding rows but keeps the newer dense (MLP) parameters,
    as if checkpoints held the embeddings only."""
    original = RestoreAll.apply

    def apply(self, model, trainer):
        newer = [array.copy() for array in trainer.model.params]
        original(self, model, trainer)
        for array, kept in zip(trainer.model.params, newer, strict=True):
            array[...] = kept

    monkeypatch.setattr(RestoreAll, "apply", apply)


def _decoding_off_by_1e_3(monkeypatch):
    """Decoded rows are perturbed by 1e-3 (a wrong parity coefficient, say)."""
    from ftsim.trainer.parity import ParityCode

    original = ParityCode.decode

    def decode(self, failed):
        rows = original(self, failed)
        rows.values += np.float32(1e-3)
        return rows

    monkeypatch.setattr(ParityCode, "decode", decode)


def _failed_shard_forgotten(monkeypatch):
    """CPR forgets the last shard of every failure: it neither restores nor counts it."""
    original = ftsim.policies.cpr.failed_shards
    monkeypatch.setattr(
        ftsim.policies.cpr, "failed_shards", lambda trainers, nodes: original(trainers, nodes)[:-1]
    )


def _restart_waits_twice(monkeypatch):
    """A failed node's replacement arrives twice its rescheduling delay after the failure."""

    def await_replacements(self, failures):
        ready_s = max(f.time_s + 2 * f.reschedule_s for f in failures)
        yield from self.phase("reschedule", ready_s - self.env.now, "replace failed nodes")

    monkeypatch.setattr(ftsim.sim.engine.Simulation, "await_replacements", await_replacements)


BUGS = {
    "daly_example": _closed_form_save_10pct_slow,
    "daly_wall_time": _lost_work_quartered,
    "daly_optimum": _saves_move_half_the_bytes,
    "accounting_identity": _rescheduling_not_charged,
    "exact_recovery": _checkpoint_misses_dense_state,
    "exact_recovery_ecrm_swift": _decoding_off_by_1e_3,
    "pls_prediction": _failed_shard_forgotten,
    "kokolis_ettr": _restart_waits_twice,
}


def test_every_validation_check_has_a_planted_bug():
    validation = {name for name, (_, _, role) in REGISTRY.items() if role != CALIBRATION}
    assert set(BUGS) == validation


@pytest.mark.parametrize("name", sorted(BUGS))
def test_the_check_fails_with_the_bug(name, monkeypatch, tmp_path):
    BUGS[name](monkeypatch)
    assert not _passes(name, tmp_path)


@pytest.mark.parametrize("name", ["daly_example", "accounting_identity", "exact_recovery"])
def test_the_exact_checks_pass_without_the_bug(name, tmp_path):
    assert _passes(name, tmp_path)


def test_the_pls_check_fails_when_the_formula_leaves_out_the_shards_per_failure(
    monkeypatch, tmp_path
):
    """CPR's PLS formula without m (PLS = T_save / (2 N_emb T_fail), as for one shard per
    failure) plans and predicts consistently, so a check on single-shard failures alone
    passed with it (fidelity audit); its row of 3 shards per failure does not."""
    from ftsim.policies.cpr import CprPlan

    def choose_interval(self):
        return 2.0 * self.n_shards * self.mtbf_s * self._target_pls()

    def predicted_pls(self, interval_s):
        return interval_s / (2.0 * self.n_shards * self.mtbf_s)

    monkeypatch.setattr(CprPlan, "_choose_interval", choose_interval)
    monkeypatch.setattr(CprPlan, "predicted_pls", predicted_pls)
    [section] = run_checks(quick=True, figures=tmp_path, names=["pls_prediction"])
    passed = {check.name: check.passed for check in section.checks}
    assert passed == {"pls_prediction.1": True, "pls_prediction.3": False}
