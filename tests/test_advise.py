"""``ftsim advise``: its pick is as good as the best point of a brute-force grid (on prod50h
and on a scenario with random failure times), meets the limits, and a limit no setting
meets is said plainly (exit status 1)."""

import re
import warnings

import numpy as np
import pandas as pd
import pytest

from ftsim.cli import main
from ftsim.experiments import advise as search
from ftsim.notices import short_duration
from ftsim.plots.collisions import collisions
from ftsim.plots.frontier import frontier_figure
from tests.conftest import SCENARIOS

PROD50H = SCENARIOS / "prod50h.yaml"
ECRM = SCENARIOS / "ecrm_vs_checkpoint.yaml"


def _brute_force(monkeypatch, path, policies, **limits):
    """The same search with no refinement over a fine grid: 25 intervals (geometric, 10 min
    to the training time) times every coarse value of the other knobs."""
    coarse = search.knobs

    def fine(policy, scenario):
        work = scenario.job.work_s
        intervals = tuple(600.0 * (work / 600.0) ** (i / 24) for i in range(25))
        return [search.Knob("interval", intervals), *coarse(policy, scenario)[1:]]

    with monkeypatch.context() as patch:
        patch.setattr(search, "knobs", fine)
        return search.advise(path, policies=policies, rounds=0, **limits)


def _check(advice, brute, max_pls=None, max_memory=None):
    """Every pick meets the limits and is within the 95% CI of the brute-force best (or
    better); the recommendation is the cheapest pick."""
    for mine, best in zip(advice.policies, brute.policies, strict=True):
        assert mine.pick is not None and best.pick is not None, mine.policy
        pick, top = mine.pick, best.pick
        if max_pls is not None:
            assert pick["pls_model_mean"] <= max_pls
        if max_memory is not None:
            assert pick["memory_frac"] <= max_memory
        slack = top["overhead_frac_ci95_half"] + 1e-12
        assert pick["overhead_frac_mean"] <= top["overhead_frac_mean"] + slack, (
            mine.policy,
            pick,
            top,
        )
        assert len(mine.candidates) < len(best.candidates)  # cheaper than brute force
    cheapest = min(advice.policies, key=lambda p: p.pick["overhead_frac_mean"])
    assert advice.recommendation is cheapest


def test_on_prod50h_the_pick_is_as_good_as_a_brute_force_grid(monkeypatch):
    limits = {"max_pls": 0.05, "reps": 3}
    advice = search.advise(PROD50H, policies=["full", "cpr"], **limits)
    _check(advice, _brute_force(monkeypatch, PROD50H, ["full", "cpr"], **limits), 0.05)
    cpr = advice.policies[1].candidates
    assert {"coarse", "refine 1", "refine 2"} <= set(cpr["stage"])
    assert advice.recommendation.policy == "cpr"


def test_on_random_failures_with_a_memory_limit_the_pick_is_as_good_as_brute_force(
    monkeypatch,
):
    limits = {"max_pls": 0.01, "max_memory_overhead": 0.3, "reps": 4}
    policies = ["ckpt_30min", "ecrm_k2"]
    advice = search.advise(ECRM, policies=policies, **limits)
    brute = _brute_force(monkeypatch, ECRM, policies, **limits)
    _check(advice, brute, 0.01, 0.3)
    ecrm = advice.policies[1]
    assert ecrm.pick["k"] >= 4  # r/k = 1/2 is over the memory limit
    assert ecrm.pick["overhead_frac_ci95_half"] > 0  # exponential failures: a real interval


def test_an_injected_bug_that_ignores_the_pls_limit_fails_the_check(monkeypatch):
    limits = {"max_pls": 0.05, "reps": 2}
    brute = _brute_force(monkeypatch, PROD50H, ["cpr"], **limits)
    monkeypatch.setattr(search, "_meets", lambda row, max_pls, max_memory: row["valid"])
    with pytest.raises(AssertionError):
        _check(search.advise(PROD50H, policies=["cpr"], **limits), brute, 0.05)


