"""Running a scenario: every selected policy × replication on the same failure draws.

A replication's policies are simulated together: when the replication trains the embedded
model they share one failure-free trainer (:mod:`ftsim.cosim.replay`). Replications are
independent (common random numbers: replication *i* is fully determined by the seed and
*i*), so they can run in any order and in any process: :func:`run_scenario` spreads them
over a process pool and returns rows identical to a serial run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from concurrent.futures import as_completed
from contextlib import nullcontext

from ftsim.experiments.pool import process_pool
from ftsim.experiments.tdist import mean_ci
from ftsim.scenario.schema import Scenario
from ftsim.sim.accounting import CATEGORIES, OTHER_NOTE
from ftsim.sim.engine import simulate

ACCURACY = ("logloss_delta", "auc_delta", "pls_measured")
"""Columns measured on the trained model: their intervals are over the trained replications."""


def simulate_replication(scenario: Scenario, policy_indices: list[int], rep: int) -> list:
    """Simulations of one replication for these policies, with the model columns when the
    replication trains the embedded model (the policies share one failure-free trainer)."""
    sims = [simulate(scenario, index, rep) for index in policy_indices]
    rows = [sim.row() for sim in sims]
    if scenario.trains_model(rep):
        train(scenario, sims, rows)
    return list(zip(sims, rows, strict=True))


def train(scenario: Scenario, sims: list, rows: list[dict]) -> None:
    """Co-simulate one replication's policies (``sims``) on the embedded model and add the
    model columns (:func:`ftsim.cosim.replay.cosimulate`) to their ``rows``."""
    from ftsim.cosim.replay import cosimulate

    for row, model in zip(rows, cosimulate(scenario, sims), strict=True):
        row.update(model)


def simulate_reps(
    scenario: Scenario,
    policy_indices: list[int],
    reps: Iterable[int],
    timeline_rep: int | None = None,
) -> tuple[list[list[dict]], list[list[dict]]]:
    """Per policy (in the order of ``policy_indices``): its rows of ``reps``, and its
    timeline of replication ``timeline_rep`` (empty if not among ``reps``)."""
    rows: list[list[dict]] = [[] for _ in policy_indices]
    timelines: list[list[dict]] = [[] for _ in policy_indices]
    for rep in reps:
        for mine, timeline, (sim, row) in zip(
            rows, timelines, simulate_replication(scenario, policy_indices, rep), strict=True
        ):
            mine.append(row)
            if rep == timeline_rep:
                timeline += sim.timeline_rows()
    return rows, timelines


def trained_replications(scenario: Scenario) -> list[int]:
    """The replications of a run that also train the embedded model."""
    return [rep for rep in range(scenario.run.replications) if scenario.trains_model(rep)]


def run_scenario(
    scenario: Scenario,
    policy_indices: list[int],
    progress: Callable[[str, int], None] | None = None,
    jobs: int = 1,
) -> tuple[list[dict], list[dict]]:
    """All rows (policy-major) and replication 0's timeline of every selected policy.

    Two stages, reported as ``progress(stage, steps)``: ``timing`` simulates every policy ×
    replication (a step per simulation), then ``co-simulation`` trains the embedded model
    for the trained replications (a step per replication; its policies share one trainer).

    With ``jobs`` > 1 and more than one trained replication, those replications are
    co-simulated in a pool of up to ``jobs`` processes (each re-simulates its replication's
    policies, which common random numbers make identical, and trains them), started before
    the timing stage so that both overlap; the rows do not depend on ``jobs``.
    """
    report = progress or (lambda stage, steps: None)
    rows: dict[int, list[dict]] = {index: [] for index in policy_indices}
    timeline: list[dict] = []
    trained = trained_replications(scenario)
    workers = min(jobs, len(trained)) if len(trained) > 1 else 1
    with process_pool(workers) if workers > 1 else nullcontext() as pool:
        futures = {}
        if pool is not None:
            futures = {
                pool.submit(_cosimulate, scenario, policy_indices, rep): rep for rep in trained
            }
        to_train: dict[int, list] = {}
        for rep in range(scenario.run.replications):
            sims = [simulate(scenario, index, rep) for index in policy_indices]
            for index, sim in zip(policy_indices, sims, strict=True):
                rows[index].append(sim.row())
            if rep == 0:
                timeline = [event for sim in sims for event in sim.timeline_rows()]
            if pool is None and scenario.trains_model(rep):
                to_train[rep] = sims
            report("timing", len(sims))
        for rep, sims in to_train.items():
            train(scenario, sims, [rows[index][rep] for index in policy_indices])
            report("co-simulation", 1)
        for future in as_completed(futures):
            rep = futures[future]
            for index, model in zip(policy_indices, future.result(), strict=True):
                rows[index][rep].update(model)
            report("co-simulation", 1)
    return [row for index in policy_indices for row in rows[index]], timeline


def _cosimulate(scenario: Scenario, policy_indices: list[int], rep: int) -> list[dict]:
    """The model columns of replication ``rep``'s policies (a pool task)."""
    from ftsim.cosim.replay import cosimulate

    return cosimulate(scenario, [simulate(scenario, index, rep) for index in policy_indices])


