"""``ftsim advise``: the cheapest setting of each policy under an accuracy and a memory limit.

For each policy of a scenario the search tries settings of its knobs (:func:`knobs`: the
checkpoint interval of every kind, CPR-MFU/SSU's ``fraction``, ECRM's ``k``, SWIFT's
``log_budget``; not Check-N-Run's ``quantize_bits``: :func:`kept_as_set`) with the
simulator, timing only:

1. a coarse grid (the cartesian product of every knob's coarse values);
2. when no setting of the grid meets the limits, steps toward them (at most
   :data:`APPROACH_STEPS`): around the setting nearest to the limits, every combination of
   the knobs' next values (a coarse step beyond the grid for a knob at its edge, such as a
   shorter interval or a larger ECRM ``k``, and the midpoints to its neighbours), until a
   setting meets them: the grid's bounds are not the knobs' (a memory limit of 10% needs
   ECRM's k = 10, beyond the grid's 2, 4, 8), and two limits may need two knobs moved at
   once;
3. refinement around the cheapest setting that meets the limits: for each numeric knob in
   turn, the midpoints (geometric for durations) between its value and its nearest tried
   neighbours, the other knobs fixed; ``rounds`` times;

and picks the setting of lowest mean overhead among those that meet the limits. Every
candidate is simulated on the same replications (the same seed: common random numbers), so
candidates differ by their settings, not by their failures; and so the recommendation, the
policy of the cheapest pick, is compared with each other pick on the replications both
finished (a paired t-interval of the difference in overhead): it says whether the next
cheapest pick is told apart, or whether the two are a tie at this many replications.

The limits: ``max_pls`` bounds the mean of the time model's ``pls_model`` (the portion of
lost samples it counts: updates of failed shards since they were last saved; no model is
trained, so this is not the measured ``pls_measured``); a policy without the column loses no
updates (PLS 0). ``max_memory_overhead`` bounds the extra memory per embedding PS as a share
of its shard (:func:`ftsim.policies.base.memory_frac`: the sum of the row's ``*_mem_frac``
columns: CPR's use tracker, ECRM's parity, a composition's parts together). A candidate
with an unfinished replication meets no limit.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from ftsim.experiments import interrupts
from ftsim.experiments.pool import finished, process_pool, submit_all
from ftsim.experiments.runner import simulate_reps
from ftsim.experiments.stats import mean_ci, t_interval
from ftsim.experiments.tables import ROUNDING, half_pct
from ftsim.notices import Notice, counted, short_duration
from ftsim.options import named
from ftsim.policies.base import memory_frac
from ftsim.policies.knobs import Knob
from ftsim.scenario import overrides as rules
from ftsim.scenario.loader import Overrides, ScenarioError, read_scenario, validate_scenario
from ftsim.scenario.schema import Scenario

COARSE_INTERVALS = 7
"""Coarse grid of checkpoint intervals: this many, geometric, from ``MIN_INTERVAL_S`` to
the job's training time (at most ``MAX_INTERVAL_S``)."""
MIN_INTERVAL_S = 600.0
MAX_INTERVAL_S = 48 * 3600.0


def interval_grid(work_s: float) -> tuple[float, ...]:
    """Geometric intervals from 10 min to the training time (at most 48 h), seconds."""
    top = max(min(work_s, MAX_INTERVAL_S), 2 * MIN_INTERVAL_S)
    ratio = (top / MIN_INTERVAL_S) ** (1 / (COARSE_INTERVALS - 1))
    return tuple(MIN_INTERVAL_S * ratio**i for i in range(COARSE_INTERVALS))


def knobs(policy, scenario: Scenario) -> list[Knob]:
    """The knobs searched for ``policy`` (its Params): the checkpoint interval, when it has
    one (a composed policy's sets every part's, by the wildcard rule), and its kind's own
    trade-offs (:attr:`~ftsim.policies.base.PolicyParams.search`). A policy with neither is
    evaluated as set."""
    work = scenario.job.work_s
    found = []
    params = type(policy)
    if "interval" in params.model_fields or params.nested_policies is not None:
        found.append(Knob("interval", interval_grid(work), "geometric", lowest=60.0, highest=work))
    return found + list(params.search)


def kept_as_set(policy) -> str:
    """What of ``policy`` (its Params) is not searched though it trades cost for accuracy,
    because the limits cannot see its accuracy cost: Check-N-Run's ``quantize_bits`` (its
    checkpoints lose no updates, ``pls_model`` 0, at any bit width: a search picks the
    fewest bits, whatever they cost in accuracy, which only a trained run measures)."""
    bits = getattr(policy, "quantize_bits", None)
    if policy.kind != "checknrun" or bits is None:
        return ""
    return (
        f"quantize_bits {bits} kept as set: its accuracy cost is not in pls_model "
        "(measure it with a trained run: logloss_delta)"
    )


