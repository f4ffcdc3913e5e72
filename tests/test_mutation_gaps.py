"""Checks a mutation audit found missing: for each injected bug (a mutant) that the rest of
the suite let through, one test asserting a number the mutant changes. Each test's docstring
names the mutant it kills (file, the change) and the numbers on the code as it is and with
the mutant applied."""

import math

import numpy as np
import pytest

from ftsim.experiments.prepare import prepare
from ftsim.experiments.runner import simulate
from ftsim.policies.events import RestoreAll, RestoreShards
from ftsim.sim.network import max_min_rates
from tests.conftest import scenario
from tests.test_ecrm import _at, _ecrm
from tests.test_engine import _accounting_example
from tests.test_failures import _draw
from tests.test_operations import _scheduled, build, passes

# -- failure sources --------------------------------------------------------------------------


def test_correlated_rate_counts_the_shorter_last_domain():
    """Kills F04 (ftsim/sim/failures.py, CorrelatedFailures.rate_per_s:
    ``math.ceil(len(pool) / domain_size)`` -> ``len(pool) // domain_size``). 8 nodes in
    domains of 3 are 3 domains (3, 3 and 2 nodes), each failing every 2 h: the source fails
    3 / 7200 s⁻¹, one failure every 2400 s, as the drawn failures do. The mutant counts 2
    domains: 2 / 7200 s⁻¹."""
    s = scenario(
        "smoke",
        "failures.0={kind: correlated, role: any, domain_size: 3, domain_mtbf: 2 h}",
    )
    source = s.failures[0]
    assert source.rate_per_s(s) == pytest.approx(3 / 7200, rel=1e-12)
    gaps = np.diff([0.0] + [f.time_s for f in _draw(s, limit=20_000)])
    se = gaps.std(ddof=1) / math.sqrt(len(gaps))
    assert abs(gaps.mean() - 2400) < 4 * se
    assert abs(gaps.mean() - 1 / source.rate_per_s(s)) < 4 * se


def test_scheduled_count_failures_fall_in_their_window():
    """Kills F10 (ftsim/sim/failures.py, ScheduledFailures.events:
    ``start + (end - start) * rng.random(count)`` -> ``end * rng.random(count)``). 200
    failures uniform in [2 h, 3 h]: every one in [7200 s, 10800 s], their mean 9000 s within
    4 standard errors (3600 / √12 / √200 = 73 s). The mutant draws them in [0, 10800 s]:
    about two thirds before 7200 s, mean about 5400 s."""
    s = scenario("smoke", "failures.0={kind: scheduled, count: 200, start: 2 h, end: 3 h}")
    times = np.array([f.time_s for f in _draw(s)])
    assert len(times) == 200
    assert times.min() >= 7200 and times.max() <= 10800
    se = times.std(ddof=1) / math.sqrt(len(times))
    assert abs(times.mean() - 9000) < 4 * se


# -- the engine ---------------------------------------------------------------------------------


def test_a_composed_policys_lost_work_is_charged_to_the_part_that_rolled_back():
    """Kills E12 (ftsim/sim/engine.py, Simulation.rollback_to: the per-part charge
    ``self.charged_parts[part]["lost"] += ...`` -> ``pass``). In the composed accounting
    example (SWIFT on shard 1 and the dense state, CPR on the rest) the job loses 6.94e-6 h
    (0.025 s: half an iteration in flight when the trainer fails), all of it SWIFT's: the
    parts' ``<part>/lost_h`` sum to ``lost_h``. The mutant leaves ``swift/lost_h`` at 0 and
    the parts sum to 0."""
    row = _accounting_example("composed")
    assert row["lost_h"] == pytest.approx(0.025 / 3600, rel=1e-6)
    parts = row["swift/lost_h"] + row["cpr/lost_h"]
    assert parts == pytest.approx(row["lost_h"], rel=1e-9)
    assert row["swift/lost_h"] == pytest.approx(row["lost_h"], rel=1e-9)


# -- cluster operations -----------------------------------------------------------------------

_CONSTANT_REPAIR = {
    "provisioning": {"kind": "constant", "mean": "0 s"},
    "detection": {"kind": "constant", "mean": "0 s"},
    "repair": {"automatic": {"kind": "constant", "mean": "1 h"}, "escalation": 0},
}
"""Replacements ready at the diagnosis, which is at the failure; every repair takes 1 h."""