def finished(row: dict) -> bool:
    """Whether a replication finished training before ``run.max_wall_factor`` × the
    failure-free time (an unfinished one has no overhead: its ``overhead_frac`` is inf)."""
    return bool(row.get("completed", True))


def summarize(rows: list[dict]) -> list[dict]:
    """Per policy: mean overhead and mean ``ettr`` (ideal / wall) with their 95% t-intervals
    and mean breakdown in hours, over the ``n`` finished replications (``n_unfinished``
    counts the others, whose overhead is undefined; with none finished the statistics are
    NaN); the time model's mean
    ``pls_model`` where the policy estimates it; and for the ``n_trained`` finished
    replications that trained the model, the mean and 95% t-interval of each accuracy column
    (:data:`ACCURACY`)."""
    out = []
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy and finished(r)]
        unfinished = sum(1 for r in rows if r["policy"] == policy) - len(mine)
        mean, half, n = mean_ci([r["overhead_frac"] for r in mine])
        summary = {"policy": policy, "n": n, "n_unfinished": unfinished}
        summary.update(overhead_mean=mean, overhead_ci95=half)
        mean, half, _ = mean_ci([r["ettr"] for r in mine])
        summary.update(ettr_mean=mean, ettr_ci95=half)
        for column in [f"{c}_h" for c in CATEGORIES] + ["wall_h", "n_failures"]:
            summary[column] = _mean([r[column] for r in mine])
        if mine and all("pls_model" in r for r in mine):
            summary["pls_model_mean"] = _mean([r["pls_model"] for r in mine])
        trained = [r for r in mine if "logloss_delta" in r]
        if trained:
            summary["n_trained"] = len(trained)
            for column in ACCURACY:
                mean, half, _ = mean_ci([r[column] for r in trained])
                summary[f"{column}_mean"] = mean
                summary[f"{column}_ci95"] = half
        out.append(summary)
    return out


def unfinished_warnings(summary: Iterable[dict], point_columns: Iterable[str] = ()) -> list[str]:
    """One line per policy (and sweep point) with unfinished replications, saying what its
    statistics cover; ``summary`` rows have ``policy``, ``n``, ``n_unfinished`` and the
    ``point_columns``."""
    lines = []
    for s in summary:
        if not s["n_unfinished"]:
            continue
        where = ", ".join(f"{c}={s[c]}" for c in point_columns)
        lines.append(
            f"warning: {s['policy']}{f' at {where}' if where else ''}: {s['n_unfinished']} of "
            f"{s['n'] + s['n_unfinished']} replications did not finish within "
            f"run.max_wall_factor × the failure-free time; statistics are over the {s['n']} "
            "that finished"
        )
    return lines


def format_summary(summary: list[dict]) -> str:
    """The summary as a fixed-width text table for the terminal: hours per category, the
    time model's PLS, an ``unfinished`` column when some replications did not finish, and a
    note on what ``other`` is when some policy has any. Each interval's header names its
    sample: ``n`` replications for the time model, ``n_trained`` for accuracy."""
    header = [
        "policy", "overhead", "±CI95(n)", "n", *[f"{c}_h" for c in CATEGORIES], "failures",
        "pls_model",
    ]  # fmt: skip
    lines = [header]
    for s in summary:
        lines.append(
            [
                s["policy"],
                "unfinished" if s["n"] == 0 else f"{100 * s['overhead_mean']:.2f}%",
                _ci(100 * s["overhead_ci95"], "{:.2f}%"),
                str(s["n"]),
                *[_ci(s[f"{c}_h"], "{:.3f}") for c in CATEGORIES],
                _ci(s["n_failures"], "{:.1f}"),
                _ci(s.get("pls_model_mean", math.nan), "{:.4f}"),
            ]
        )
    if any(s["n_unfinished"] for s in summary):
        header.append("unfinished")
        for line, s in zip(lines[1:], summary, strict=True):
            line.append(str(s["n_unfinished"]))
    if any("n_trained" in s for s in summary):
        header += ["logloss_delta", "±CI95(n_trained)", "pls_measured", "n_trained"]
        for line, s in zip(lines[1:], summary, strict=True):
            line += _trained_cells(s)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    table = "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )
    return f"{table}\n{OTHER_NOTE}" if any(s["other_h"] > 0 for s in summary) else table


def _trained_cells(s: dict) -> list[str]:
    """Log-loss delta ± CI, measured PLS and n of the trained replications ('-' if none
    finished)."""
    if "n_trained" not in s:
        return ["-"] * 4
    return [
        f"{s['logloss_delta_mean']:+.2e}",
        _ci(s["logloss_delta_ci95"], "{:.1e}"),
        f"{s['pls_measured_mean']:.4f}",
        str(s["n_trained"]),
    ]


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def _ci(value: float, form: str) -> str:
    """``value`` formatted, or '-' when it is NaN (no interval from fewer than 2 values)."""
    return "-" if value != value else form.format(value)