@dataclass
class PolicyAdvice:
    """The search of one policy: its knobs, every candidate, and the pick (None if no
    candidate meets the limits)."""

    policy: str
    kind: str
    knobs: list[Knob]
    candidates: pd.DataFrame
    pick: pd.Series | None
    kept: str = ""
    """What of the policy is kept as set though it trades cost for accuracy (''): see
    :func:`kept_as_set`."""
    overheads: dict[int, float] = field(default_factory=dict)
    """The pick's overhead (a fraction) per finished replication, by replication number:
    what :meth:`Advice.versus_recommended` pairs."""

    def edges(self) -> list[str]:
        """The knobs whose pick is the smallest or largest value tried while a step beyond
        it was still within the knob's bounds (the search stopped at its edge: a value
        beyond may be cheaper), as ``interval 3.47 min, the smallest tried``. Only knobs
        the search extends beyond its grid (geometric: the interval, a fraction, ECRM's
        ``k``), and not when the step beyond was tried and found invalid (k + r above the
        embedding PS)."""
        if self.pick is None:
            return []
        valid = self.candidates[self.candidates["valid"]]
        said = []
        for knob in self.knobs:
            value = _value(self.pick[knob.column])
            tried = valid[knob.column].dropna()
            if knob.refine != "geometric" or value is None or len(tried.unique()) < 2:
                continue
            step = knob.values[1] / knob.values[0]
            invalid = set(self.candidates.loc[~self.candidates["valid"], knob.column])
            below, above = value / step, value * step
            if knob.integer:
                below, above = round(below), round(above)
            if value == tried.min() and below >= knob.lowest and below not in invalid:
                said.append(f"{knob.show(value)}, the smallest tried")
            elif value == tried.max() and above <= knob.highest and above not in invalid:
                said.append(f"{knob.show(value)}, the largest tried")
        return said

    def skipped(self) -> str:
        """The settings not simulated because the policy refuses them, with the first one's
        reason ('' if none): ``2 settings skipped as invalid (interval 48 h, k 32, refused at
        k: need k + r <= n_shards (18); …)``."""
        invalid = self.candidates[~self.candidates["valid"]]
        if invalid.empty:
            return ""
        first = invalid.iloc[0]
        return (
            f"{counted(len(invalid), 'setting')} skipped as invalid ({self.setting(first)}, "
            f"refused at {first['problem']}; each is in the candidates table)"
        )

    def setting(self, row: pd.Series) -> str:
        """A candidate's setting for people: ``interval 2 h, fraction 0.05``; ``as set (no
        knob to search)`` for a policy without one."""
        shown = ", ".join(k.show(_value(row[k.column])) for k in self.knobs)
        partial = row.get("cpr_decision") == "partial"  # a fall-back: the reason is its own
        if "fraction" in row and row.get("n_partial_saves") == 0 and partial:
            shown += " (no partial save: fraction has no effect)"
        return shown or "as set (no knob to search)"