def _installed(selection: str) -> list[float]:
    """The failure times (s) of the host that replaces emb_ps0 at 8000 s, as of its own
    failure at 9000 s, with two spares and ``host_selection`` = ``selection``. Hosts h0..h7
    hold the places, s1 and s2 are the fresh spares; every repair takes 3600 s:

    - 0 and 1: trainer0 (h0) and trainer1 (h1) fail, s1 and s2 replace them; h0, h1 are
      back at 3600, 3601, in the pool [h0, h1];
    - 3610: trainer2 (h2) fails, h0 replaces it (tied at 1 failure: the first);
    - 3620: trainer2 fails again: h0's 2nd failure; h1 replaces it; h0 is back at 7220;
    - 3630: trainer3 (h3) fails; no host is free, it waits; h2 (back at 7210) serves it;
    - 7220, 7230: h0 (2 failures) and h3 (1 failure) come back: the pool is [h0, h3];
    - 8000: emb_ps0 (h4) fails and takes h0 (free longest) or h3 (fewest failures);
    - 9000: emb_ps0 fails: the installed host's failures."""
    times = [0, 1, 3610, 3620, 3630, 8000, 9000]
    nodes = ["trainer0", "trainer1", "trainer2", "trainer2", "trainer3", "emb_ps0", "emb_ps0"]
    operations = {"spares": 2, "host_selection": selection, **_CONSTANT_REPAIR}
    ops = passes(build(operations, _scheduled(times, nodes)))
    failures = list(ops.failures())
    assert len(failures) == len(times)
    last = ops.seen[-1]
    assert last.time_s == 9000 and len(last.new) == 1
    return last.new[0].host.failures


def test_fewest_failures_installs_the_host_that_failed_least():
    """Kills O06 (ftsim/sim/operations.py, _Pool.take: ``min`` over the returned hosts'
    failure counts -> ``max``). Two repaired hosts in the pool when emb_ps0 fails at 8000 s,
    h0 with 2 failures (back first) and h3 with 1 (see :func:`_installed`): with
    ``fewest_failures`` h3 replaces it, and at emb_ps0's next failure at 9000 s that host
    has failed at [3630, 9000]; ``any`` takes h0 (free longest), [0, 3620, 9000]. The
    mutant takes the host with the most failures, h0: [0, 3620, 9000]."""
    assert _installed("fewest_failures") == [3630.0, 9000.0]
    assert _installed("any") == [0.0, 3620.0, 9000.0]  # the scenario tells the two apart


def test_retirement_counts_a_failure_exactly_a_window_ago():
    """Kills O05 (ftsim/sim/operations.py, retires: ``t >= since`` -> ``t > since``). With
    ``retirement: {failures: 2, window: 2 h}`` trainer0's host fails at 3600 s, is repaired
    in 1 h and put back in its place (no spares: its own place waits for it), and fails
    again at 10800 s, exactly 2 h later: the window includes its start, the host retires
    (n_retired 1). The mutant counts only the failure at 10800 s: n_retired 0."""
    operations = {"spares": 0, "retirement": {"failures": 2, "window": "2 h"}, **_CONSTANT_REPAIR}
    ops = passes(build(operations, _scheduled([3600, 10800], ["trainer0", "trainer0"])))
    assert len(list(ops.failures())) == 2
    first, second = (record.new[0] for record in ops.seen)
    assert second.host is first.host and second.host.failures == [3600.0, 10800.0]
    assert not first.retired and second.retired
    assert ops.columns(2)["n_retired"] == 1


# -- policies -----------------------------------------------------------------------------------


def test_full_saved_gb_is_decimal_gigabytes_of_the_checkpoints():
    """Kills P02 (ftsim/policies/full.py, result_columns: ``saved_gb = ... / 1e9`` ->
    ``/ 2**30``). prod50h's ``full`` (timing only) writes 65 checkpoints of the whole
    state, 26 · 33e6 rows · (128 · 4 + 4) B + 20e6 · 4 · 2 B = 442.888e9 B each:
    saved_gb = 65 · 442.888 = 28787.72. The mutant gives 26810.6 (GiB)."""
    sim = simulate(scenario("prod50h"), 0, 0)
    row = sim.row()
    total_B = sim.policy.layout.total_bytes
    assert total_B == 26 * 33e6 * (128 * 4 + 4) + 20e6 * 4 * 2
    assert row["n_checkpoints"] > 0
    assert row["saved_gb"] == pytest.approx(row["n_checkpoints"] * total_B / 1e9, rel=1e-12)


