"""Composed policies: parts of the state managed by their own policies.

Time model: composing a policy with itself over any split gives the policy back (PLS, bytes
saved, save and load time), the per-part columns add up to the job's, failures reach only
the parts whose nodes failed. Trainer: a part's event changes only its rows. Validation:
every invalid composition is refused with the field at fault.
"""

import subprocess
import sys

import numpy as np
import pytest

from ftsim.cosim.replay import PolicyModel, trainer_config
from ftsim.experiments.prepare import prepare
from ftsim.experiments.runner import simulate
from ftsim.policies.base import memory_frac
from ftsim.policies.composed import Composed, PartEvent
from ftsim.scenario.loader import ScenarioError
from ftsim.sim.accounting import PART_CATEGORIES
from ftsim.trainer import Trainer
from tests.conftest import SCENARIOS, scenario
from tests.test_cosim import SMALL_TRAINER

H = 3600.0
CPR = "{kind: cpr, interval: 10 h, fallback: false, trainer_failure: replica}"


def _two(first: str, scope: str, policy: str, rest: str = CPR, names=("hot", "cold")) -> str:
    """Two parts: ``first`` with ``scope`` and ``policy``, and the rest under ``rest``."""
    return (
        f"[{{name: {names[0]}, scope: {scope}, policy: {policy}}},"
        f" {{name: {names[1]}, scope: rest, policy: {rest}}}]"
    )


BY_ROWS = _two("hot", "{hottest: 0.05}", CPR)
BY_SHARDS = _two("a", "{shards: [0, 1, 2]}", CPR, names=("a", "b"))


def _cpr_and(parts: str, failures: str, *extra):
    """prod50h with plain CPR (policy 0) and a composition (policy 1), scripted failures."""
    policies = f"policies=[{CPR}, {{kind: composed, name: mix, parts: {parts}}}]"
    return scenario("prod50h", policies, f"failures=[{{kind: scheduled, {failures}}}]", *extra)


TWO_FAILURES = "times: [5 h, 20 h], nodes: [[emb_ps1, emb_ps2], [emb_ps2]]"


@pytest.mark.parametrize("parts", [BY_ROWS, BY_SHARDS], ids=["by rows", "by shards"])
def test_cpr_composed_with_itself_is_cpr(parts):
    """The parts' PLS (weighted by their lookups) and bytes add up to CPR's, their saves and
    reloads (each transfer bound by the storage or a NIC alone) take CPR's time."""
    s = _cpr_and(parts, TWO_FAILURES)
    plain, mix = (simulate(s, i, 0).row() for i in range(2))
    # the parts' saves are separate transfers (one more latency each, 50 us): the second
    # failure finds a progress a few hundred microseconds earlier
    assert mix["pls_model"] == pytest.approx(plain["pls_model"], rel=1e-7)
    assert plain["pls_model"] > 0
    assert mix["saved_gb"] == pytest.approx(plain["saved_gb"], rel=1e-9)
    assert mix["n_checkpoints"] == 2 * plain["n_checkpoints"]
    if parts is BY_ROWS:  # both parts save every shard: the same bytes, the same time
        assert mix["save_h"] == pytest.approx(plain["save_h"], rel=1e-5)
        assert mix["load_h"] == pytest.approx(plain["load_h"], rel=1e-5)
    assert mix["reschedule_h"] == plain["reschedule_h"]
    assert mix["overhead_frac"] == pytest.approx(plain["overhead_frac"], rel=1e-3)


def _parts_add_up(row, names):
    for category in PART_CATEGORIES:
        total = sum(row[f"{name}/{category}_h"] for name in names)
        assert total == pytest.approx(row[f"{category}_h"], rel=1e-12, abs=1e-15), category


def test_the_parts_columns_add_up_to_the_jobs_categories():
    s = scenario("composed", "run.replications=3")
    for index, policy in enumerate(s.policies):
        if policy.kind != "composed":
            continue
        names = [part.label for part in policy.parts]
        for rep in range(3):
            row = simulate(s, index, rep).row()
            _parts_add_up(row, names)
            assert sum(row[f"{n}/save_h"] for n in names) > 0


ECRM_K2 = "{kind: ecrm, k: 2, r: 1, fallback: partial, interval: 9 h}"
MFU = "{kind: cpr_mfu, interval: 10 h, fallback: false, trainer_failure: replica}"