@dataclass
class Advice:
    """What :func:`advise` found: per policy its pick, and the overall recommendation."""

    scenario: str
    reps: int
    seed: int
    max_pls: float | None
    max_memory_overhead: float | None
    output: str = "results"
    """The scenario's ``run.output``: where results go by default."""
    training_s: float = math.nan
    """The job's failure-free training time, seconds: what an overhead is a share of."""
    policies: list[PolicyAdvice] = field(default_factory=list)
    folder: Path | None = None
    """The folder :func:`execute` wrote (``candidates.csv``, ``frontier.pdf``/``.png``,
    ``picks.yaml``, ``manifest.json``); None before it is written."""
    picks_scenario: Scenario | None = None
    """The scenario as the search ran it (its replications and seed; its trainer section as
    given), each policy at its pick (the values that ran; those without a pick left out):
    run, it gives the picks' measures again; with more replications, it confirms them;
    trained, it measures their accuracy. None if no policy has a pick."""
    files: list[Path] = field(default_factory=list)
    """The files written there, the manifest last."""

    @property
    def candidates(self) -> pd.DataFrame:
        """Every evaluated candidate of every policy (a tidy table): who, the search stage,
        the knob values (``interval_s`` in seconds), then the measures."""
        table = pd.concat([p.candidates for p in self.policies], ignore_index=True)
        knobs = list(dict.fromkeys(k.column for p in self.policies for k in p.knobs))
        first = ["policy", "kind", "stage", *knobs]
        return table[first + [c for c in table.columns if c not in first]]

    @property
    def ranked(self) -> list[PolicyAdvice]:
        """The policies with a pick, cheapest pick first (by mean overhead; ties in the
        scenario's order)."""
        picked = [p for p in self.policies if p.pick is not None]
        return sorted(picked, key=lambda p: p.pick["overhead_frac_mean"])

    @property
    def recommendation(self) -> PolicyAdvice | None:
        """The policy whose pick has the lowest mean overhead (None if no policy has one)."""
        return next(iter(self.ranked), None)

    @property
    def runner_up(self) -> PolicyAdvice | None:
        """The policy whose pick is the next cheapest after the recommendation's (None
        with fewer than two picks)."""
        return next(iter(self.ranked[1:]), None)

    def versus_recommended(self, policy: PolicyAdvice) -> dict[str, float]:
        """``policy``'s pick against the recommendation's, paired on the replications both
        finished (the same failures): the mean, 95% t-interval (``low``, ``high``) and
        ``n`` of the difference in overhead (a fraction; positive: ``policy`` costs
        more). With n < 2 the interval is NaN."""
        best = self.recommendation
        theirs = best.overheads if best is not None else {}
        both = sorted(policy.overheads.keys() & theirs.keys())
        return t_interval([policy.overheads[r] - theirs[r] for r in both])

    @property
    def picks(self) -> pd.DataFrame:
        """One row per policy (a tidy table): its pick, the cheapest setting within the
        limits (``setting`` for people, the knob values, ``ran``: what ran when it differs
        from the setting, CPR's decision and interval), its measures, the paired difference
        of its overhead from the recommendation's (:meth:`versus_recommended`: mean, 95%
        half-width, n; empty for the recommendation itself), how many candidates were
        ``tried`` and whether it is the ``recommended`` one; a policy without a pick has
        empty measures and says why in ``why_none``."""
        best = self.recommendation
        knobs = list(dict.fromkeys(k.column for p in self.policies for k in p.knobs))
        rows = []
        for p in self.policies:
            row = {"policy": p.policy, "kind": p.kind, "setting": "", "ran": ""}
            if p.pick is not None:
                row |= {"setting": p.setting(p.pick), "ran": _ran(p.pick)}
                row |= {c: p.pick[c] for c in [*knobs, *PICKED] if c in p.pick}
            if p.pick is not None and p is not best:
                d = self.versus_recommended(p)
                row |= {
                    "overhead_frac_diff_vs_recommended": d["mean"],
                    "overhead_frac_diff_ci95_half": (d["high"] - d["low"]) / 2,
                    "n_paired": d["n"],
                }
            row |= {"tried": int(p.candidates["valid"].sum()), "recommended": p is best}
            row["at_edge"] = "; ".join(p.edges())
            row["why_none"] = "" if p.pick is not None else _why_none(p, self)
            rows.append(row)
        columns = ["policy", "kind", "setting", "ran", *knobs, *PICKED, *VERSUS, "tried"]
        return pd.DataFrame(rows, columns=[*columns, "recommended", "at_edge", "why_none"])

    def limits(self) -> str:
        said = []
        if self.max_pls is not None:
            said.append(f"pls_model <= {self.max_pls:g}")
        if self.max_memory_overhead is not None:
            said.append(f"memory overhead <= {self.max_memory_overhead:g} of a shard")
        return ", ".join(said) or "none"

    def text(self) -> str:
        """The advice as a text table with a header and the recommendation."""
        lines = [
            f"advise {self.scenario}: timing only (PLS is the time model's pls_model), "
            f"{counted(self.reps, 'replication')} per candidate on the same failures "
            f"(seed {self.seed}); "
            f"limits: {self.limits()}"
        ]
        table = [["policy", "cheapest setting within the limits", "ran", "overhead",
                  "±CI95(n)", "pls_model", "memory", "tried"]]  # fmt: skip
        for s in self.picks.itertuples():
            if s.why_none:
                table.append([s.policy, s.why_none, "-", "-", "-", "-", "-", str(s.tried)])
                continue
            table.append(
                [
                    s.policy,
                    s.setting,
                    s.ran,
                    f"{100 * s.overhead_frac_mean:.2f}%",
                    f"{half_pct(s.overhead_frac_ci95_half)} ({int(s.n)})",
                    f"{s.pls_model_mean:.4f}",
                    f"{s.memory_frac:.3g}",
                    str(s.tried),
                ]
            )
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            cells = zip(row, widths, strict=True)
            line = [c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(cells)]
            lines.append("  ".join(line).rstrip())
        lines += [f"{p.policy}: {p.kept}" for p in self.policies if p.kept]
        lines += [f"{p.policy}: {p.skipped()}" for p in self.policies if p.skipped()]
        for p in self.policies:
            for edge in p.edges():
                lines.append(
                    f"{p.policy}: its pick's {edge}: the search stopped at its edge, and a "
                    "value beyond it may be cheaper (run it to compare: ftsim run --set)"
                )
        if self.max_pls is None and self.max_memory_overhead is None:
            lines.append(
                "no limits: each policy's cheapest setting, whatever its PLS and memory "
                f"({named('max_pls')} and {named('max_memory_overhead')} set limits)"
            )
        best = self.recommendation
        if best is None:
            lines.append(f"no policy has a setting within the limits ({self.limits()})")
        else:
            s = best.pick
            ran = f" (ran {_ran(s)})" if s.get("cpr_decision") == "full" else ""
            half = _interval(s["overhead_frac_ci95_half"], int(s["n"]))
            lines.append(
                f"recommendation: {best.policy} with {best.setting(s)}{ran}: overhead "
                f"{100 * s['overhead_frac_mean']:.2f}% {half}, "
                f"pls_model {s['pls_model_mean']:.4f}"
            )
            if self.runner_up is not None:
                lines.append(self._next_line(self.runner_up))
        if self.folder is not None and self.picks_scenario is not None:
            lines.append(
                f"the picks as a scenario: {self.folder / PICKS} (ftsim run it to confirm "
                "them; with its trainer, to measure their accuracy)"
            )
        return "\n".join(lines)

    def _next_line(self, other: PolicyAdvice) -> str:
        """Whether the recommendation is told apart from ``other``, the next cheapest pick:
        their paired difference in overhead and its 95% CI."""
        d = self.versus_recommended(other)
        name = self.recommendation.policy
        if d["n"] < 2:
            return (
                f"{name} and {other.policy} cannot be told apart on "
                f"{counted(d['n'], 'replication')} run by both: give more ({named('reps')})"
            )
        if d["mean"] == 0 and d["std"] == 0:  # the same on every replication
            return (
                f"{other.policy}'s pick costs the same as {name}'s on every one of the "
                f"{d['n']} replications (the same schedule of saves and failures)"
            )
        mean, half = _percent_pm(d["mean"], (d["high"] - d["low"]) / 2)
        diff = f"{mean} ± {half} overhead (paired 95% CI, n = {d['n']})"
        if d["low"] > 0:
            told = f"next: {other.policy}, {diff}: told apart"
            if self.training_s == self.training_s:  # in time, lest 0.0001% read as a lot
                time = short_duration(d["mean"] * self.training_s)
                told += f", {time} over the {short_duration(self.training_s)} of training"
            return told
        return (
            f"a tie with {other.policy}: {diff} holds 0; more replications "
            f"({named('reps')}) may tell {name} and {other.policy} apart"
        )

    def figure(self):
        """The frontier figure (a matplotlib Figure, 3.33 in wide; close it when done)."""
        from ftsim.plots.frontier import frontier_figure

        return frontier_figure(self)


