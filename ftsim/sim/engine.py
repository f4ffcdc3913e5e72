"""The SimPy model of one training job under failures, at phase granularity.

The job is one SimPy process that alternates phases: compute up to the next policy action
(a checkpoint) or the end of training, run the action, and when a failure interrupts it,
run the policy's recovery. Compute phases are a single timeout whose length comes from
arithmetic on progress, as in SimPy's machine-shop example, so a replication costs
O(failures + checkpoints) events however many iterations the job has. When the policy's
slowdown changes (``sim.replan()``: a background persist or rebuild range starts or ends),
the compute phase under way ends at that instant and the next starts at the new rate: the
job is resumed from its wait by an event of its own, not interrupted (a re-plan is no
failure; ECRM's rebuilds re-plan some 100 times a replication, and as interrupts, raised
into the job and caught, the re-plans made its replications 8% slower).

A second process injects failures drawn in advance from their own random stream. A failure
that arrives while the job is already recovering is queued with the others not yet
recovered, and the recovery restarts for all of them (the SimPy pitfall of an interrupt
inside an ``except`` block cannot occur: the interrupt is always caught at the loop).

Time accounting: every wall-clock second belongs to exactly one category.

- ``compute``: training at the failure-free rate; at the end, the part that counts toward
  the final model is ``ideal`` (= the job's failure-free time) and the rest is ``lost``
  (work re-executed after a rollback);
- ``save``, ``load``, ``reschedule``: phases charged by the policy;
- ``degraded``, ``other``: extra time while training slower than the failure-free rate
  (recovery in the background; parity or logging traffic), from ``policy.slowdown()``.

A policy made of parts (``composed``) also attributes time to them: phases charged with a
``part`` name, slowdowns from ``policy.slowdown_by_part()`` and rollbacks through
:meth:`Simulation.rollback_to` with ``part`` are summed per part and category in
``charged_parts`` (result columns ``<part>/<category>_h``); the categories' totals are
unchanged by it.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import simpy

from ftsim.scenario.schema import Scenario
from ftsim.sim.accounting import CATEGORIES, PART_CATEGORIES
from ftsim.sim.cluster import ClusterNetwork, SharedRoutes, StateLayout
from ftsim.sim.failures import Failure, FailureDraws
from ftsim.sim.nodes import node_name

_PROGRESS_EPS_S = 1e-9
"""Progress within this many seconds of a target counts as reaching it (float rounding)."""


class _Replanned(simpy.Event):
    """The training rate changed (a background activity started or ended): the job's compute
    phase is planned again at this instant, after what is already due now. Scheduled as
    SimPy schedules an interrupt (already triggered, ahead of the instant's ordinary
    events), so re-plans keep the order they had as interrupts; its callback
    (:meth:`Simulation._replanned`) resumes the job from its wait as SimPy's interrupt does,
    but with this event's value instead of an exception thrown into the job."""

    def __init__(self, sim: Simulation):
        self.env = sim.env
        self.callbacks = [sim._replanned]
        self._ok = True
        self._value = None
        sim.env.schedule(self, simpy.events.URGENT)


class Phase(NamedTuple):
    """One interval of the timeline: [start_s, end_s) spent in ``category`` (a breakdown
    category, a compute kind, or a background activity such as ``persist``), every fact a
    field of its own (nothing is parsed back out of ``detail``). A named tuple: immutable,
    and made several times per checkpoint, at half the cost of a frozen dataclass."""

    start_s: float
    end_s: float
    category: str
    activity: str
    """What was done: the category, unless the policy names it (a log ``replay`` is
    charged to ``load``)."""
    part: str | None = None
    """The part of a composed policy that did it (None: the policy as a whole)."""
    nodes: tuple[int, ...] = ()
    """Nodes a background activity occupies (e.g. the replacements a rebuild restores)."""
    detail: str = ""
    """Free text for people (the timeline's ``detail`` column, after the part's name)."""

    @property
    def text(self) -> str:
        """The ``detail`` column of ``timeline.csv``: ``"<part>: <detail>"`` for a part."""
        return f"{self.part}: {self.detail}" if self.part is not None else self.detail