def test_a_compositions_memory_is_per_ps_as_a_share_of_the_whole_shard():
    """ECRM (r/k = 1/2 of the state it protects) on the hottest 5% of every shard costs each
    PS 2.5% of its shard, not 50% (the part's own column, of its own rows), and the limit
    of ``advise`` reads that (a new user's composition was refused at 0.25 > 0.05, for
    0.0125). By shards, a PS holds one part's whole shard: the most any part needs."""
    row = simulate(_cpr_and(_two("hot", "{hottest: 0.05}", ECRM_K2), TWO_FAILURES), 1, 0).row()
    assert row["hot/parity_mem_frac"] == 0.5  # the part's own, of its rows
    assert row["parts_mem_frac"] == pytest.approx(0.05 * 0.5, rel=1e-12)
    assert memory_frac(row) == row["parts_mem_frac"]
    by_shards = _two("a", "{shards: [0, 1, 2]}", MFU, names=("a", "b"))
    row = simulate(_cpr_and(by_shards, TWO_FAILURES), 1, 0).row()
    assert row["parts_mem_frac"] == row["a/tracker_mem_frac"] > 0  # CPR (b) tracks nothing
    assert memory_frac({"parity_mem_frac": 0.5, "tracker_mem_frac": 0.25}) == 0.75


def _only_part_a_reloads(s):
    row = simulate(s, 1, 0).row()
    assert row["a/load_h"] > 0 and row["b/load_h"] == 0, (row["a/load_h"], row["b/load_h"])
    return row


def test_a_failure_reaches_only_the_part_whose_nodes_failed(monkeypatch):
    s = _cpr_and(BY_SHARDS, "times: [5 h], nodes: [[emb_ps1]]")
    row = _only_part_a_reloads(s)
    plain = simulate(s, 0, 0).row()
    assert row["a/load_h"] == pytest.approx(plain["load_h"], rel=1e-12)  # one whole shard
    assert row["pls_model"] == pytest.approx(plain["pls_model"], rel=1e-12)
    # a trainer failure reaches the part holding the dense parameters (b, the rest) only
    t = simulate(_cpr_and(BY_SHARDS, "times: [5 h], nodes: [[trainer3]]"), 1, 0).row()
    assert t["b/load_h"] > 0 and t["a/load_h"] == 0 and t["pls_model"] == 0
    # injected bug: every part sees every failed node
    monkeypatch.setattr(Composed, "_local", lambda self, failure, scope: failure)
    with pytest.raises(AssertionError):
        _only_part_a_reloads(s)


def test_parity_for_the_hot_rows_keeps_their_updates():
    """ECRM on the hottest rows and CPR on the rest lose less than CPR alone (only the cold
    rows' updates), by the share of lookups the hot rows carry. (One failure before any
    save, with the parity traffic hidden behind compute: both runs reach it at the same
    progress.)"""
    ecrm = "{kind: ecrm, fallback: partial, interval: 10 h, parity_overlap: 1}"
    parts = _two("hot", "{hottest: 0.05}", ecrm)
    s = _cpr_and(parts, "times: [5 h], nodes: [[emb_ps1]]")
    plain, sim = simulate(s, 0, 0).row(), simulate(s, 1, 0)
    mix = sim.row()
    cold = mix["cold/lookups_share"]
    assert 0 < cold < 0.5  # Zipf 1.05: the top 5% of rows carry most lookups
    assert mix["hot/pls_model"] == 0  # one server per stripe lost: every hot row decodes
    assert mix["pls_model"] == pytest.approx(cold * plain["pls_model"], rel=1e-12)
    # The hot rows' rebuild starts with the replacement, but its first range switch, which
    # stops training, waits for the job, stalled by the cold rows' reload: the switches
    # are the hot part's degraded time, with its degraded reads between them.
    [reload] = [p for p in sim.timeline if p.category == "load"]
    switches = [p for p in sim.timeline if p.activity == "range switch"]
    assert len(switches) == 11 and switches[0].start_s == reload.end_s
    paused_s = sum(p.end_s - p.start_s for p in switches)
    assert paused_s < mix["hot/degraded_h"] * 3600 < 1.1 * paused_s
    assert mix["cold/degraded_h"] == 0 and mix["hot/recovery_s"] > 0


# -- on the trainer -----------------------------------------------------------------------


def _hot_parity_cold_checkpoint():
    ecrm = "{kind: ecrm, fallback: partial, interval: 10 h}"
    parts = _two("hot", "{hottest: 0.2}", ecrm)
    return _cpr_and(parts, "times: [25 h], nodes: [[emb_ps1]]", SMALL_TRAINER)