PICKED = ("overhead_frac_mean", "overhead_frac_ci95_half", "n", "pls_model_mean", "memory_frac")
PICKED += ("interval_h", "cpr_decision")
"""The measures of a candidate that :attr:`Advice.picks` shows."""
VERSUS = ("overhead_frac_diff_vs_recommended", "overhead_frac_diff_ci95_half", "n_paired")
"""The columns of :attr:`Advice.picks` comparing a pick with the recommendation's."""


def advise(
    scenario: str | Path | Scenario,
    overrides: Overrides = (),
    *,
    max_pls: float | None = None,
    max_memory_overhead: float | None = None,
    reps: int | None = None,
    seed: int | None = None,
    policies: Sequence[str] | None = None,
    rounds: int = 2,
    jobs: int = 1,
) -> Advice:
    """Search every (selected) policy's knobs for its cheapest setting within the limits
    (module docstring). ``scenario``: a path (read with ``overrides`` as ``--set`` does) or
    a loaded scenario; ``reps`` / ``seed``: replications per candidate (default: the
    scenario's) and their seed; ``jobs``: worker processes that simulate candidates (the
    results do not depend on it). ScenarioError for a bad scenario or override, StudyError
    for a bad limit or option."""
    check_options(max_pls, max_memory_overhead, jobs, rounds)
    path, data, selected = _read(scenario, overrides, policies)
    data.setdefault("run", {})
    if reps is not None:
        data["run"]["replications"] = reps
    if seed is not None:
        data["run"]["seed"] = seed
    as_run = copy.deepcopy(data)  # the picks' scenario: with its trainer
    if isinstance(data.get("trainer"), dict):
        data["trainer"]["enabled"] = False  # timing only: PLS is the time model's
    data.pop("sweep", None)
    base = validate_scenario(rules.only_selected(data, selected), path, positions=selected)
    run = base.run
    advice = Advice(
        base.name, run.replications, run.seed, max_pls, max_memory_overhead, run.output,
        base.job.work_s,
    )  # fmt: skip
    with (
        interrupts.ctrl_c_handled(),  # from Python too: a notebook's Ctrl-C deferred likewise
        process_pool(jobs) if jobs > 1 else nullcontext() as pool,
    ):
        for index, policy in enumerate(base.policies):
            one = {**data, "policies": [rules.only_selected(data, selected)["policies"][index]]}
            advice.policies.append(_search(one, path, policy, base, advice, rounds, pool))
    advice.picks_scenario = _picks_scenario(as_run, path, selected, advice.policies)
    return advice