def _swift_trainer_failure(undo_iterations: int) -> dict:
    return simulate(
        scenario(
            "smoke",
            "failures=[{kind: scheduled, times: [50 min], nodes: [[trainer1]]}]",
            f"policies=[{{kind: swift, interval: 30 min, undo_iterations: {undo_iterations}}}]",
        ),
        0,
        0,
    ).row()


def test_swift_undo_time_scales_with_the_undone_iterations():
    """Kills W08 (ftsim/policies/swift.py, SwiftPlan: ``undo_s = undo_iterations ×
    undo_compute_frac × iteration_s`` without the ``undo_iterations ×`` factor). The schema
    allows ``undo_iterations`` 0 or 1 (not 2, as proposed). smoke (50 ms iterations, the
    default undo_compute_frac 0.1) with one trainer failure: undo_s is 0 for 0 iterations
    and 0.005 s for 1, and the recovery's load time differs by exactly that. The mutant's
    undo_s is 0.005 s for both, and the load times are equal."""
    none, one = _swift_trainer_failure(0), _swift_trainer_failure(1)
    assert none["undo_s"] == 0.0
    assert one["undo_s"] == pytest.approx(1 * 0.1 * 0.05, rel=1e-12)
    assert (one["load_h"] - none["load_h"]) * 3600 == pytest.approx(0.005, rel=1e-6)


def test_ecrm_second_failure_during_a_rebuild_falls_back():
    """Kills R10 (ftsim/policies/ecrm.py, on_failure: ``lost = self.degraded.keys() |
    shards`` -> ``lost = shards``). prod50h's ECRM (k = 2, r = 1, 24 h interval,
    ``fallback: rollback``): emb_ps3 fails at 30 h, and emb_ps4 (sharing stripes with
    shard 3) 30 s later, while shard 3 is still degraded (its replacement, 1 min, is not
    ready; its rebuild not done): stripes with two members lost are not decodable, and the
    job rolls back from 102892 s of progress to the checkpoint at 24 h (86400 s):
    n_fallbacks 1, lost_h 4.58. The mutant sees shard 4 alone and decodes it: n_fallbacks
    0, lost_h 0.0."""
    s = _ecrm(_at(("30 h", ["emb_ps3"]), ("108030 s", ["emb_ps4"])), "policies.1.fallback=rollback")
    sim = prepare(s, 1).replicate(0).run()
    row = sim.row()
    assert row["n_fallbacks"] == 1
    (rollback,) = [e for e in sim.model_events if isinstance(e, RestoreAll)]
    assert rollback.key == 86400.0
    assert row["lost_h"] == pytest.approx((rollback.progress_s - rollback.key) / 3600, rel=1e-9)
    assert row["lost_h"] == pytest.approx(4.581, abs=1e-3)


def _mfu_twice(times: list[str]):
    """smoke with CPR-MFU (full every 3 h, partial saves every 1 h, no fall-back, trainers
    recovered from a replica); emb_ps1 fails at ``times``."""
    victims = ", ".join("[emb_ps1]" for _ in times)
    return (
        prepare(
            scenario(
                "smoke",
                f"failures=[{{kind: scheduled, times: [{', '.join(times)}], nodes: [{victims}]}}]",
                "policies=[{kind: cpr_mfu, interval: 3 h, partial_interval: 1 h,"
                " fallback: false, trainer_failure: replica}]",
            ),
            0,
        )
        .replicate(0)
        .run()
    )