def test_a_limit_no_setting_meets_is_said_plainly(tmp_path, capsys):
    out = tmp_path / "advice"
    args = ["advise", str(PROD50H), "--policy", "ecrm", "--reps", "2", "--max-pls", "1e-6"]
    with warnings.catch_warnings():
        assert main([*args, "-o", str(out)]) == 1
    text = capsys.readouterr().out
    assert re.search(r"ecrm    none within the limits: lowest pls_model [0-9.e-]+ > 1e-06", text)
    assert "no policy has a setting within the limits (pls_model <= 1e-06)" in text
    table = pd.read_csv(out / "candidates.csv")
    assert not table["meets_limits"].any() and table["valid"].all()


def test_the_cli_writes_a_tidy_table_and_a_single_column_figure(tmp_path, capsys):
    out = tmp_path / "advice"
    args = ["advise", str(PROD50H), "--policy", "full", "--policy", "cpr_mfu", "--reps", "2"]
    assert main([*args, "--max-pls", "0.05", "--max-memory-overhead", "0.01", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("advise prod50h: timing only (PLS is the time model's pls_model)")
    assert "recommendation: cpr_mfu with interval " in text
    table = pd.read_csv(out / "candidates.csv")
    for column in ("interval_s", "fraction", "overhead_frac_mean", "pls_model_mean", "memory_frac"):
        assert pd.api.types.is_numeric_dtype(table[column].dropna()), column
    assert set(table["policy"]) == {"full", "cpr_mfu"}
    mfu = table[table["policy"] == "cpr_mfu"]
    assert (mfu[mfu["meets_limits"]]["memory_frac"] <= 0.01).all()
    assert (out / "frontier.pdf").stat().st_size > 0
    from matplotlib.image import imread

    assert imread(out / "frontier.png").shape[1] == round(3.33 * 300)


def test_no_two_texts_of_the_frontier_figure_overlap():
    import matplotlib.pyplot as plt

    advice = search.advise(PROD50H, max_pls=0.05, reps=2, rounds=0)
    fig = frontier_figure(advice)
    assert collisions(fig) == []
    assert fig.get_size_inches()[0] == pytest.approx(3.33)
    # injected bugs: a second legend over the first, an x label wider than the figure
    legend = fig.legends[0]
    fig.legend(legend.legend_handles, [t.get_text() for t in legend.get_texts()],
               loc="outside lower center", ncols=3)  # fmt: skip
    assert any(p.startswith("labels overlap: 'ECRM") for p in collisions(fig))
    fig.axes[0].set_xlabel("PLS " * 40)
    assert "label outside the figure: 'PLS PLS PLS" in "\n".join(collisions(fig))
    plt.close(fig)


def _pick_sizes(fig) -> dict[str, float]:
    """Marker size of each pick drawn (its error bar's marker line, not its caps), by marker."""
    return {
        line.get_marker(): line.get_markersize()
        for line in fig.axes[0].get_lines()
        if len(line.get_xdata()) == 1 and line.get_marker() not in (None, "None", "", "_")
    }


def test_picks_that_nearly_coincide_are_drawn_nested(monkeypatch):
    """CPR-MFU's pick hid under CPR-SSU's (0.0455 and 0.0476, 0.35% and 0.40%): the first
    drawn of picks this close is larger, so it shows around the next; a pick far from both
    (full) keeps the usual size, as does every legend entry. With no nesting (an injected
    bug: CLOSE = 0) the two are the same size, and the test says so."""
    import matplotlib.pyplot as plt

    from ftsim.plots import frontier as module

    advice = search.advise(
        PROD50H, policies=["full", "cpr_mfu", "cpr_ssu"], max_pls=0.05, reps=2, rounds=0
    )
    fig = advice.figure()
    sizes = _pick_sizes(fig)
    usual = module.PICK_SIZE
    assert sizes == {"o": usual, "v": usual * (1 + module.NEST), "D": usual}
    assert {h.get_markersize() for h in fig.legends[0].legend_handles[:3]} == {usual}
    assert collisions(fig) == []
    plt.close(fig)
    monkeypatch.setattr(module, "CLOSE", 0.0)
    fig = advice.figure()
    assert _pick_sizes(fig)["v"] == _pick_sizes(fig)["D"]
    plt.close(fig)


def test_the_frontier_legend_names_each_pick_and_what_ran_instead():
    """Picks drawn on top of each other stay readable: the legend names each policy's pick,
    and a CPR pick that fell back to full recovery by the interval it ran, not the one
    asked for."""
    import matplotlib.pyplot as plt

    advice = search.advise(PROD50H, policies=["full", "cpr"], max_pls=1e-6, reps=2, rounds=0)
    picks = advice.picks.set_index("policy")
    assert picks.loc["cpr", "cpr_decision"] == "full"  # only full recovery loses nothing
    fig = advice.figure()
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    ran = picks.loc["cpr", "ran"].removeprefix("full @ ")
    assert legend == [
        f"Full checkpoint: {picks.loc['full', 'setting']}",
        f"CPR: fell back to full recovery every {ran}",
        "PLS limit 1e-06",
    ]
    assert collisions(fig) == []
    plt.close(fig)


def test_the_frontier_says_every_limit_and_opens_candidates_over_the_memory_limit():
    """A pick driven by the memory limit (ECRM's k) was drawn under the PLS limit alone;
    candidates drew as dots, faint black (full) and grey (a composed policy) alike. The
    title names every limit, each policy's candidates take its marker, and those over the
    memory limit are open."""
    import matplotlib.pyplot as plt

    advice = search.advise(
        PROD50H, policies=["full", "ecrm"], max_pls=0.05, max_memory_overhead=0.2, reps=2,
        rounds=0,
    )  # fmt: skip
    fig = advice.figure()
    title = fig.get_suptitle().replace("\n", " ")
    assert "limits: pls_model <= 0.05, memory overhead <= 0.2 of a shard" in title
    ecrm = advice.policies[1].candidates
    over = int((ecrm["valid"] & (ecrm["n"] > 0) & (ecrm["memory_frac"] > 0.2)).sum())
    assert over > 0
    from matplotlib.collections import PathCollection

    drawn = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]  # scatters
    opened = [c for c in drawn if len(c.get_facecolors()) == 0 or c.get_facecolors()[0][3] == 0]
    assert sum(len(c.get_offsets()) for c in opened) == over
    markers = {c.get_paths()[0].vertices.shape for c in drawn}
    assert len(markers) == 2  # full's circles, ECRM's squares
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[-1] == "candidate over the memory limit (0.2)"
    assert collisions(fig) == []
    plt.close(fig)


def test_picks_is_the_table_the_command_line_prints():
    """One row per policy: the printed table's cells come from it (an injected bug in
    either shows as a mismatch), and a policy without a pick says why."""
    advice = search.advise(PROD50H, policies=["full", "ecrm"], max_pls=1e-6, reps=2, rounds=0)
    picks = advice.picks
    assert list(picks["policy"]) == ["full", "ecrm"]
    full, ecrm = picks.iloc[0], picks.iloc[1]
    assert full["recommended"] and full["why_none"] == "" and full["n"] == 2
    assert full["setting"] == advice.policies[0].setting(advice.policies[0].pick)
    assert full["overhead_frac_mean"] == advice.policies[0].pick["overhead_frac_mean"]
    assert ecrm["why_none"].startswith("none within the limits: lowest pls_model")
    assert pd.isna(ecrm["overhead_frac_mean"]) and not ecrm["recommended"]
    text = advice.text().splitlines()
    assert re.split(r"\s{2,}", text[2])[:3] == ["full", full["setting"], "as set"]
    assert f"{100 * full['overhead_frac_mean']:.2f}%" in text[2]
    assert text[3].startswith("ecrm") and ecrm["why_none"] in text[3]


def test_candidates_do_not_depend_on_the_worker_processes():
    limits = {"max_pls": 0.05, "reps": 2, "policies": ["cpr"], "rounds": 1}
    serial = search.advise(PROD50H, **limits).candidates
    parallel = search.advise(PROD50H, jobs=2, **limits).candidates
    pd.testing.assert_frame_equal(serial, parallel)


def _why_none(max_pls, max_memory):
    """The reason given for two candidates: a low-PLS one that takes memory, a lean one that
    loses updates."""
    table = pd.DataFrame(
        {
            "interval_s": [1800.0, 7200.0],
            "valid": True,
            "n_unfinished": 0,
            "pls_model_mean": [0.001, 0.2],
            "memory_frac": [0.5, 0.0],
        }
    )
    policy = search.PolicyAdvice("p", "ecrm", [search.Knob("interval", (1800.0,))], table, None)
    return search._why_none(policy, search.Advice("s", 2, 0, max_pls, max_memory))


def test_the_reason_for_no_pick_names_only_the_limits_missed():
    """A new user read "lowest pls_model 0.0000 > 0.01": the PLS limit was met (by another
    setting than the memory one), and said as missed."""
    assert _why_none(1e-4, None) == (
        "none within the limits: lowest pls_model 0.001 > 0.0001 (at interval 30 min)"
    )
    assert _why_none(0.01, 0.25) == (
        "no setting within both limits: the lowest pls_model, 0.001 (at interval 30 min), "
        "takes memory 0.5; the lowest memory, 0 (at interval 2 h), loses pls_model 0.2"
    )
    assert _why_none(1e-4, -1.0).endswith("; lowest memory 0 > -1")


def test_check_n_run_keeps_its_quantization_and_says_why():
    """Its checkpoints lose no update at any bit width (pls_model 0): searched, the bits went
    to the fewest, whatever their accuracy cost; worse, passed as text ('8'), every
    quantized candidate was refused, so the advice silently dropped the user's 8 bits."""
    advice = search.advise(SCENARIOS / "checknrun.yaml", policies=["cnr_q8"], reps=2)
    [policy] = advice.policies
    assert [knob.field for knob in policy.knobs] == ["interval"]
    assert policy.candidates["valid"].all()
    assert (
        "cnr_q8: quantize_bits 8 kept as set: its accuracy cost is not in pls_model "
        "(measure it with a trained run: logloss_delta)"
    ) in advice.text().splitlines()


def test_knob_values_enter_the_scenario_as_numbers_and_exact_intervals():
    """A choice field (Check-N-Run's bits: 2, 3, 4 or 8) refuses text; an interval printed
    to 6 digits ran a value other than the candidate's recorded one."""
    assert search.Knob("interval", ()).assigned(10384.234567891) == "10384.234567891 s"
    bits = search.Knob("quantize_bits", (), integer=True).assigned(np.int64(8))
    assert bits == 8 and type(bits) is int
    assert search.Knob("fraction", ()).assigned(0.0334371) == 0.0334371
    assert search.Knob("quantize_bits", ()).assigned(None) is None


def test_the_picks_are_written_as_a_scenario_that_runs_them_exactly(tmp_path, capsys):
    """A new user ran the printed setting (interval 2.88 h, fraction 0.0334, rounded) and got
    pls_model 0.0102 for a pick of 0.0099 under a limit of 0.01. picks.yaml holds each pick
    as it ran; run, it gives the candidates' measures; a policy without a pick is left out;
    the candidates' table holds the values exactly."""
    out = tmp_path / "advice"
    args = ["advise", str(PROD50H), "--reps", "2", "--max-pls", "0.05"]
    args += ["--policy", "full", "--policy", "cpr_mfu", "--policy", "ecrm"]
    args += ["--max-memory-overhead", "0.05"]  # ECRM's parity, r/k >= 1/17 on 18 PS: no pick
    assert main([*args, "-o", str(out)]) == 0
    assert f"the picks as a scenario: {out / 'picks.yaml'}" in capsys.readouterr().out
    ran = tmp_path / "ran"
    assert main(["run", str(out / "picks.yaml"), "--no-trainer", "-q", "-o", str(ran)]) == 0
    summary = pd.read_csv(ran / "summary.csv").set_index("policy")
    assert list(summary.index) == ["full", "cpr_mfu"]
    table = pd.read_csv(out / "candidates.csv")
    for policy, mine in summary.iterrows():
        pick = table[(table["policy"] == policy) & table["meets_limits"]]
        pick = pick.sort_values("overhead_frac_mean").iloc[0]
        assert mine["overhead_frac_mean"] == pytest.approx(pick["overhead_frac_mean"], rel=1e-9)
        assert mine["interval_h_mean"] * 3600 == pytest.approx(pick["interval_s"], rel=1e-11)
    assert not table["interval_s"].round(6).equals(table["interval_s"])  # not cut to 6 digits


def test_advice_without_limits_says_it_picks_the_cheapest_whatever_its_pls(tmp_path, capsys):
    """It printed "limits: none" and picked CPR's longest interval (pls_model 0.12) with no
    word that a limit was what the user had left out (a new user's study)."""
    smoke = str(SCENARIOS / "smoke.yaml")
    assert main(["advise", smoke, "--reps", "2", "-o", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert "no limits: each policy's cheapest setting, whatever its PLS and memory " in out
    assert main(["advise", smoke, "--reps", "2", "--max-pls", "0.1",
                 "-o", str(tmp_path / "pls")]) == 0  # fmt: skip
    assert "no limits" not in capsys.readouterr().out


# -- the recommendation against the next cheapest pick (paired on the same failures) --------


def _advice_of(**overheads_by_policy) -> search.Advice:
    """An advice whose policies' picks have the given overheads per replication (a list:
    replications 0, 1, ...; None: unfinished), the pick's mean from them."""
    advice = search.Advice("s", 3, 0, None, None)
    for name, values in overheads_by_policy.items():
        finished = {rep: v for rep, v in enumerate(values) if v is not None}
        mean = sum(finished.values()) / len(finished)
        pick = pd.Series(
            {"interval_s": 3600.0, "overhead_frac_mean": mean,
             "overhead_frac_ci95_half": 0.0 if len(finished) > 1 else float("nan"),
             "n": len(finished), "pls_model_mean": 0.0, "memory_frac": 0.0,
             "interval_h": 1.0, "cpr_decision": "", "valid": True}
        )  # fmt: skip
        knob = [search.Knob("interval", (3600.0,))]
        policy = search.PolicyAdvice(name, "full", knob, pd.DataFrame([pick]), pick, "", finished)
        advice.policies.append(policy)
    return advice


def test_the_difference_from_the_recommendation_is_a_paired_t_interval():
    """Closed form: differences 0.01, 0.02, 0.03 have mean 0.02, std 0.01 and, with
    t(0.975, 2) = 4.302653, a half-width of 4.302653 * 0.01 / sqrt(3) = 0.0248414."""
    advice = _advice_of(a=[0.10, 0.20, 0.30], b=[0.11, 0.22, 0.33])
    assert advice.recommendation.policy == "a" and advice.runner_up.policy == "b"
    d = advice.versus_recommended(advice.runner_up)
    assert d["n"] == 3 and d["mean"] == pytest.approx(0.02, abs=1e-15)
    assert (d["high"] - d["low"]) / 2 == pytest.approx(4.302653 * 0.01 / 3**0.5, rel=1e-6)
    picks = advice.picks.set_index("policy")
    assert picks.loc["b", "overhead_frac_diff_vs_recommended"] == pytest.approx(0.02, abs=1e-15)
    assert picks.loc["b", "n_paired"] == 3
    assert pd.isna(picks.loc["a", "overhead_frac_diff_vs_recommended"])  # the recommendation


def test_pairing_by_replication_tells_apart_what_the_policies_own_intervals_do_not():
    """b costs 0.001 more than a on every replication, whose overheads vary tenfold: the
    paired difference is told apart, although each policy's own interval is wide. Paired
    in any other order (an injected bug: sorted values), the difference is not."""
    a = [0.10, 0.02, 0.05, 0.08]
    advice = _advice_of(a=a, b=[v + 0.001 for v in a])
    line = advice.text().splitlines()[-1]
    assert line == "next: b, +0.10% ± 0.00% overhead (paired 95% CI, n = 4): told apart"
    mispaired = _advice_of(a=a, b=[v + 0.001 for v in sorted(a)])
    assert mispaired.text().splitlines()[-1].startswith("a tie with b: ")


def test_a_difference_whose_interval_holds_zero_is_said_to_be_a_tie():
    """Differences 0.02, -0.01, 0.005: mean 0.005, std 0.015, half-width 4.302653 * 0.015 /
    sqrt(3) = 0.0373 (the option is named as the API names it: ``reps``)."""
    advice = _advice_of(a=[0.10, 0.20, 0.30], b=[0.12, 0.19, 0.305])
    assert advice.text().splitlines()[-1] == (
        "a tie with b: +0.50% ± 3.73% overhead (paired 95% CI, n = 3) holds 0; more "
        "replications (reps) may tell a and b apart"
    )


def test_only_replications_both_finished_are_paired():
    advice = _advice_of(a=[0.10, 0.20, None], b=[0.11, 0.22, 0.5])
    d = advice.versus_recommended(advice.policies[1])
    assert d["n"] == 2 and d["mean"] == pytest.approx(0.015, abs=1e-15)
    one = _advice_of(a=[0.10, None], b=[None, 0.5])
    assert one.text().splitlines()[-1] == (
        "a and b cannot be told apart on 0 replications run by both: give more (reps)"
    )


def test_a_search_keeps_each_picks_overheads_by_replication():
    """The overheads the picks are paired on are the pick's own runs: their mean is the
    pick's overhead_frac_mean, one per replication."""
    advice = search.advise(PROD50H, policies=["full", "cpr"], max_pls=0.05, reps=3, rounds=0)
    for policy in advice.policies:
        assert sorted(policy.overheads) == [0, 1, 2]
        mean = sum(policy.overheads.values()) / 3
        assert mean == pytest.approx(policy.pick["overhead_frac_mean"], rel=1e-12)
    assert "overhead_by_rep" not in advice.candidates.columns
    last = advice.text().splitlines()[-1]
    assert last.startswith("next: full, +") and last.endswith(" over the 50 h of training")
    hours = float(last.split("told apart, ")[1].split(" h over")[0])
    assert hours == pytest.approx(50 * advice.versus_recommended(advice.runner_up)["mean"], 0.01)


def test_picks_identical_on_every_replication_are_said_to_be_so():
    """Two policies at the same setting on the same failures were "a tie ... more
    replications may tell them apart": no number of replications will."""
    advice = _advice_of(a=[0.10, 0.20, 0.30], b=[0.10, 0.20, 0.30])
    assert advice.text().splitlines()[-1] == (
        "b's pick costs the same as a's on every one of the 3 replications (the same "
        "schedule of saves and failures)"
    )


def test_one_replication_gives_no_interval():
    advice = _advice_of(a=[0.10], b=[0.20])
    text = advice.text()
    assert "nan%" not in text and "overhead 10.00% (n = 1: no interval)" in text
    assert "- (1)" in text.splitlines()[2]


def test_a_pick_at_the_edge_of_the_search_is_said():
    """A new user's advice picked full_daly at 3.47 min, the smallest interval tried,
    without a word, where the scenario's own Daly interval (1.43 min) was cheaper: the
    search stopped at its edge. Said, and in the picks table; a knob at its bound (SWIFT's
    log_budget 1) or a fixed choice is not."""
    advice = search.advise(SCENARIOS / "smoke.yaml", policies=["full_daly"], reps=4)
    [policy] = advice.policies
    tried = policy.candidates["interval_s"]
    assert policy.pick["interval_s"] == tried.min()
    [edge] = policy.edges()
    assert edge == f"interval {short_duration(tried.min())}, the smallest tried"
    assert advice.picks.loc[0, "at_edge"] == edge
    assert f"full_daly: its pick's {edge}: the search stopped at its edge" in advice.text()
    swift = search.advise(PROD50H, policies=["swift"], reps=2, rounds=1).policies[0]
    assert all("log_budget" not in e for e in swift.edges())


def test_a_half_width_under_a_ten_thousandth_percent_is_not_shown_as_zero():
    """b costs 1.2e-6 more than a, give or take 4.302653 * 2e-7 / sqrt(3) = 4.97e-7
    (differences 1e-6, 1.2e-6, 1.4e-6): shown to four decimals it read ``± 0.0000%``, as if
    every replication agreed."""
    advice = _advice_of(a=[0.10, 0.20, 0.30], b=[0.100001, 0.2000012, 0.3000014])
    last = advice.text().splitlines()[-1]
    assert last.startswith("next: b, +0.000120% ± 0.000050% overhead (paired 95% CI, n = 3)")


def test_a_limit_beyond_the_grid_is_approached_not_declared_unmet():
    """ECRM's k was tried at 2, 4 and 8 only: a memory limit of 10% of a shard (k >= 10 with
    r = 1) got "none within the limits", though k = 10 to 17 fit prod50h's 18 PS. With no
    setting of the grid within the limits, the search steps beyond it toward them; k + r
    above the PS is refused and not reported as an edge of the search."""
    advice = search.advise(PROD50H, policies=["ecrm"], max_memory_overhead=0.1, reps=2)
    [ecrm] = advice.policies
    assert ecrm.pick is not None and ecrm.pick["k"] >= 10 and ecrm.pick["memory_frac"] <= 0.1
    stages = set(ecrm.candidates["stage"])
    assert "toward the limits 1" in stages
    assert not ecrm.candidates.loc[ecrm.candidates["k"] > 17, "valid"].any()
    assert ecrm.edges() == []


def test_a_pls_limit_below_the_grids_shortest_interval_is_approached():
    """Check-N-Run under partial recovery on prod50h loses PLS 0.0019 at the grid's shortest
    interval, 10 min: a limit of 0.001 needs a shorter one, which the search now finds
    below the grid (it said "none within the limits")."""
    cnr = "policies=[{kind: checknrun, recovery: partial, interval: 30 min}]"
    advice = search.advise(PROD50H, [cnr], max_pls=0.001, reps=2)
    [policy] = advice.policies
    assert policy.pick is not None and policy.pick["pls_model_mean"] <= 0.001
    assert policy.pick["interval_s"] < 600
    coarse = policy.candidates[policy.candidates["stage"] == "coarse"]
    assert not coarse["meets_limits"].any()


def test_invalid_settings_are_said_located_at_the_policys_field_and_not_counted_as_tried():
    """ECRM at k = 8 on 8 PS is refused: it was skipped without a word, its problem named
    ``policies.0.k`` (the candidate's one policy, not the scenario's ECRM) and ``tried``
    counted it, though the docs define it as the candidates simulated."""
    advice = search.advise(
        SCENARIOS / "prod50h.yaml", ["cluster.emb_ps=8"], policies=["ecrm"],
        max_memory_overhead=0.2, reps=2,
    )  # fmt: skip
    [ecrm] = advice.policies
    invalid = ecrm.candidates[~ecrm.candidates["valid"]]
    assert len(invalid) > 0 and (invalid["k"] + 1 > 8).all()
    assert invalid["problem"].str.startswith("k: need k + r <= n_shards (8)").all()
    assert advice.picks.loc[0, "tried"] == ecrm.candidates["valid"].sum()
    said = f"ecrm: {len(invalid)} settings skipped as invalid (interval 10 min, k 8, refused at k:"
    assert said in advice.text()


def test_a_fraction_without_partial_saves_is_said_in_the_pick():
    """With partial_interval beyond every interval tried, CPR-MFU makes no partial save:
    its fraction changes nothing, yet the pick named one as if it mattered."""
    longer = "policies.2.partial_interval=60 h"
    advice = search.advise(PROD50H, [longer], policies=["cpr_mfu"], max_pls=0.05, reps=2)
    [mfu] = advice.policies
    assert (mfu.candidates["n_partial_saves"] == 0).all()
    assert advice.picks.loc[0, "setting"].endswith("(no partial save: fraction has no effect)")


def test_a_pls_limit_of_zero_asks_for_lossless_settings():
    """--max-pls 0 was refused ("must be a number between 0 and 1 (got 0.0)"): it asks for
    settings that lose no update. ECRM's fall-backs always lose some: its nearest setting is
    its smallest PLS, at the shortest interval the search reached (not its cheapest)."""
    advice = search.advise(PROD50H, policies=["full", "ecrm"], max_pls=0, reps=2)
    assert advice.recommendation.policy == "full"
    ecrm = advice.picks.set_index("policy").loc["ecrm", "why_none"]
    assert re.match(
        r"none within the limits: lowest pls_model [0-9.e-]+ > 0 \(at interval 1.92", ecrm
    )


def test_two_limits_that_pull_two_knobs_are_met_together():
    """ECRM under a PLS limit (a shorter interval) and a memory limit (a larger k) on
    composed.yaml got "no setting within both limits": the approach moved one knob at a
    time around the nearest setting, and each move alone breaks the other limit."""
    limits = {"max_pls": 0.01, "max_memory_overhead": 0.1, "reps": 2}
    advice = search.advise(SCENARIOS / "composed.yaml", policies=["ecrm"], **limits)
    [ecrm] = advice.policies
    assert ecrm.pick is not None
    assert ecrm.pick["pls_model_mean"] <= 0.01 and ecrm.pick["memory_frac"] <= 0.1


def test_a_fall_back_is_not_said_to_be_a_fraction_without_effect():
    """Under --max-pls 0 CPR-MFU falls back to full recovery: no partial save is made, but
    because it fell back, which its 'ran' cell says; the pick said its fraction had no
    effect as if the partial interval were the reason."""
    advice = search.advise(PROD50H, policies=["cpr_mfu"], max_pls=0, reps=2, rounds=0)
    pick = advice.picks.iloc[0]
    assert pick["ran"].startswith("full @") and "no partial save" not in pick["setting"]


def test_a_policy_without_a_valid_setting_is_said_and_drawn_without_it(monkeypatch):
    """A policy's own knob whose every value it refuses (a new policy's author searched a
    duration as a bare number): the text said so, then the frontier figure failed with
    KeyError 'overhead_frac_mean' (the policy's candidates have no measures)."""
    import matplotlib.pyplot as plt

    from ftsim.policies import swift
    from ftsim.policies.knobs import Knob

    monkeypatch.setattr(swift.SwiftParams, "search", (Knob("log_budget", (2.0, 3.0), "linear"),))
    advice = search.advise(PROD50H, policies=["full", "swift"], max_pls=0.05, reps=2, rounds=0)
    assert "swift   no valid setting: log_budget:" in advice.text()
    fig = advice.figure()
    assert collisions(fig) == []
    plt.close(fig)


def test_a_duration_knob_is_written_with_its_unit():
    """A policy's own duration knob (``seconds=True``) is assigned as seconds with the unit,
    shown as a duration and tabled as ``<field>_s``, as the checkpoint interval is."""
    from ftsim.policies.knobs import Knob

    knob = Knob("local_interval", (60.0, 300.0), "geometric", seconds=True)
    assert knob.assigned(300) == "300.0 s" and knob.column == "local_interval_s"
    assert knob.show(300.0) == "local_interval 5 min"
    plain = Knob("fraction", (0.01,), "geometric")
    assert plain.assigned(0.01) == 0.01 and plain.column == "fraction"


def test_a_rule_between_a_candidates_fields_is_not_located_at_another_policy():
    """The searched policy is the candidate scenario's only one: a rule between its fields
    (located at ``policies.0``, no field) was said as "refused at policies.0", though the
    policy is the file's second."""
    from pathlib import Path

    from ftsim.scenario.loader import ScenarioError

    rule = ScenarioError(Path("s.yaml"), [("policies.0", "local_interval must be shorter")])
    field = ScenarioError(Path("s.yaml"), [("policies.0.k", "too large")])
    assert search._problem(rule) == "local_interval must be shorter"
    assert search._problem(field) == "k: too large"