def _check_failure_restores_each_part_its_own_way(s):
    """Step a trainer through the composition's events; at the failure, the failed shard's
    hot rows are decoded (the values they had), its cold rows return to the checkpoint, the
    other shards keep theirs, and the lost lookups are the cold rows' since the checkpoint."""
    sim = simulate(s, 1, 0)
    model = PolicyModel(sim, trainer_config(s, 0), s.trainer.steps)
    trainer = model.trainer = Trainer(model.cfg)
    model.follow(trainer, own=True)
    failure = [e for e in model.events if e.modifies]
    assert {type(e.inner).__name__ for e in failure} == {"DecodeShards", "RestoreShards"}
    key = next(e.inner.key for e in failure if type(e.inner).__name__ == "RestoreShards")
    before = None
    for event in model.events:
        PolicyModel._advance(trainer, model.step_of(event))
        if event.modifies and before is None:
            before = trainer.snapshot()
            cold_saved = model.side.parts[1].saved_lookups.copy()
        model.apply(event, trainer)
        if event is failure[-1]:
            break
    emb = trainer.embeddings
    rows = emb.shard_rows(1)
    hot = model.side.parts[0].in_scope(trainer, rows)
    assert 0 < hot.sum() < len(rows)
    now = trainer.read_rows(np.arange(emb.n_rows)).values
    was = before.embeddings.values
    saved = model.checkpoints[key].embeddings.values
    others = np.setdiff1d(np.arange(emb.n_rows), rows)
    assert np.array_equal(now[others], was[others])
    assert np.array_equal(now[rows[~hot]], saved[rows[~hot]])
    assert np.allclose(now[rows[hot]], was[rows[hot]], rtol=1e-5, atol=1e-7)
    assert not np.allclose(now[rows[hot]], saved[rows[hot]])  # they did change since
    counts = trainer.mfu.counts
    cold = rows[~hot]
    assert model.lost_lookups == int((counts[cold] - cold_saved[cold]).sum()) > 0


def test_on_the_trainer_each_part_restores_only_its_rows(monkeypatch):
    s = _hot_parity_cold_checkpoint()
    _check_failure_restores_each_part_its_own_way(s)

    # injected bug: a part's event is applied to the whole shard (no put-back)
    def unscoped(self, model, trainer):
        self.inner.apply(model.side.parts[self.part], trainer)

    monkeypatch.setattr(PartEvent, "apply", unscoped)
    with pytest.raises(AssertionError):
        _check_failure_restores_each_part_its_own_way(s)


def test_a_composed_run_trains_and_reports_every_part(tmp_path):
    s = _hot_parity_cold_checkpoint()
    from ftsim.cosim.replay import cosimulate

    columns = cosimulate(s, [simulate(s, i, 0) for i in range(2)])
    mix = columns[1]
    assert mix["pls_measured"] > 0
    assert mix["hot/decode_max_rel_err"] < 1e-5
    lost = mix["hot/pls_measured_lookups"] + mix["cold/pls_measured_lookups"]
    assert lost > 0 and mix["hot/pls_measured_lookups"] == 0


# -- validation ---------------------------------------------------------------------------


def _problems(parts: str, *extra):
    policies = f"policies=[{{kind: composed, parts: {parts}}}]"
    with pytest.raises(ScenarioError) as caught:
        scenario("prod50h", policies, *extra)
    return caught.value.problems


ECRM = "{kind: ecrm, fallback: partial}"
MFU = "{kind: cpr_mfu, interval: 10 h, fallback: false}"


@pytest.mark.parametrize(
    ("parts", "path", "words"),
    [
        (
            "[{scope: {hottest: 0.1}, policy: {kind: cpr, interval: 1 h}}, {scope: rest, policy: "
            "{kind: ecrm, fallback: partial}}]",
            "policies.0.parts.0.policy.fallback",
            "fallback: false",
        ),
        (
            f"[{{scope: {{hottest: 0.1}}, policy: {ECRM}}}, {{scope: rest, policy: {MFU}}}]",
            "policies.0.parts.1.policy.kind",
            "split the composition by shards",
        ),
        (
            f"[{{scope: {{hottest: 0.1}}, policy: {ECRM}}}, {{scope: rest, policy: "
            "{kind: cpr, interval: 1 h, fallback: false}}]",
            "policies.0.parts.1.policy.trainer_failure",
            "replica",
        ),
        (
            f"[{{scope: {{shards: [1]}}, policy: {ECRM}}}, {{scope: rest, policy: {CPR}}}]",
            "policies.0.parts.0.policy.kind",
            "not a set of shards",
        ),
        (
            f"[{{scope: {{shards: [0]}}, policy: {{kind: full}}}}, {{scope: rest, policy: {CPR}}}]",
            "policies.0.parts.0.policy.kind",
            "rolls every node back",
        ),
        (
            f"[{{scope: {{shards: [3, 18]}}, policy: {MFU}}}, {{scope: rest, policy: {CPR}}}]",
            "policies.0.parts.0.scope.shards",
            "shard 18 does not exist",
        ),
        (
            f"[{{name: x, scope: {{shards: [3]}}, policy: {MFU}}},"
            f" {{name: y, scope: {{shards: [3]}}, policy: {MFU}}}, {{scope: rest, policy: {CPR}}}]",
            "policies.0.parts.1.scope.shards",
            "also in part 0",
        ),
        (
            "[{scope: {hottest: 0.1}, policy: {kind: swift, log_budget: 0.5}}, "
            f"{{scope: rest, policy: {CPR}}}]",
            "policies.0.parts.0.policy.unlogged",
            "unlogged: drop",
        ),
        (
            "[{scope: {hottest: 0.1}, policy: {kind: ecrm, k: 20, fallback: partial}}, "
            f"{{scope: rest, policy: {CPR}}}]",
            "policies.0.parts.0.policy.k",
            "",
        ),
    ],
)
def test_an_invalid_composition_is_refused_at_the_field_at_fault(parts, path, words):
    problems = _problems(parts, "cluster.emb_ps=18")
    assert any(p == path and words in m for p, m in problems), problems