def test_cpr_a_shards_second_loss_counts_from_its_first():
    """Kills C20 (ftsim/policies/cpr.py, on_failure: ``since_partial = max(since,
    partial_saved_s)`` -> ``since_partial = partial_saved_s``). emb_ps1 fails at 70 min
    (progress p1 = 4199.9 s) and 100 min (p2 = 5752.2 s); the partial save at 3600 s of
    progress keeps a share σ = 0.8466 of shard 1's updates. The first loss is
    (1 − σ) · p1 + σ · (p1 − 3600) = 1152.2 s; at the second, shard 1 was reloaded at p1,
    after the partial save, so it loses exactly what it gained since: p2 − p1 = 1552.2 s,
    total 2704.5 s = pls_model · work · 4 shards. The mutant counts the saved share from
    the partial save again, adding σ · (p1 − 3600) = 507.9 s: 3212.3 s."""
    one, two = _mfu_twice(["70 min"]), _mfu_twice(["70 min", "100 min"])
    first, second = (e.progress_s for e in two.model_events if isinstance(e, RestoreShards))
    work_s = 4 * 3600
    lost = [sim.row()["pls_model"] * work_s * 4 for sim in (one, two)]
    assert lost[1] - lost[0] == pytest.approx(second - first, rel=1e-9)
    assert lost[1] == pytest.approx(2704.48, abs=0.01)


# -- the network --------------------------------------------------------------------------------


def test_a_weighted_group_freezes_all_its_members_on_a_shared_link():
    """Kills N02 (ftsim/sim/network.py, _max_min_weighted: ``newly[other] += w`` ->
    ``+= 1``). A group of 3 members sharing link 0 (3 B/s) and link 1 (10 B/s) with one
    more flow on link 1: the members freeze at 1 B/s on link 0, and take 3 B/s of link 1,
    which leaves 7 B/s to the other flow, as for the 3 members one by one. The mutant
    freezes one member on link 1: the other flow gets (10 − 1) / 3 = 3 B/s."""
    assert max_min_rates([[0, 1], [1]], [3.0, 10.0], [(3, 3), None]) == [1.0, 7.0]
    assert max_min_rates([[0, 1]] * 3 + [[1]], [3.0, 10.0]) == [1.0, 1.0, 1.0, 7.0]


# -- found by the same audit, written with it -----------------------------------------------


def test_cprs_predictions_hold_every_term_of_their_formulas():
    """Kill C04 and C05 (ftsim/policies/cpr.py, the predicted overheads CPR decides by:
    ``full = δ/τ + (τ/2 + R + L_all)/M`` without ``+ L_all``, ``partial = δ/T + (R +
    L_m)/M + rollbacks`` without ``+ L_m``). smoke, CPR every 30 min: δ = 1.032 s,
    M = 3600 s, R = 120 s, L_all = 0.528 s, L_m = 0.1024 s; τ = Daly's interval. Only the
    comparison of the two was tested: 0.05742515 and 0.03393511 (C04: 0.0572785; C05:
    2.8e-5 less)."""
    from ftsim.sim.theory import daly_interval_s

    s = scenario("smoke", "policies=[{kind: cpr, interval: 30 min}]")
    plan = simulate(s, 0, 0).policy.plan
    delta, mtbf, restart = plan.stall_s, plan.mtbf_s, s.cluster.reschedule.expected_s
    assert (delta, mtbf, restart) == (pytest.approx(1.032), 3600.0, 120.0)
    assert (plan.load_all_s, plan.load_lost_s) == (pytest.approx(0.528), pytest.approx(0.1024))
    tau = daly_interval_s(delta, mtbf)
    full = delta / tau + (tau / 2 + restart + plan.load_all_s) / mtbf
    assert plan.predicted["full"] == pytest.approx(full, rel=1e-12)
    assert plan.predicted["full"] == pytest.approx(0.05742515, rel=1e-6)
    partial = delta / 1800 + (restart + plan.load_lost_s) / mtbf
    assert plan.predicted["partial"] - plan.predicted["rollbacks"] == pytest.approx(
        partial, rel=1e-12
    )


def _mfu_plan(policy: str):
    return simulate(scenario("smoke", f"policies=[{policy}]"), 0, 0).policy.plan


def test_mfus_partial_saves_hold_at_most_the_rows_used():
    """Kills C10 (ftsim/policies/cpr.py, CPR-MFU's saving: ``rows = min(fraction ×
    shard_rows, used / n_shards)`` -> ``fraction × shard_rows``). A partial save every 5 s
    (100 iterations) of ``fraction: 1.0`` saves the rows those iterations touch, 31,012 per
    shard on smoke, not the shard's 1,000,000 (the mutant)."""
    plan = _mfu_plan(
        "{kind: cpr_mfu, interval: 2 h, partial_interval: 5 s, fraction: 1.0, fallback: false}"
    )
    assert plan.saving.rows == pytest.approx(31011.85, abs=0.01)
    assert plan.saving.rows < plan.params.fraction * 4e6 / plan.n_shards


