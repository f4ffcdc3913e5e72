"""The summary (:func:`ftsim.experiments.stats.summarize`) as text for the terminal.

``run`` prints :func:`run_table` (the time breakdown per policy), ``sweep`` prints
:func:`sweep_table` (overhead and paired differences per point and policy); both read the
same summary columns, and both say what each interval is over: ``n`` finished replications
for the time model, ``n_trained`` for accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ftsim.experiments.stats import half_width
from ftsim.sim.accounting import CATEGORIES, OTHER_NOTE


def run_table(summary) -> str:
    """One line per policy: overhead ± CI, CPR's decision with the interval it ran (when a
    CPR policy ran), hours per category, failures, the time model's PLS, with cluster
    operations the hours waited for a free node (summed over the failed nodes), the failures
    of bad nodes and the retirements, an ``unfinished`` column when some replications did
    not finish, the trained columns when
    the model trained, and a note on what ``other`` is when some policy has any.
    ``summary``: the summary of one point (its records, or a DataFrame)."""
    records, columns = _records(summary)
    header = [
        "policy", "overhead", "±CI95(n)", "n", *[f"{c}_h" for c in CATEGORIES], "failures",
        "pls_model",
    ]  # fmt: skip
    lines = [header]
    for s in records:
        lines.append(
            [
                s["policy"],
                "unfinished" if s["n"] == 0 else f"{100 * s['overhead_frac_mean']:.2f}%",
                half_pct(s["overhead_frac_ci95_half"]),
                str(s["n"]),
                *[_cell(s[f"{c}_h_mean"], "{:.3f}") for c in CATEGORIES],
                _cell(s["n_failures_mean"], "{:.1f}"),
                _cell(s.get("pls_model_mean", math.nan), "{:.4f}"),
            ]
        )
    ran = _ran_columns(columns)
    if "cpr_decision" in ran:
        header.insert(1, "cpr_decision")
        for line, s in zip(lines[1:], records, strict=True):
            line.insert(1, ran["cpr_decision"](s))
    if "spare_wait_h_mean" in columns:  # cluster operations ran
        header += ["spare_wait_h", "bad_failures", "retired"]
        for line, s in zip(lines[1:], records, strict=True):
            line += [
                _cell(s["spare_wait_h_mean"], "{:.3f}"),
                _cell(s["n_node_failures_bad_mean"], "{:.1f}"),
                _cell(s["n_retired_mean"], "{:.1f}"),
            ]
    if any(s["n_unfinished"] for s in records):
        header.append("unfinished")
        for line, s in zip(lines[1:], records, strict=True):
            line.append(str(s["n_unfinished"]))
    if any(s.get("n_trained", 0) > 0 for s in records):
        header += ["logloss_delta", "±CI95(n_trained)", "pls_measured", "n_trained"]
        for line, s in zip(lines[1:], records, strict=True):
            line += _trained_cells(s)
    table = _align(lines, text_columns=1)
    return f"{table}\n{OTHER_NOTE}" if any(s["other_h_mean"] > 0 for s in records) else table


def _trained_cells(s: dict) -> list[str]:
    """Log-loss delta ± CI, measured PLS and n of the trained replications ('-' if none
    finished)."""
    if not s.get("n_trained", 0) > 0:
        return ["-"] * 4
    return [
        f"{s['logloss_delta_mean']:+.2e}",
        _cell(half_width(s, "logloss_delta"), "{:.1e}"),
        f"{s['pls_measured_mean']:.4f}",
        str(int(s["n_trained"])),
    ]


def sweep_table(summary, point_columns: list[str]) -> str:
    """One line per point and policy: overhead ± CI and the paired difference over the
    ``n`` finished replications, the time model's ``pls_model`` (when a policy has one);
    when the model trained, the log-loss increase ± CI, its
    paired difference and the measured PLS over the ``n_trained`` replications; an
    ``unfinished`` column when some replications did not finish. ``summary``: its records,
    or a DataFrame."""
    records, columns = _records(summary)
    ran = _ran_columns(columns)
    header = [*point_columns, "policy", *ran, "n", "overhead", "±CI95(n)", "Δ vs ref", "±CI95(n)"]
    pls = any(not math.isnan(s.get("pls_model_mean", math.nan)) for s in records)
    if pls:  # the time model's PLS, as run's table (a PLS budget's study needs it)
        header.append("pls_model")
    accuracy = any(s.get("n_trained", 0) > 0 for s in records)
    if accuracy:
        header += ["n_trained", "logloss_delta", "±CI95(n_trained)", "Δ vs ref"]
        header += ["±CI95(n_trained)", "pls_measured"]
    lines = [header]
    for s in records:
        line = [
            *[str(s[c]) for c in point_columns],
            str(s["policy"]),
            *[cell(s) for cell in ran.values()],
            str(s["n"]),
            "unfinished" if s["n"] == 0 else _pct(s["overhead_frac_mean"]),
            half_pct(s["overhead_frac_ci95_half"]),
            _pct(s.get("overhead_frac_diff_mean", math.nan)),
            half_pct(half_width(s, "overhead_frac_diff")),
        ]
        if pls:
            line.append(_cell(s.get("pls_model_mean", math.nan), "{:.4f}"))
        if accuracy:
            line += [
                str(int(s["n_trained"])),
                _cell(s["logloss_delta_mean"], "{:+.2e}"),
                _cell(half_width(s, "logloss_delta"), "{:.1e}"),
                _cell(s.get("logloss_delta_diff_mean", math.nan), "{:+.2e}"),
                _cell(half_width(s, "logloss_delta_diff"), "{:.1e}"),
                _cell(s.get("pls_measured_mean", math.nan), "{:.4f}"),
            ]
        lines.append(line)
    if any(s.get("n_unfinished", 0) for s in records):
        header.append("unfinished")
        for line, s in zip(lines[1:], records, strict=True):
            line.append(str(int(s["n_unfinished"])))
    table = _align(lines, text_columns=len(point_columns) + 1 + len(ran))
    missing = _without_reference(records, point_columns)
    return f"{table}\n{missing}" if missing else table


def _without_reference(records: list[dict], point_columns: list[str]) -> str:
    """Why ``Δ vs ref`` reads '-' at some points: the reference policy is not among their
    policies (a sweep of ``policies.0.kind`` renames it); '' when it is at every point."""
    reference = next((s["reference"] for s in records if s.get("reference")), None)
    if reference is None:
        return ""
    at = {s.get("point") for s in records if s["policy"] == reference}
    without = {
        s.get("point"): ", ".join(f"{c}={s[c]}" for c in point_columns)
        for s in records
        if s.get("point") not in at
    }
    if not without:
        return ""
    points = "; ".join(without.values())
    return f"Δ vs ref: '-' where {reference}, the reference, did not run ({points})"


def _records(summary) -> tuple[list[dict], dict[str, None]]:
    """A summary's records and column names, in order (``summary``: records, or a
    DataFrame)."""
    if hasattr(summary, "to_dict"):
        return summary.to_dict("records"), dict.fromkeys(summary.columns)
    return summary, dict.fromkeys(column for row in summary for column in row)


def _ran_columns(summary) -> dict:
    """Columns saying what ran, each a function of a summary row: ``interval run`` (the
    checkpoint interval the policy ran, which a fall-back or a target PLS makes differ from
    a requested one) and ``cpr_decision`` with that interval (``full @ 45.8 min``).
    ``summary``: the summary's column names."""
    from ftsim.notices import short_duration

    parts = [c.removesuffix("/interval_h_mean") for c in summary if c.endswith("/interval_h_mean")]

    def interval(s: dict) -> str:
        """The policy's interval, or a composed policy's per part (``parity 9 h, …``)."""
        if s["interval_h_mean"] == s["interval_h_mean"]:
            return short_duration(3600.0 * s["interval_h_mean"])
        each = [(p, s.get(f"{p}/interval_h_mean", math.nan)) for p in parts]
        ran = [f"{p} {short_duration(3600.0 * h)}" for p, h in each if h == h]
        return ", ".join(ran) or "-"

    def decision(s: dict) -> str:
        """CPR's decision (:func:`decision_cell`), or those of a composed policy's parts."""
        training_h = s.get("ideal_h_mean")
        if _text(s.get("cpr_decision")):
            return decision_cell(s["cpr_decision"], s.get("interval_h_mean"), training_h)
        each = [
            f"{p}: {decision_cell(made, s.get(f'{p}/interval_h_mean'), training_h)}"
            for p in parts
            if _text(made := s.get(f"{p}/cpr_decision"))
        ]
        return ", ".join(each) or "-"

    columns = {}
    if "interval_h_mean" in summary:
        columns["interval run"] = interval
    if "cpr_decision" in summary or any(c.endswith("/cpr_decision") for c in summary):
        columns["cpr_decision"] = decision
    return columns