_phase = partial(tuple.__new__, Phase)
"""A :class:`Phase` from a tuple of all its fields (no defaults, no keyword handling: the
timeline gets several per checkpoint)."""


class Simulation:
    """One replication of one policy: build, run, collect."""

    def __init__(
        self,
        scenario: Scenario,
        rep: int,
        policy: Any,
        layout: StateLayout,
        routes: SharedRoutes | None = None,
        record_flows: bool = False,
        failures: FailureDraws | None = None,
        timeline: bool = True,
        model_events: bool = True,
    ):
        """``policy``: the policy's runtime for this replication (a
        :class:`ftsim.policies.base.Policy`, given by the runner: the engine knows no policy
        kinds); ``layout``: the job's state per node; ``routes``: the links and routes the
        replications of this scenario × policy share (:class:`SharedRoutes`; a new one if
        None). ``record_flows``: keep every finished flow in ``sim.net.net.records`` (for
        trace export, ``ftsim trace``); it changes no result, only costs memory.
        ``failures``: the replication's failure draws, shared with the other policies
        simulated on it (drawn here if None). ``timeline``, ``model_events``: record the
        phases (for ``timeline.csv``, traces, plots) and what the policy did to the model
        (for the co-simulation); a run asks for them only in the replications that use
        them (they change nothing else: no result depends on them)."""
        self.scenario = scenario
        self.rep = rep
        self.failures = failures or FailureDraws(scenario, rep)
        """The failures of this replication, drawn as far as the run goes."""
        self.operations = self.failures.operations
        """The cluster's operations (None without ``cluster.operations``): they set when each
        failure's replacements are ready."""
        self.env = simpy.Environment()
        self.work_s = scenario.job.work_s
        self.layout = layout
        self.net = ClusterNetwork(self.env, scenario.cluster, layout, routes, record_flows)
        """The cluster's links: every transfer a policy makes is a set of flows on it."""
        self.policy = policy
        self.progress_s = 0.0
        """Compute seconds of training that the current model state reflects."""
        self.computed_s = 0.0
        """Compute seconds performed, including work later rolled back."""
        self.reached_s = 0.0
        """Highest progress reached so far, compute seconds: compute below it is redone work."""
        self.charged = dict.fromkeys(CATEGORIES, 0.0)
        self.charged_parts = {
            part: dict.fromkeys(PART_CATEGORIES, 0.0) for part in self.policy.part_names
        }
        """Seconds per category charged to each part of a composed policy."""
        self.timeline: list[Phase] | None = [] if timeline else None
        """The phases in the order they ended (None: not recorded)."""
        self.failures_seen: list[Failure] = []
        self.model_events: list | None = [] if model_events else None
        """What the policy did to the model (:mod:`ftsim.policies.events`), in order (None:
        not recorded)."""
        self._unrecovered: list[Failure] = []
        self._computing: tuple | None = None
        """While computing: (wall start s, progress at start s, wall seconds per compute s,
        the policy's slowdowns, and per part)."""
        self._open: tuple | None = None
        """While the job spends time in a phase (:meth:`phase`, :meth:`transfer`,
        :meth:`wait`): the arguments of its :meth:`_charge`, for a cut-off that stops it."""
        self._job: simpy.Process | None = None
        self.completed = False
        """Whether training finished before ``run.max_wall_factor`` × the failure-free time."""

    # -- building blocks for policies (ftsim.sim.context.PolicyContext) ----------------

    @property
    def now(self) -> float:
        """Wall-clock seconds since the job started."""
        return self.env.now

    def background(self, activity) -> simpy.Process:
        """Run the generator ``activity`` beside the job (a persist, a rebuild); it may be
        interrupted with ``process.interrupt()``."""
        return self.env.process(activity)

    def event(self) -> simpy.Event:
        """An event a policy fires itself (``event.succeed()``), e.g. rows reloaded."""
        return self.env.event()

    def timeout(self, delay_s: float) -> simpy.Timeout:
        """An event ``delay_s`` from now (for background activities: the job's own time is
        charged through phases)."""
        return self.env.timeout(delay_s)

    def is_active(self, process: simpy.Process | None) -> bool:
        """Whether ``process`` is the one running now (a background activity ending)."""
        return process is not None and process is self.env.active_process

    def phase(
        self,
        category: str,
        duration_s: float,
        detail: str = "",
        part: str | None = None,
        activity: str | None = None,
    ):
        """Spend ``duration_s`` in ``category`` (``save``/``load``/``reschedule``/...), on
        behalf of ``part`` of a composed policy if given, doing ``activity`` (default: the
        category).

        If a failure interrupts it, the time already spent is still charged.
        """
        start = self.env.now
        self._open = opened = (category, start, detail, part, activity)
        try:
            if duration_s > 0:
                yield self.env.timeout(duration_s)
        finally:
            self._close(opened)

    def transfer(
        self,
        category: str,
        flows,
        detail: str = "",
        at_least_s: float = 0.0,
        part: str | None = None,
        activity: str | None = None,
    ):
        """Move ``flows`` (from ``sim.net``: e.g. ``sim.net.full_save()``) through the network
        while training stalls, charged to ``category``. The flows share links with whatever
        else is moving; if a failure interrupts the transfer, its flows are cancelled and
        the time already spent stays charged. ``at_least_s``: work that overlaps the bytes
        (e.g. applying a log while reading it) and makes the phase last at least that long.
        ``activity``: what the phase and its flows do (default: the category)."""
        start = self.env.now
        transfer = self.net.start(flows, category, detail, activity)
        at_least = self.env.timeout(at_least_s) if at_least_s > 0 else None
        self._open = opened = (category, start, detail, part, activity)
        try:
            yield transfer
            if at_least is not None and not at_least.processed:
                yield at_least  # the later of the two, without a condition event
        except simpy.Interrupt:
            self.net.cancel(transfer)
            raise
        finally:
            self._close(opened)

    def await_replacements(self, failures: list[Failure]):
        """Reschedule phase: until the last failed node's replacement is ready (each failure's
        nodes are replaced ``reschedule_s`` after it)."""
        ready_s = max(f.time_s + f.reschedule_s for f in failures)
        yield from self.phase("reschedule", ready_s - self.env.now, "replace failed nodes")

    def wait(self, category: str, event: simpy.Event, detail: str = "", part: str | None = None):
        """Stall until ``event`` (e.g. a background transfer) completes, charged to ``category``."""
        self._open = opened = (category, self.env.now, detail, part, None)
        try:
            yield event
        finally:
            self._close(opened)

    def replan(self) -> None:
        """Tell the job that ``policy.slowdown()`` changed; it re-plans its compute phase."""
        if self._computing is not None and self._job is not None and self._job.is_alive:
            _Replanned(self)

    def rollback_to(self, progress_s: float, part: str | None = None) -> None:
        """Discard training progress back to ``progress_s`` (it will be re-executed), on
        behalf of ``part`` of a composed policy if given (the redone compute is its ``lost``)."""
        if part is not None and progress_s < self.progress_s:
            self.charged_parts[part]["lost"] += self.progress_s - progress_s
        self.progress_s = min(self.progress_s, progress_s)

    def progress_now_s(self) -> float:
        """Training progress at this instant, compute seconds: ``progress_s`` plus the part of
        a compute phase under way (a background activity, such as a CheckFreq persist that
        commits, acts in the middle of one)."""
        if self._computing is None:
            return self.progress_s
        start, progress, factor, _, _ = self._computing
        return progress + (self.env.now - start) / factor

    def model_event(self, event_type: type, **fields) -> None:
        """Record what the policy does to the model now, at the current training progress
        (an event of :mod:`ftsim.policies.events` or a policy's own subclass)."""
        if self.model_events is not None:
            self.model_events.append(event_type(self.progress_now_s(), **fields))

    def record(
        self,
        start_s: float,
        end_s: float,
        category: str,
        detail: str = "",
        part: str | None = None,
        nodes: tuple[int, ...] = (),
    ) -> None:
        """Add an interval to the timeline (for background activities, on ``nodes``)."""
        if self.timeline is not None:
            self.timeline.append(Phase(start_s, end_s, category, category, part, nodes, detail))

    # -- the job -----------------------------------------------------------------------

    def _charge(
        self,
        category: str,
        start: float,
        detail: str,
        part: str | None = None,
        activity: str | None = None,
    ) -> None:
        now = self.env.now
        elapsed = now - start
        self.charged[category] += elapsed
        if part is not None:
            self.charged_parts[part][category] += elapsed
        if elapsed > 0 and self.timeline is not None:
            self.timeline.append(
                _phase((start, now, category, activity or category, part, (), detail))
            )

    def _start_compute(self, target_s: float) -> simpy.Timeout:
        """Begin a compute phase toward progress ``target_s`` at the policy's current
        slowdown; returns the timeout at its planned end (the job waits for it, then calls
        :meth:`_end_compute` however the wait ends)."""
        policy, env = self.policy, self.env
        extras = policy.slowdown()
        by_part = policy.slowdown_by_part() if self.charged_parts else None
        factor = 1.0 + sum(extras.values())
        begin_s = self.progress_s
        self._computing = (env.now, begin_s, factor, extras, by_part)
        return env.timeout((target_s - begin_s) * factor)

    def _end_compute(self) -> None:
        """End the compute phase now (reached, re-planned or interrupted): the progress it
        made, its slowdowns charged, its timeline."""
        start, begin_s, factor, extras, by_part = self._computing
        self._computing = None
        now = self.env.now
        base = (now - start) / factor
        progress = self.progress_s = self.progress_s + base
        self.computed_s += base
        if extras:
            charged = self.charged
            for category, extra in extras.items():
                charged[category] += base * extra
        if by_part:
            for part, part_extras in by_part.items():
                charged = self.charged_parts[part]
                for category, extra in part_extras.items():
                    charged[category] += base * extra
        reached = self.reached_s
        if self.timeline is not None:
            self._record_compute(start, now, begin_s, progress, reached, factor, extras)
        if progress > reached:
            self.reached_s = progress

    def _record_compute(self, start, now, begin_s, progress, reached, factor, extras) -> None:
        """The timeline of a compute phase [start, now) that took progress from ``begin_s``
        to ``progress`` at ``factor`` wall seconds per compute second: work below
        ``reached`` (done before a rollback) is ``redo``, the rest ``compute`` (or
        ``degraded`` while degraded reads slow it)."""
        # min, max as the builtins pick (the first of equals: -0.0 stays -0.0)
        redo_end = start + ((reached if reached < progress else progress) - begin_s) * factor
        if start > redo_end:
            redo_end = start
        if now < redo_end:
            redo_end = now
        timeline = self.timeline
        if redo_end > start:  # re-executing work that a rollback discarded
            timeline.append(_phase((start, redo_end, "redo", "redo", None, (), "")))
        if now > redo_end:
            kind = "degraded" if extras and extras.get("degraded") else "compute"
            timeline.append(_phase((redo_end, now, kind, kind, None, (), "")))

    def _run_job(self):
        policy = self.policy
        policy.start(self)
        work_s = self.work_s
        done_s = work_s - _PROGRESS_EPS_S
        unrecovered = self._unrecovered
        while True:
            try:
                if unrecovered:
                    yield from policy.recover(self, list(unrecovered))
                    unrecovered.clear()
                    continue
                if self.progress_s >= done_s:
                    return
                due = policy.next_action_at()
                target = work_s if work_s < due else due
                if self.progress_s < target - _PROGRESS_EPS_S:
                    wait = self._start_compute(target)
                    try:
                        yield wait
                    finally:
                        if self._computing is not None:  # not ended by the cut-off
                            self._end_compute()
                    if not wait.processed:  # re-planned (:meth:`_replanned`): plan again
                        continue
                if self.progress_s < target:  # float rounding: snap, keeping lost = 0
                    self.computed_s += target - self.progress_s
                    self.progress_s = target
                if due <= done_s:
                    yield from policy.act(self)
            except simpy.Interrupt as interrupt:
                cause = interrupt.cause
                if isinstance(cause, Failure):
                    self.failures_seen.append(cause)
                    unrecovered.append(cause)
                    policy.on_failure(self, cause)

    def _replanned(self, event: _Replanned) -> None:
        """Resume the job from the compute phase it waits for, if it still does (the phase
        may have ended at this instant before the re-plan came due: then its next phase
        reads the new rate anyway). The job then finds its wait unfinished and plans
        again from the top of its loop."""
        job, computing = self._job, self._computing
        if computing is None or not job.is_alive:
            return
        job.target.callbacks.remove(job._resume)
        job._resume(event)

    def _inject_failures(self):
        env, job, draws = self.env, self._job, self.failures
        index = 0
        while (failure := draws.get(index)) is not None:
            index += 1
            if failure.time_s > env.now:
                yield env.timeout(failure.time_s - env.now)
            if not job.is_alive:
                return
            job.interrupt(failure)

    def run(self) -> Simulation:
        self._job = self.env.process(self._run_job())
        self.env.process(self._inject_failures())
        deadline = self.env.timeout(self.work_s * self.scenario.run.max_wall_factor)
        self.env.run(until=self._job | deadline)
        self.completed = not self._job.is_alive
        if not self.completed:
            self._cut()
        return self

    def _close(self, opened: tuple) -> None:
        """End the phase ``opened`` (the arguments of its :meth:`_charge`) now: charge it,
        unless the cut-off did (then the job's generator, closed when it is collected,
        ends it again: charged twice, a compute phase raised on ending)."""
        if self._open is opened:
            self._open = None
            self._charge(*opened)

    def _cut(self) -> None:
        """The job stopped at the cut-off (``run.max_wall_factor``): charge the compute or
        the phase under way up to it, so that an unfinished row adds up too (wall = progress
        + the categories; its phase waiting for a host that never came was left out)."""
        if self._computing is not None:
            self._end_compute()
        if self._open is not None:
            self._close(self._open)

    # -- results -----------------------------------------------------------------------

    @property
    def wall_s(self) -> float:
        return self.env.now

    def breakdown_s(self) -> dict[str, float]:
        """Seconds per category; ``lost`` is the compute that was rolled back."""
        out = dict(self.charged)
        out["lost"] = self.computed_s - self.progress_s
        return out

    def row(self) -> dict:
        """The result row in hours (the tidy schema of ``runs.csv``)."""
        breakdown = self.breakdown_s()
        ideal_h = self.work_s / 3600.0
        wall_h = self.wall_s / 3600.0
        row = {
            "scenario": self.scenario.name,
            "policy": self.policy.params.label,
            "kind": self.policy.params.kind,
            "rep": self.rep,
            "seed": self.scenario.run.seed,
            "ideal_h": ideal_h,
            "wall_h": wall_h,
            "overhead_frac": (wall_h - ideal_h) / ideal_h if self.completed else math.inf,
            "ettr": (self.work_s if self.completed else self.progress_s) / self.wall_s,
            "completed": self.completed,
        }
        row.update({f"{c}_h": breakdown[c] / 3600.0 for c in CATEGORIES})
        row["n_failures"] = len(self.failures_seen)
        row["n_checkpoints"] = self.policy.n_checkpoints
        row["n_failed_nodes"] = sum(len(f.nodes) for f in self.failures_seen)
        if self.operations is not None:
            row.update(self.operations.columns(len(self.failures_seen)))
        for part, charged in self.charged_parts.items():
            row.update({f"{part}/{c}_h": charged[c] / 3600.0 for c in PART_CATEGORIES})
        row.update(self.policy.result_columns())
        return row

    def timeline_rows(self) -> list[dict]:
        """The rows of ``timeline.csv`` (phases and failures, by start and end)."""
        if self.timeline is None:
            raise ValueError(f"replication {self.rep} was simulated without its timeline")
        rows = [
            {
                "rep": self.rep,
                "policy": self.policy.params.label,
                "start_h": p.start_s / 3600,
                "end_h": p.end_s / 3600,
                "kind": p.category,
                "detail": p.text,
            }
            for p in self.timeline
        ]
        rows += [
            {
                "rep": self.rep,
                "policy": self.policy.params.label,
                "start_h": f.time_s / 3600,
                "end_h": f.time_s / 3600,
                "kind": "failure",
                "detail": " ".join(node_name(self.scenario.cluster.trainers, n) for n in f.nodes),
            }
            for f in self.failures_seen
        ]
        rows.sort(key=lambda r: (r["start_h"], r["end_h"]))
        return rows