def test_partial_saves_rarer_than_the_full_ones_do_not_lower_the_predicted_pls():
    """Kills C17 (ftsim/policies/cpr.py: ``period = min(saving.period_s, interval_s)`` ->
    ``saving.period_s``). Partial saves every 2 h with full saves every 30 min never come:
    pls_predicted is the full saves' 0.03125 (the mutant 0.111, as if partial saves every
    2 h were what bounds the loss)."""
    plan = _mfu_plan("{kind: cpr_mfu, interval: 30 min, partial_interval: 2 h, fallback: false}")
    assert plan.predicted_pls(plan.interval_s) == pytest.approx(0.03125, rel=1e-12)
    sim = simulate(
        scenario(
            "smoke",
            "policies=[{kind: cpr_mfu, interval: 30 min, partial_interval: 2 h, fallback: false}]",
        ),
        0,
        0,
    )
    assert sim.row()["pls_predicted"] == pytest.approx(0.03125, rel=1e-12)


def test_checknruns_row_holds_its_optimizer_state():
    """Kills K07 (ftsim/policies/checknrun.py: ``row_bytes = stored values + ranges +
    (mean_row_bytes − value_bytes)`` without the optimizer term). prod50h's rows hold 128
    fp32 values and a 4-byte Adagrad accumulator: 4-bit adaptive quantization stores 64 B
    of values + 8 B of range + 4 B = 76 B per row, unquantized 516 B (the mutant: 72, 512).
    Every other Check-N-Run plan test runs on smoke, whose rows have no optimizer state."""
    s = scenario(
        "prod50h",
        "policies=[{kind: checknrun, name: q, interval: 1 h, quantize_bits: 4,"
        " quantization: adaptive}, {kind: checknrun, name: u, interval: 1 h}]",
    )
    assert [simulate(s, i, 0).policy.plan.row_bytes for i in (0, 1)] == [76.0, 516.0]


def test_checknruns_one_shot_cycle_is_planned_as_one_shot():
    """Kills K03 (ftsim/policies/checknrun.py: ``since = (k if one_shot else 1) ×
    interval_s`` -> ``interval_s``): a one-shot differential holds the changes since the
    baseline k intervals back, larger than a consecutive one's. smoke, every 20 min, a
    baseline every 4: one_shot's planned save 0.99608 s and load 0.89404 s, consecutive's
    save 0.94585 s (the mutant plans both the same)."""
    s = scenario(
        "smoke",
        "policies=[{kind: checknrun, name: a, interval: 20 min, baseline_every: 4,"
        " differential: one_shot}, {kind: checknrun, name: b, interval: 20 min,"
        " baseline_every: 4, differential: consecutive}]",
    )
    one_shot, consecutive = (simulate(s, i, 0).policy.plan for i in (0, 1))
    assert one_shot.save_s == pytest.approx(0.99608396, rel=1e-7)
    assert one_shot.load_s == pytest.approx(0.89404198, rel=1e-7)
    assert consecutive.save_s == pytest.approx(0.94584485, rel=1e-7)


def test_a_failure_of_several_nodes_waits_for_its_last_replacement():
    """Kills O01 (ftsim/sim/operations.py: a failure's ready time ``max`` over its nodes'
    replacements -> ``min``). One spare, two PS failing together at 1 h: one takes the
    spare, the other waits for a repaired host (30 min): the failure's reschedule is
    2047.5 s (the mutant's, the first replacement's, 247.5 s)."""
    ops = {
        "spares": 1,
        "provisioning": {"mean": "0 s"},
        "repair": {"automatic": {"kind": "constant", "mean": "30 min"}, "escalation": 0},
    }
    failures = [{"kind": "scheduled", "times": ["1 h"], "nodes": [["emb_ps0", "emb_ps1"]]}]
    first = next(passes(build(ops, failures, emb_ps=2)).failures())
    assert first.reschedule_s == pytest.approx(2047.5418, abs=1e-3)
    assert first.reschedule_s >= 1800


