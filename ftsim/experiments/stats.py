"""Sweep statistics: Student-t intervals per point and policy, and paired differences.

Replication *i* of every policy at every point saw the same failures (common random
numbers), so a policy is compared with the reference policy on matched replications: the
interval of the mean difference is much narrower than the difference of two intervals.

Imports pandas and scipy (1.4 s of start-up): only ``sweep`` and ``plot`` use this module.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
"""Two-sided confidence level of every interval."""

KEY = ("point", "policy")
"""A summary row: one policy at one sweep point."""

METRICS = (
    "overhead_frac",
    "ettr",
    "wall_h",
    "save_h",
    "load_h",
    "lost_h",
    "reschedule_h",
    "degraded_h",
    "other_h",
    "n_failures",
    "n_checkpoints",
    "final_logloss",
    "final_auc",
    "logloss_delta",
    "auc_delta",
    "pls_measured",
    "pls_model",
    "pls_predicted",
)
"""Columns summarised with mean, std and interval (those present in the runs). Each interval
is over the replications that have the column: all of them for the time model's columns,
the trained ones (``n_trained``) for the accuracy columns and ``pls_measured``."""

PAIRED = ("overhead_frac", "logloss_delta")
"""Columns also compared with the reference policy on matched replications."""

_NOT_METRICS = {"point", "rep", "seed", "completed"}


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student-t critical value, e.g. 2.262 for 95% and df = 9."""
    return float(scipy_stats.t.ppf(0.5 + confidence / 2.0, df))


def t_interval(values, confidence: float = CONFIDENCE) -> dict[str, float]:
    """Mean, sample std (ddof 1), n and the t-interval of the mean; NaN values are dropped.

    With n < 2 the std and the interval are NaN.
    """
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    std = float(x.std(ddof=1)) if n > 1 else math.nan
    half = t_quantile(confidence, n - 1) * std / math.sqrt(n) if n > 1 else math.nan
    return {"mean": mean, "std": std, "n": n, "low": mean - half, "high": mean + half}


