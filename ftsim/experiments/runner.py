"""Running a scenario: every selected policy × replication on the same failure draws."""

from __future__ import annotations

from collections.abc import Iterable

from ftsim.experiments.tdist import mean_ci
from ftsim.scenario.schema import Scenario
from ftsim.sim.accounting import CATEGORIES
from ftsim.sim.engine import simulate


def simulate_replication(scenario: Scenario, policy_indices: list[int], rep: int) -> list:
    """Simulations of one replication for these policies, with the model columns when the
    replication trains the embedded model (the policies share one failure-free trainer)."""
    sims = [simulate(scenario, index, rep) for index in policy_indices]
    rows = [sim.row() for sim in sims]
    if scenario.trains_model(rep):
        from ftsim.cosim.replay import cosimulate

        for row, model in zip(rows, cosimulate(scenario, sims), strict=True):
            row["pls_time_model"] = row.pop("pls", 0.0)
            row.update(model)
    return list(zip(sims, rows, strict=True))


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


def run_scenario(
    scenario: Scenario, policy_indices: list[int], progress=None
) -> tuple[list[dict], list[dict]]:
    """All rows (policy-major) and replication 0's timeline of every selected policy.

    Replications are the outer loop so that a replication's policies share one trainer.
    """
    by_policy: dict[int, list[dict]] = {index: [] for index in policy_indices}
    timeline: dict[int, list[dict]] = {}
    for rep in range(scenario.run.replications):
        for index, (sim, row) in zip(
            policy_indices, simulate_replication(scenario, policy_indices, rep), strict=True
        ):
            by_policy[index].append(row)
            if rep == 0:
                timeline[index] = sim.timeline_rows()
        if progress is not None:
            progress(len(policy_indices))
    rows = [row for index in policy_indices for row in by_policy[index]]
    return rows, [event for index in policy_indices for event in timeline.get(index, [])]


def summarize(rows: list[dict]) -> list[dict]:
    """Per policy: mean overhead with its 95% t-interval, and mean breakdown in hours."""
    out = []
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]
        mean, half, n = mean_ci([r["overhead_frac"] for r in mine])
        summary = {"policy": policy, "n": n, "overhead_mean": mean, "overhead_ci95": half}
        for category in CATEGORIES:
            summary[f"{category}_h"] = sum(r[f"{category}_h"] for r in mine) / n
        summary["wall_h"] = sum(r["wall_h"] for r in mine) / n
        summary["n_failures"] = sum(r["n_failures"] for r in mine) / n
        trained = [r for r in mine if "logloss_delta" in r]
        if trained:
            for column in ("logloss_delta", "auc_delta", "pls"):
                mean, half, count = mean_ci([r[column] for r in trained])
                summary[f"{column}_mean"] = mean
                summary[f"{column}_ci95"] = half
            summary["n_trained"] = count
        out.append(summary)
    return out


def format_summary(summary: list[dict]) -> str:
    """The summary as a fixed-width text table for the terminal."""
    header = ["policy", "overhead", "±95% CI", "n", *[f"{c}_h" for c in CATEGORIES], "failures"]
    lines = [header]
    for s in summary:
        lines.append(
            [
                s["policy"],
                f"{100 * s['overhead_mean']:.2f}%",
                _ci(100 * s["overhead_ci95"], "{:.2f}%"),
                str(s["n"]),
                *[f"{s[f'{c}_h']:.3f}" for c in CATEGORIES],
                f"{s['n_failures']:.1f}",
            ]
        )
    if any("n_trained" in s for s in summary):
        header += ["logloss_delta", "±95% CI", "pls", "n_trained"]
        for line, s in zip(lines[1:], summary, strict=True):
            line += [
                f"{s['logloss_delta_mean']:+.2e}",
                _ci(s["logloss_delta_ci95"], "{:.1e}"),
                f"{s['pls_mean']:.4f}",
                str(s["n_trained"]),
            ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def _ci(half_width: float, form: str) -> str:
    return "-" if half_width != half_width else form.format(half_width)