def _picks_scenario(data: dict, path: Path, selected, policies: list[PolicyAdvice]):
    """:attr:`Advice.picks_scenario` from the scenario mapping as the search ran it
    (``data``: its replications and seed; its trainer section as given)."""
    data = rules.only_selected(data, selected)
    data.pop("sweep", None)
    picked = []
    for entry, policy in zip(data["policies"], policies, strict=True):
        if policy.pick is None:
            continue
        one = {**data, "policies": [copy.deepcopy(entry)]}
        for knob in policy.knobs:
            value = knob.assigned(_value(policy.pick[knob.column]))
            rules.assign(one, f"policies.*.{knob.field}", value)
        picked.append(one["policies"][0])
    return validate_scenario({**data, "policies": picked}, path) if picked else None


def check_options(max_pls, max_memory_overhead, jobs, rounds=0) -> None:
    """StudyError naming the first limit or option :func:`advise` cannot use."""
    from ftsim.experiments.study import StudyError

    if max_pls is not None and not (_number(max_pls) and 0 <= max_pls <= 1):
        raise StudyError(  # 0: lossless settings only (full, SWIFT logging every update)
            f"{named('max_pls')} must be a number from 0 to 1 (got {_shown(max_pls)})"
        )
    memory = max_memory_overhead
    if memory is not None and not (_number(memory) and math.isfinite(memory) and memory >= 0):
        raise StudyError(
            f"{named('max_memory_overhead')} must be a number >= 0 (got {_shown(memory)})"
        )
    for name, value, least in ((named("jobs"), jobs, 1), ("rounds", rounds, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise StudyError(f"{name} must be a whole number of at least {least} (got {value!r})")


def _interval(half: float, n: int) -> str:
    """``± 0.10% (95% CI, n = 10)``; ``(n = 1: no interval)``."""
    if half != half:
        return f"(n = {n}: no interval)"
    return f"± {half_pct(half)} (95% CI, n = {n})"


def _percent_pm(mean: float, half: float) -> tuple[str, str]:
    """A difference of fractions and its half-width as signed percentages, to the half-width's
    second significant digit, with two to six decimals: ``+0.0093% ± 0.0021%``,
    ``+0.00012% ± 0.000034%`` (with four, a half-width under 0.00005% read ``± 0.0000%``,
    as if the replications agreed); a half-width of zero, or of rounding only (the same
    difference on every replication), to the difference's second significant digit."""
    scale = half if half > ROUNDING else abs(mean)
    digits = 2 if scale == 0 else min(6, max(2, 1 - math.floor(math.log10(100 * scale))))
    return f"{100 * mean:+.{digits}f}%", f"{100 * half:.{digits}f}%"


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shown(value) -> str:
    """A value a limit refused, with its type when it is not a number ('0.01', a str)."""
    return repr(value) if _number(value) else f"{value!r}, a {type(value).__name__}"


def _read(scenario, overrides, policies) -> tuple[Path, dict, list[int] | None]:
    """(path, scenario mapping with the overrides, selected policies)."""
    if isinstance(scenario, Scenario):
        data = scenario.model_dump(mode="json")
        path = Path(f"{scenario.name}.yaml")
        selected = rules.select(data, policies)
        problems = rules.apply_overrides(data, overrides, selected)
        if problems:
            raise ScenarioError(path, problems)
        return path, data, selected
    data, selected = read_scenario(scenario, overrides, policies)
    return Path(scenario), data, selected


def _search(data: dict, path: Path, policy, base: Scenario, advice: Advice, rounds, pool):
    """Coarse grid, then ``rounds`` of refinement around the pick so far; candidates are
    simulated in ``pool`` (an executor; None: here)."""
    found = knobs(policy, base)
    tried: dict[tuple, dict] = {}
    limits = (advice.max_pls, advice.max_memory_overhead)
    task = functools.partial(_evaluate, data, path, found, limits)

    def evaluate(settings: list[tuple], stage: str) -> int:
        """Simulate the settings not tried yet; how many they were."""
        new = [values for values in dict.fromkeys(settings) if values not in tried]
        if pool is None:
            rows = map(task, new)
        else:  # in the order of new (signals deferred in every call into the pool)
            futures = submit_all(pool, task, [(values,) for values in new])
            found = dict(finished(futures, pool))
            rows = [found[future] for future in futures]
        for values, row in zip(new, rows, strict=True):
            tried[values] = row | {"stage": stage}
        return len(new)

    evaluate(list(itertools.product(*(k.values for k in found))), "coarse")
    for step in range(APPROACH_STEPS):
        nearest = None if _best(tried) is not None else _nearest(tried, limits)
        stage = f"toward the limits {step + 1}"
        if nearest is None or not evaluate(_around(nearest, found, tried), stage):
            break
    for round_ in range(rounds):
        best = _best(tried)
        if best is None:
            break
        evaluate(_neighbours(best, found, tried), f"refine {round_ + 1}")
    overheads = {values: row.pop(PER_REPLICATION, {}) for values, row in tried.items()}
    table = pd.DataFrame(
        [{"policy": policy.label, "kind": policy.kind, **row} for row in tried.values()]
    )
    best = _best(tried)
    pick = table.iloc[list(tried).index(best)] if best is not None else None
    kept = kept_as_set(policy)
    mine = overheads[best] if best is not None else {}
    return PolicyAdvice(policy.label, policy.kind, found, table, pick, kept, mine)


PER_REPLICATION = "overhead_by_rep"
"""The key of a candidate's row (:func:`_evaluate`) that holds its overhead per finished
replication; taken out before the row joins the candidates table."""


def _evaluate(data, path, found: list[Knob], limits: tuple, values: tuple) -> dict:
    """Simulate one candidate on the scenario's replications; its row of the table.
    ``limits``: (max PLS, max memory overhead), None for no limit."""
    row: dict = {k.column: v for k, v in zip(found, values, strict=True)}
    candidate = copy.deepcopy(data)
    try:
        for knob, value in zip(found, values, strict=True):
            rules.assign(candidate, f"policies.*.{knob.field}", knob.assigned(value))
        scenario = validate_scenario(candidate, path)
    except (ScenarioError, ValueError) as exc:
        return row | {"valid": False, "problem": _problem(exc), "meets_limits": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Notice)  # a fall-back is in the row (cpr_decision)
        [runs], _ = simulate_reps(scenario, [0], range(scenario.run.replications))
    done = [r for r in runs if r.get("completed", True)]  # unfinished: no overhead
    mean, half, n = mean_ci([r["overhead_frac"] for r in done])
    pls = [float(r.get("pls_model", 0.0)) for r in done]
    memory = [memory_frac(r) for r in done]
    row |= {
        "valid": True,
        "problem": "",
        "n": n,
        "n_unfinished": len(runs) - n,
        "overhead_frac_mean": mean,
        "overhead_frac_ci95_half": half,
        "pls_model_mean": math.fsum(pls) / n if n else math.nan,
        "memory_frac": max(memory, default=math.nan),
        "interval_h": runs[0].get("interval_h", math.nan),
        "cpr_decision": runs[0].get("cpr_decision", ""),
    }
    if "n_partial_saves" in runs[0]:  # CPR-MFU/SSU: none when partial_interval >= interval
        row["n_partial_saves"] = math.fsum(r["n_partial_saves"] for r in done) / n if n else 0.0
    row["meets_limits"] = _meets(row, *limits)
    row[PER_REPLICATION] = {int(r["rep"]): r["overhead_frac"] for r in done}
    return row


def _problem(exc: Exception) -> str:
    """Why a candidate is invalid, as its policy's field: the candidate's scenario holds
    the one policy searched, so its location (``policies.0.k``) named another policy."""
    if isinstance(exc, ScenarioError) and exc.problems:
        where, message = exc.problems[0]
        if where == "policies.0":  # a rule between its fields: the policy's own, no field
            return message
        return f"{where.removeprefix('policies.0.')}: {message}"
    return str(exc).splitlines()[0]


def _finished(row: dict) -> bool:
    """Whether a candidate ran and finished every replication."""
    return row["valid"] and not row["n_unfinished"] and row["n"] > 0


def _meets(row: dict, max_pls: float | None, max_memory: float | None) -> bool:
    """Whether a candidate finished every replication within the limits."""
    if not _finished(row):
        return False
    if max_pls is not None and not row["pls_model_mean"] <= max_pls:
        return False
    return max_memory is None or row["memory_frac"] <= max_memory


def _best(tried: dict[tuple, dict]) -> tuple | None:
    """The setting of lowest mean overhead among those within the limits."""
    feasible = [v for v, row in tried.items() if row["meets_limits"]]
    return min(feasible, key=lambda v: tried[v]["overhead_frac_mean"], default=None)


APPROACH_STEPS = 6
"""Steps beyond the coarse grid toward the limits when no setting of it meets them (six
coarse interval steps reach from 10 min down to the search's 1 min)."""


ZERO_LIMIT = 1e-300
"""What a limit of 0 divides by in :func:`_nearest`: the measure itself then orders the
settings (lossless only: the smallest PLS is the nearest)."""


def _nearest(tried: dict[tuple, dict], limits: tuple) -> tuple | None:
    """The finished setting nearest to meeting the limits: the smallest worst ratio of a
    measure to its limit (PLS, memory), then the lowest overhead; None if none finished."""

    def excess(row: dict) -> tuple[float, float]:
        ratios = [
            row[measure] / (limit or ZERO_LIMIT)
            for measure, limit in zip(("pls_model_mean", "memory_frac"), limits, strict=True)
            if limit is not None
        ]
        return max(ratios, default=0.0), row["overhead_frac_mean"]

    done = [v for v, row in tried.items() if _finished(row)]
    return min(done, key=lambda v: excess(tried[v]), default=None)


def _neighbours(best: tuple, found: list[Knob], tried: dict) -> list[tuple]:
    """Settings around ``best``, one knob at a time: halfway to its nearest tried values,
    and one coarse step further when it is the largest or smallest tried (the optimum may
    lie beyond the coarse grid)."""
    out = []
    for i, knob in enumerate(found):
        if knob.refine is None:
            continue
        others = best[:i] + best[i + 1 :]
        seen = sorted({v[i] for v in tried if v[:i] + v[i + 1 :] == others})
        at = seen.index(best[i])
        values = [_middle(best[i], seen[j], knob.refine) for j in (at - 1, at + 1)
                  if 0 <= j < len(seen)]  # fmt: skip
        if knob.refine == "geometric" and at in (0, len(seen) - 1) and len(knob.values) > 1:
            step = knob.values[1] / knob.values[0]
            beyond = best[i] / step if at == 0 else best[i] * step
            if knob.lowest <= beyond <= knob.highest:
                values.append(beyond)
        for value in values:
            out.append(best[:i] + (round(value) if knob.integer else value,) + best[i + 1 :])
    return out


def _around(best: tuple, found: list[Knob], tried: dict) -> list[tuple]:
    """Every combination of each knob's value in ``best`` and its :func:`_neighbours`' values
    for that knob: two limits may pull a setting two ways at once (ECRM under a PLS and a
    memory limit needs a shorter interval *and* a larger k), which one knob at a time never
    reaches."""
    options = [{value} for value in best]
    for setting in _neighbours(best, found, tried):
        for i, value in enumerate(setting):
            options[i].add(value)
    return [s for s in itertools.product(*(sorted(o) for o in options)) if s != best]


def _middle(a: float, b: float, how: str) -> float:
    return math.sqrt(a * b) if how == "geometric" else (a + b) / 2


def _value(value):
    """A knob's value from a table cell (NaN stands for None in a numeric column)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _ran(s: pd.Series) -> str:
    """What ran, when it differs from a setting: CPR's decision with its interval."""
    decision = s.get("cpr_decision")
    if isinstance(decision, str) and decision:
        return f"{decision} @ {short_duration(3600.0 * s['interval_h'])}"
    return "as set"


def _why_none(p: PolicyAdvice, advice: Advice) -> str:
    """Why a policy has no pick, plainly: the closest candidate to the limits."""
    valid = p.candidates[p.candidates["valid"]]
    if valid.empty:
        return "no valid setting: " + str(p.candidates["problem"].iloc[0])
    if valid["n_unfinished"].all():
        return "no setting finished training within run.max_wall_factor"
    reasons = []
    least_pls = valid.loc[valid["pls_model_mean"].idxmin()]
    least_memory = valid.loc[valid["memory_frac"].idxmin()]
    if advice.max_pls is not None and not least_pls["pls_model_mean"] <= advice.max_pls:
        reasons.append(
            f"lowest pls_model {least_pls['pls_model_mean']:.4g} > {advice.max_pls:g} "
            f"(at {p.setting(least_pls)})"
        )
    memory = advice.max_memory_overhead
    if memory is not None and not least_memory["memory_frac"] <= memory:
        reasons.append(f"lowest memory {least_memory['memory_frac']:.3g} > {memory:g}")
    if reasons:
        return "none within the limits: " + "; ".join(reasons)
    return (  # each limit met by some setting, never both by one
        f"no setting within both limits: the lowest pls_model, "
        f"{least_pls['pls_model_mean']:.4g} (at {p.setting(least_pls)}), takes memory "
        f"{least_pls['memory_frac']:.3g}; the lowest memory, {least_memory['memory_frac']:.3g} "
        f"(at {p.setting(least_memory)}), loses pls_model {least_memory['pls_model_mean']:.4g}"
    )


def execute(
    scenario: str | Path | Scenario,
    overrides: Overrides = (),
    out: Path | None = None,
    *,
    force: bool = False,
    argv: list[str] | None = None,
    default: Callable[[Advice, datetime], Path] | None = None,
    **options,
) -> Advice:
    """:func:`advise` (``options``: its keyword arguments) and its results folder ``out``:
    ``candidates.csv``, the frontier figure and ``manifest.json`` (:attr:`Advice.folder`).

    A given ``out`` must be new, empty or an earlier advice's (else ``force``): checked and
    held (:func:`~ftsim.experiments.lock.locked_folder`) before the search starts, so that
    a bad folder fails at once and an interrupted search leaves nothing. Without ``out``,
    the folder is ``default(advice, started)``, by default
    ``run.output/NAME/TIME_advise``.
    """
    from ftsim.experiments.folders import prepare_output
    from ftsim.experiments.lock import locked_folder

    started = datetime.now(UTC)
    advice = None
    if out is None:
        advice = advise(scenario, overrides, **options)
        out = (default or default_folder)(advice, started)
    out = Path(out)
    with locked_folder(out):
        prepare_output(out, "advise", force)
        if advice is None:
            advice = advise(scenario, overrides, **options)
        _write_folder(advice, out, scenario, argv, started)
    return advice


def default_folder(advice: Advice, started: datetime) -> Path:
    """``run.output/<scenario>/<UTC time>_advise``."""
    return Path(advice.output) / advice.scenario / f"{started:%Y%m%dT%H%M%SZ}_advise"


def write(advice: Advice, folder: Path) -> list[Path]:
    """``candidates.csv`` (every evaluated candidate), the frontier figure and ``picks.yaml``
    (:attr:`Advice.picks_scenario`) in ``folder``."""
    from ftsim.experiments.output import atomic_write_text
    from ftsim.experiments.study import write_resolved
    from ftsim.plots.frontier import plot_frontier

    folder.mkdir(parents=True, exist_ok=True)
    table = advice.candidates
    csv = folder / "candidates.csv"
    atomic_write_text(csv, table.to_csv(index=False))  # exact: the values that ran
    written = [csv, *plot_frontier(advice, folder)]
    if advice.picks_scenario is not None:
        written.append(folder / PICKS)
        write_resolved(written[-1], advice.picks_scenario)
    return written


PICKS = "picks.yaml"
"""The file of :attr:`Advice.picks_scenario` in an advice's folder."""


def _write_folder(advice: Advice, folder: Path, scenario, argv, started: datetime) -> None:
    """The files of :func:`write`, then ``manifest.json`` (what ran, the files' SHA-256),
    staged and moved into ``folder`` together, the manifest last."""
    from ftsim.experiments.folders import MANIFEST
    from ftsim.experiments.output import StagedFolder

    with StagedFolder(folder) as staging:  # a full disk or a signal leaves nothing half-done
        staged = write(advice, staging)
        _write_manifest(advice, staging / MANIFEST, staged, scenario, argv, started)
    files = [folder / path.name for path in staged]
    advice.folder, advice.files = folder, [*files, folder / MANIFEST]


def _write_manifest(advice, path: Path, files, scenario, argv, started: datetime) -> None:
    """``manifest.json``: what ran, and the files' SHA-256."""
    from ftsim.experiments.folders import sha256_of
    from ftsim.experiments.output import write_json

    source = f"<scenario {scenario.name}>" if isinstance(scenario, Scenario) else str(scenario)
    manifest = {
        "command": "advise",
        "scenario": advice.scenario,
        "scenario_file": source,
        "argv": argv,
        "reps": advice.reps,
        "seed": advice.seed,
        "max_pls": advice.max_pls,
        "max_memory_overhead": advice.max_memory_overhead,
        "policies": [p.policy for p in advice.policies],
        "started_utc": started.isoformat(),
        "finished_utc": datetime.now(UTC).isoformat(),
        "files": {path.name: sha256_of(path) for path in files},
    }
    write_json(path, manifest)
