"""Running a scenario: every selected policy × replication on the same failure draws.

A replication's policies are simulated together: when the replication trains the embedded
model they share one failure-free trainer (:mod:`ftsim.cosim.replay`). Replications are
independent (common random numbers: replication *i* is fully determined by the seed and
*i*), so they can run in any order and in any process: :func:`run_scenario` spreads them
over a process pool and returns rows identical to a serial run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable

from ftsim.experiments.tdist import mean_ci
from ftsim.scenario.schema import Scenario
from ftsim.sim.accounting import CATEGORIES
from ftsim.sim.engine import simulate

ACCURACY = ("logloss_delta", "auc_delta", "pls_measured")
"""Columns measured on the trained model: their intervals are over the trained replications."""


def simulate_replication(scenario: Scenario, policy_indices: list[int], rep: int) -> list:
    """Simulations of one replication for these policies, with the model columns when the
    replication trains the embedded model (the policies share one failure-free trainer)."""
    sims = [simulate(scenario, index, rep) for index in policy_indices]
    rows = [sim.row() for sim in sims]
    if scenario.trains_model(rep):
        from ftsim.cosim.replay import cosimulate

        for row, model in zip(rows, cosimulate(scenario, sims), strict=True):
            row.update(model)
    return list(zip(sims, rows, strict=True))


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


def run_scenario(
    scenario: Scenario,
    policy_indices: list[int],
    progress: Callable[[int], None] | None = None,
    jobs: int = 1,
) -> tuple[list[dict], list[dict]]:
    """All rows (policy-major) and replication 0's timeline of every selected policy.

    With ``jobs`` > 1 the replications run in a pool of that many processes: each trained
    replication is a task of its own (all its policies share its trainer), the timing-only
    ones go in a few larger tasks. The rows do not depend on ``jobs``.
    """
    chunks = _chunks(scenario, jobs)
    parts: dict[int, tuple[list[list[dict]], list[list[dict]]]] = {}
    for reps, part in _run_chunks(scenario, policy_indices, chunks, jobs):
        parts[reps.start] = part
        if progress is not None:
            progress(len(policy_indices) * len(reps))
    ordered = [parts[reps.start] for reps in sorted(chunks, key=lambda r: r.start)]
    rows = [row for i in range(len(policy_indices)) for part in ordered for row in part[0][i]]
    timeline = [event for i in range(len(policy_indices)) for p in ordered for event in p[1][i]]
    return rows, timeline


def default_jobs() -> int:
    """CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _chunks(scenario: Scenario, jobs: int) -> list[range]:
    """Replication ranges, one task each: trained replications alone (the expensive ones,
    first), the others in about four tasks per worker (a timing-only replication takes
    milliseconds: smaller tasks would cost more in messages than they spread)."""
    reps = scenario.run.replications
    trained = sum(1 for rep in range(reps) if scenario.trains_model(rep))
    size = max(1, math.ceil((reps - trained) / (4 * jobs)))
    return [range(r, r + 1) for r in range(trained)] + [
        range(r, min(r + size, reps)) for r in range(trained, reps, size)
    ]


def _run_chunk(scenario: Scenario, policy_indices: list[int], reps: range):
    return simulate_reps(scenario, policy_indices, reps, timeline_rep=0)


def _run_chunks(scenario: Scenario, policy_indices: list[int], chunks: list[range], jobs: int):
    """(reps, result) of every chunk, serially or, with ``jobs`` > 1, as workers finish."""
    if jobs <= 1 or len(chunks) < 2:
        for reps in chunks:
            yield reps, _run_chunk(scenario, policy_indices, reps)
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(
        max_workers=min(jobs, len(chunks)), initializer=_one_blas_thread
    ) as pool:
        futures = {pool.submit(_run_chunk, scenario, policy_indices, reps): reps for reps in chunks}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            for future in futures:
                future.cancel()


def _one_blas_thread() -> None:
    """Pin a worker's BLAS to one thread for its lifetime (as :func:`cosimulate` does for
    the trainer): workers then share the cores instead of oversubscribing them."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def summarize(rows: list[dict]) -> list[dict]:
    """Per policy: mean overhead with its 95% t-interval over the ``n`` replications, mean
    breakdown in hours, the time model's mean ``pls_model`` where the policy estimates it,
    and for the ``n_trained`` replications that trained the model, the mean and 95%
    t-interval of each accuracy column (:data:`ACCURACY`)."""
    out = []
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]
        mean, half, n = mean_ci([r["overhead_frac"] for r in mine])
        summary = {"policy": policy, "n": n, "overhead_mean": mean, "overhead_ci95": half}
        for category in CATEGORIES:
            summary[f"{category}_h"] = sum(r[f"{category}_h"] for r in mine) / n
        summary["wall_h"] = sum(r["wall_h"] for r in mine) / n
        summary["n_failures"] = sum(r["n_failures"] for r in mine) / n
        if all("pls_model" in r for r in mine):
            summary["pls_model_mean"] = sum(r["pls_model"] for r in mine) / n
        trained = [r for r in mine if "logloss_delta" in r]
        if trained:
            summary["n_trained"] = len(trained)
            for column in ACCURACY:
                mean, half, _ = mean_ci([r[column] for r in trained])
                summary[f"{column}_mean"] = mean
                summary[f"{column}_ci95"] = half
        out.append(summary)
    return out


def format_summary(summary: list[dict]) -> str:
    """The summary as a fixed-width text table for the terminal. Each interval's header
    names its sample: ``n`` replications for the time model, ``n_trained`` for accuracy."""
    header = [
        "policy", "overhead", "±CI95(n)", "n", *[f"{c}_h" for c in CATEGORIES], "failures",
        "pls_model",
    ]  # fmt: skip
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
                f"{s['pls_model_mean']:.4f}" if "pls_model_mean" in s else "-",
            ]
        )
    if any("n_trained" in s for s in summary):
        header += ["logloss_delta", "±CI95(n_trained)", "pls_measured", "n_trained"]
        for line, s in zip(lines[1:], summary, strict=True):
            if "n_trained" not in s:
                line += ["-"] * 4
                continue
            line += [
                f"{s['logloss_delta_mean']:+.2e}",
                _ci(s["logloss_delta_ci95"], "{:.1e}"),
                f"{s['pls_measured_mean']:.4f}",
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
