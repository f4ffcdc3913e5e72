"""Running a scenario: every selected policy × replication on the same failure draws."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ftsim.experiments.tdist import mean_ci
from ftsim.scenario.schema import Scenario
from ftsim.sim.accounting import CATEGORIES, OTHER_NOTE
from ftsim.sim.engine import simulate


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
    model columns to their ``rows``; the time model's own PLS becomes ``pls_time_model``."""
    from ftsim.cosim.replay import cosimulate

    for row, model in zip(rows, cosimulate(scenario, sims), strict=True):
        row["pls_time_model"] = row.pop("pls", 0.0)
        row.update(model)


def simulate_rows(
    scenario: Scenario, policy_index: int, reps: Iterable[int], timeline_rep: int | None = None
) -> tuple[list[dict], list[dict]]:
    """Result rows of ``reps`` for one policy, and the timeline of replication ``timeline_rep``."""
    rows, timeline = [], []
    for rep in reps:
        [(sim, row)] = simulate_replication(scenario, [policy_index], rep)
        rows.append(row)
        if rep == timeline_rep:
            timeline = sim.timeline_rows()
    return rows, timeline


def trained_replications(scenario: Scenario) -> list[int]:
    """The replications of a run that also train the embedded model."""
    return [rep for rep in range(scenario.run.replications) if scenario.trains_model(rep)]


def run_scenario(
    scenario: Scenario, policy_indices: list[int], progress=None
) -> tuple[list[dict], list[dict]]:
    """All rows (policy-major) and replication 0's timeline of every selected policy.

    Two stages, reported as ``progress(stage, steps)``: ``timing`` simulates every policy ×
    replication (a step per simulation), then ``co-simulation`` trains the embedded model
    for the trained replications (a step per replication; its policies share one trainer).
    """
    report = progress or (lambda stage, steps: None)
    rows: dict[int, list[dict]] = {index: [] for index in policy_indices}
    timeline: list[dict] = []
    to_train: dict[int, list] = {}
    for rep in range(scenario.run.replications):
        sims = [simulate(scenario, index, rep) for index in policy_indices]
        for index, sim in zip(policy_indices, sims, strict=True):
            rows[index].append(sim.row())
        if rep == 0:
            timeline = [event for sim in sims for event in sim.timeline_rows()]
        if scenario.trains_model(rep):
            to_train[rep] = sims
        report("timing", len(sims))
    for rep, sims in to_train.items():
        train(scenario, sims, [rows[index][rep] for index in policy_indices])
        report("co-simulation", 1)
    return [row for index in policy_indices for row in rows[index]], timeline


def finished(row: dict) -> bool:
    """Whether a replication finished training before ``run.max_wall_factor`` × the
    failure-free time (an unfinished one has no overhead: its ``overhead_frac`` is inf)."""
    return bool(row.get("completed", True))


def summarize(rows: list[dict]) -> list[dict]:
    """Per policy: mean overhead with its 95% t-interval and mean breakdown in hours, over
    the ``n`` finished replications; ``n_unfinished`` counts the others (whose overhead is
    undefined). With none finished the statistics are NaN."""
    out = []
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy and finished(r)]
        unfinished = sum(1 for r in rows if r["policy"] == policy) - len(mine)
        mean, half, n = mean_ci([r["overhead_frac"] for r in mine])
        summary = {"policy": policy, "n": n, "n_unfinished": unfinished}
        summary.update(overhead_mean=mean, overhead_ci95=half)
        for column in [f"{c}_h" for c in CATEGORIES] + ["wall_h", "n_failures"]:
            summary[column] = _mean([r[column] for r in mine])
        trained = [r for r in mine if "logloss_delta" in r]
        if trained:
            for column in ("logloss_delta", "auc_delta", "pls"):
                mean, half, count = mean_ci([r[column] for r in trained])
                summary[f"{column}_mean"] = mean
                summary[f"{column}_ci95"] = half
            summary["n_trained"] = count
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
    """The summary as a fixed-width text table for the terminal: hours per category, an
    ``unfinished`` column when some replications did not finish, and a note on what
    ``other`` is when some policy has any."""
    header = ["policy", "overhead", "±95% CI", "n", *[f"{c}_h" for c in CATEGORIES], "failures"]
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
            ]
        )
    if any(s["n_unfinished"] for s in summary):
        header.append("unfinished")
        for line, s in zip(lines[1:], summary, strict=True):
            line.append(str(s["n_unfinished"]))
    if any("n_trained" in s for s in summary):
        header += ["logloss_delta", "±95% CI", "pls", "n_trained"]
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
    """Log-loss delta ± CI, PLS and n of the trained replications ('-' if none finished)."""
    if "n_trained" not in s:
        return ["-"] * 4
    return [
        f"{s['logloss_delta_mean']:+.2e}",
        _ci(s["logloss_delta_ci95"], "{:.1e}"),
        f"{s['pls_mean']:.4f}",
        str(s["n_trained"]),
    ]


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def _ci(value: float, form: str) -> str:
    """``value`` formatted, or '-' when it is NaN (no interval from fewer than 2 values)."""
    return "-" if value != value else form.format(value)