def test_a_persist_does_not_survive_the_failure_of_the_first_ps():
    """Kills S01 (ftsim/policies/saving.py: a persist is lost when a node at or past the
    trainers fails, ``n >= trainers`` -> ``n > trainers``: emb_ps0's failure spared it).
    smoke, CPR with CheckFreq saves every 20 min of a 30 min job: the persist runs from
    1200.005 s to 1201.04 s, and emb_ps0 fails at 1201 s: no checkpoint commits (the
    mutant: 1)."""
    sim = simulate(
        scenario(
            "smoke",
            "policies=[{kind: cpr, interval: 20 min, save_mode: checkfreq, fallback: false}]",
            "failures=[{kind: scheduled, times: [1201 s], nodes: [[emb_ps0]]}]",
            "job.training=30 min",
        ),
        0,
        0,
    )
    persists = [p for p in sim.timeline if p.category == "persist"]
    assert len(persists) == 1 and persists[0].start_s < 1201 < persists[0].start_s + 1.1
    assert sim.row()["n_checkpoints"] == 0


def test_a_lost_persist_is_made_again_an_interval_after_the_last_committed():
    """Kills P01 (ftsim/policies/full.py, on_failure: ``next_s = committed_s + interval``
    dropped). CheckFreq saves every 20 min of a 50 min job; emb_ps1 fails at 1201 s, during
    the first persist: the next save is due an interval after the last committed state, and
    persists start at 1200.0, 2649.1 and 3849.1 s: 2 checkpoints (the mutant skips the
    2649 s persist: 1)."""
    sim = simulate(
        scenario(
            "smoke",
            "policies=[{kind: full, interval: 20 min, save_mode: checkfreq}]",
            "failures=[{kind: scheduled, times: [1201 s], nodes: [[emb_ps1]]}]",
            "job.training=50 min",
        ),
        0,
        0,
    )
    starts = [round(p.start_s, 1) for p in sim.timeline if p.category == "persist"]
    assert starts == [1200.0, 2649.1, 3849.1]
    assert sim.row()["n_checkpoints"] == 2


def test_n_failed_nodes_counts_nodes_not_failures():
    """Kills E10 (ftsim/sim/engine.py: ``n_failed_nodes = sum(len(f.nodes) ...)`` ->
    ``len(failures_seen)``). The full accounting example has 3 failures, one of two
    shards: 4 failed nodes."""
    row = _accounting_example("full")
    assert (row["n_failures"], row["n_failed_nodes"]) == (3, 4)


def test_an_escalated_repair_takes_the_automatic_then_the_manual_time():
    """Kills O08 (ftsim/sim/operations.py: ``duration += manual`` -> ``duration = manual``;
    caught before only by the curated spares example). Every repair escalates: 1 h of
    automatic repair, then 5 h of manual; with no spare, trainer0's place waits for its own
    host: ready 6 h after the failure (the mutant: 5 h)."""
    manual = {"escalation": 1, "manual": {"kind": "constant", "mean": "5 h"}}
    operations = {**_CONSTANT_REPAIR, "spares": 0}
    operations["repair"] = {**_CONSTANT_REPAIR["repair"], **manual}
    ops = passes(build(operations, _scheduled([3600], ["trainer0"])))
    (failure,) = ops.failures()
    fate = ops.seen[0].new[0]
    assert fate.from_repair and fate.waited_s == pytest.approx(6 * 3600)
    assert failure.reschedule_s >= 6 * 3600


def test_a_repair_that_cannot_miss_makes_a_bad_host_good():
    """Kills O07 (ftsim/sim/operations.py: ``fixed = u >= miss`` -> ``u < miss``; caught
    before only by the curated spares example). Every host is bad and an automatic repair
    never misses (``automatic_miss: 0``): trainer0's host, bad when it fails at 1 h, is
    repaired and put back, and is good when it fails again at 5 h (the mutant never fixes
    a host: bad again)."""
    operations = {**_CONSTANT_REPAIR, "spares": 0, "bad_nodes": {"share": 1.0, "multiplier": 4}}
    operations["repair"] = {**_CONSTANT_REPAIR["repair"], "automatic_miss": 0}
    ops = passes(build(operations, _scheduled([3600, 18000], ["trainer0", "trainer0"])))
    assert len(list(ops.failures())) == 2
    first, second = (record.new[0] for record in ops.seen)
    assert second.host is first.host
    assert first.bad and not second.bad