@pytest.mark.parametrize(
    ("parts", "words"),
    [
        (f"[{{scope: rest, policy: {CPR}}}, {{scope: rest, policy: {CPR}}}]", "exactly one part"),
        (
            f"[{{scope: {{hottest: 0.1}}, policy: {ECRM}}}, {{scope: {{shards: [1]}}, "
            f"policy: {CPR}}}, {{scope: rest, policy: {CPR}}}]",
            "not both",
        ),
        (f"[{{scope: {{hottest: 0.1}}, policy: {CPR}}}, {{scope: rest, policy: {CPR}}}]", "differ"),
        (f"[{{scope: {{hottest: 1.5}}, policy: {CPR}}}, {{scope: rest, policy: {CPR}}}]", "less"),
        (f"[{{scope: everything, policy: {CPR}}}, {{scope: rest, policy: {CPR}}}]", "scope"),
        (
            f"[{{scope: {{shards: [0]}}, policy: {{kind: composed, parts: []}}}}, "
            f"{{scope: rest, policy: {CPR}}}]",
            "composed",
        ),
    ],
)
def test_a_malformed_composition_is_a_schema_error(parts, words):
    problems = _problems(parts)
    assert any(p.startswith("policies.0") and words in p + m for p, m in problems), problems


def test_the_cli_names_the_file_and_field_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    text = (SCENARIOS / "composed.yaml").read_text()
    bad.write_text(text.replace("fallback: false         # a part", "fallback: true  # a part"))
    result = subprocess.run(
        [sys.executable, "-m", "ftsim", "run", str(bad), "--no-trainer", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert f"{bad}: policies.2.parts.1.policy.fallback:" in result.stderr
    assert "Traceback" not in result.stderr


def test_parts_are_planned_once_and_shared_by_every_replication():
    s = scenario("composed")
    prepared = prepare(s, 2)
    plan = prepared.plan
    a, b = prepared.replicate(0).policy, prepared.replicate(1).policy
    assert a.scopes is b.scopes is plan.scopes
    assert [part.plan for part in a.parts] == plan.parts == [part.plan for part in b.parts]
    assert a.parts[0] is not b.parts[0]  # each replication's own state
    assert sum(scope.lookups_share for scope in plan.scopes) == pytest.approx(1.0, rel=1e-12)


def test_show_policies_lists_the_parts_and_their_scope(capsys):
    from ftsim.cli import main

    assert main(["show", "policies"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("\ncomposed: ") :]
    for line in ("    parts: ", "        scope: ", "            hottest: ", "        policy: "):
        assert f"\n{line}" in block, line


def test_the_tables_name_each_parts_interval_and_cpr_decision(tmp_path, capsys):
    """A composed policy's ``interval run`` and ``cpr_decision`` cells read "-" in the run and
    sweep tables, though its parts ran intervals and CPR part decided: they name each part's,
    in the order of the parts."""
    import pandas as pd

    from ftsim.cli import main
    from ftsim.experiments.tables import sweep_table

    parts = _two("hot", "{hottest: 0.05}", "{kind: ecrm, interval: 9 h, fallback: partial}")
    parts = parts.replace("hot, scope", "parity, scope")
    policies = f"policies=[{CPR}, {{kind: composed, name: mix, parts: {parts}}}]"
    args = ["run", str(SCENARIOS / "prod50h.yaml"), "--set", policies, "--no-trainer"]
    assert main([*args, "--reps", "2", "--jobs", "1", "-o", str(tmp_path)]) == 0
    mix = capsys.readouterr().out.splitlines()[2]
    assert mix.split()[:4] == ["mix", "cold:", "partial", "@"], mix
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert summary["cold/cpr_decision"].tolist()[1] == "partial"
    line = sweep_table(summary, []).splitlines()[2]
    assert "parity 9 h, cold 10 h  cold: partial @ 10 h  2" in line, line