def _text(value) -> bool:
    """Whether ``value`` is a non-empty text (a decision; NaN or '' where there is none)."""
    return isinstance(value, str) and bool(value)


def decision_cell(
    decision: str | None, interval_h: float | None, training_h: float | None = None
) -> str:
    """CPR's decision with the interval it ran: ``full @ 45.8 min``; '-' for other policies.
    An interval not shorter than the failure-free training (``training_h``) saves nothing
    in the job: ``partial @ 51.2 h (no save in 50 h)``, lest the interval read as one that
    ran; an infinite one (no embedding PS can fail) says so."""
    from ftsim.notices import short_duration

    if not isinstance(decision, str) or not decision:
        return "-"
    if interval_h is None or interval_h != interval_h:
        return decision
    if interval_h == float("inf"):  # no embedding PS fails: nothing to save for
        return f"{decision}, no save (no embedding PS failure to plan for)"
    cell = f"{decision} @ {short_duration(3600.0 * interval_h)}"
    if training_h is not None and interval_h >= training_h:
        cell += f" (no save in {short_duration(3600.0 * training_h)})"
    return cell


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


def _align(lines: list[list[str]], text_columns: int) -> str:
    """Fixed-width columns: the first ``text_columns`` left-aligned, the numbers right."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i < text_columns else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def _pct(value: float) -> str:
    return "-" if value != value else f"{100 * value:.2f}%"


ROUNDING = 1e-12
"""A half-width (of fractions) below this is rounding: the same value on every replication
(means of overheads near 1e-2 differ by 1e-17)."""


def half_pct(half: float) -> str:
    """A half-width as a percentage: two decimals, or two significant digits when it would
    round to 0.00% without being 0 or rounding (CPR's 0.0024% read as no spread at all)."""
    if half != half or not ROUNDING < half < 0.00005:
        return _pct(half)
    return f"{100 * half:.2g}%" if 100 * half >= 1e-4 else f"{100 * half:.1e}%"


def _cell(value: float, form: str) -> str:
    """``value`` formatted, or '-' when it is NaN (no interval from fewer than 2 values)."""
    return "-" if value != value else form.format(value)