def with_point(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with a ``point`` column (0 for the rows of a plain ``run``)."""
    # copy() consolidates a wide frame read column by column (a composed policy's part
    # columns): adding a column to it otherwise warns that it is fragmented
    return runs if "point" in runs else runs.copy().assign(point=0)


def summarize(
    runs: pd.DataFrame,
    point_columns: list[str] = (),
    reference: str | None = None,
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """One row per (point, policy), in the order of ``runs``, over finished replications.

    A replication stopped at ``run.max_wall_factor`` (``completed`` false) has no overhead:
    it is counted in ``n_unfinished`` and left out of every statistic and paired difference.

    Columns: ``point``, the swept ``point_columns``, ``policy``, ``kind``, ``n`` (finished
    replications), ``n_unfinished``, ``n_trained`` (finished ones that trained the model,
    when some did); for each
    metric present, ``{m}_mean``, ``{m}_std``, ``{m}_ci95_low``, ``{m}_ci95_high``
    (``overhead_frac`` also ``_ci95_half``); other numeric columns (policy parameters such
    as ``interval_h``) as ``{c}_mean``; then ``reference`` and, for each paired column,
    ``{m}_diff_mean``, ``{m}_diff_ci95_low``, ``{m}_diff_ci95_high``, ``{m}_diff_n``: the
    difference policy − reference over the replications both have at that point.
    ``reference`` defaults to the first policy.
    """
    runs = with_point(runs)
    reference = reference or runs["policy"].iloc[0]
    done = finished(runs)
    metrics = [m for m in METRICS if m in runs and _numeric(runs[m])]
    others = [
        c
        for c in runs.columns
        if c not in metrics
        and c not in _NOT_METRICS
        and c not in point_columns
        and _numeric(runs[c])
    ]
    out = []
    for (point, policy), everything in runs.groupby(list(KEY), sort=False):
        group = everything[done[everything.index]]
        row = {"point": point}
        row.update({c: everything[c].iloc[0] for c in point_columns})
        row.update(policy=policy, kind=everything["kind"].iloc[0], n=len(group))
        row["n_unfinished"] = len(everything) - len(group)
        if "logloss_delta" in metrics:
            row["n_trained"] = int(group["logloss_delta"].notna().sum())
        for m in metrics:
            s = t_interval(group[m], confidence)
            row.update(
                {f"{m}_mean": s["mean"], f"{m}_std": s["std"]},
                **{f"{m}_ci95_low": s["low"], f"{m}_ci95_high": s["high"]},
            )
            if m == "overhead_frac":
                row["overhead_frac_ci95_half"] = (s["high"] - s["low"]) / 2
        row.update({f"{c}_mean": float(group[c].mean()) for c in others})
        row["reference"] = reference
        ref = runs[done & (runs["point"] == point) & (runs["policy"] == reference)]
        for m in (m for m in PAIRED if m in metrics):
            d = t_interval(paired_differences(group, ref, m), confidence)
            row.update(
                {f"{m}_diff_mean": d["mean"], f"{m}_diff_ci95_low": d["low"]},
                **{f"{m}_diff_ci95_high": d["high"], f"{m}_diff_n": d["n"]},
            )
        out.append(row)
    return pd.DataFrame(out)


def finished(runs: pd.DataFrame) -> pd.Series:
    """Per row: whether the replication finished (all rows of runs without ``completed``)."""
    if "completed" not in runs:
        return pd.Series(True, index=runs.index)
    return runs["completed"].astype(str).str.lower() == "true"


def paired_differences(group: pd.DataFrame, reference: pd.DataFrame, metric: str) -> np.ndarray:
    """``metric`` of ``group`` minus that of ``reference``, on the replications both have."""
    mine = group.set_index("rep")[metric]
    theirs = reference.set_index("rep")[metric]
    common = mine.index.intersection(theirs.index).sort_values()
    return (mine.loc[common] - theirs.loc[common]).to_numpy(dtype=float)


def format_table(summary: pd.DataFrame, point_columns: list[str]) -> str:
    """The summary as a fixed-width text table: overhead ± CI and the paired difference
    over the ``n`` finished replications; when the model trained, the log-loss increase ±
    CI, its paired difference and the measured PLS over the ``n_trained`` replications; an
    ``unfinished`` column when some replications did not finish."""
    header = [*point_columns, "policy", "n", "overhead", "±CI95(n)", "Δ vs ref", "±CI95(n)"]
    accuracy = "n_trained" in summary and bool(summary["n_trained"].gt(0).any())
    if accuracy:
        header += ["n_trained", "logloss_delta", "±CI95(n_trained)", "Δ vs ref"]
        header += ["±CI95(n_trained)", "pls_measured"]
    lines = [header]
    unfinished = summary.get("n_unfinished", pd.Series(0, index=summary.index))
    for _, s in summary.iterrows():
        line = [
            *[str(s[c]) for c in point_columns],
            str(s["policy"]),
            str(s["n"]),
            "unfinished" if s["n"] == 0 else _pct(s["overhead_frac_mean"]),
            _pct(s["overhead_frac_ci95_half"]),
            _pct(s.get("overhead_frac_diff_mean", math.nan)),
            _pct(_half(s, "overhead_frac_diff")),
        ]
        if accuracy:
            line += [
                str(int(s["n_trained"])),
                _sci(s["logloss_delta_mean"], "{:+.2e}"),
                _sci(_half(s, "logloss_delta"), "{:.1e}"),
                _sci(s.get("logloss_delta_diff_mean", math.nan), "{:+.2e}"),
                _sci(_half(s, "logloss_delta_diff"), "{:.1e}"),
                _sci(s.get("pls_measured_mean", math.nan), "{:.4f}"),
            ]
        lines.append(line)
    if unfinished.any():
        header.append("unfinished")
        for line, count in zip(lines[1:], unfinished, strict=True):
            line.append(str(int(count)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text_columns = len(point_columns) + 1
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i < text_columns else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def _half(s: pd.Series, prefix: str) -> float:
    """Half-width of the interval ``{prefix}_ci95_low`` … ``_high`` (NaN if absent)."""
    return (s.get(f"{prefix}_ci95_high", math.nan) - s.get(f"{prefix}_ci95_low", math.nan)) / 2


def _pct(value: float) -> str:
    return "-" if value != value else f"{100 * value:.2f}%"


def _sci(value: float, form: str) -> str:
    return "-" if value != value else form.format(value)


def _numeric(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
