"""Cluster operations: where a failed node's replacement comes from (``cluster.operations``).

Failures do not depend on the policy, so the operations of one replication are one pass
over its failure sequence, on streams of their own (:data:`Purpose.OPERATIONS`), shared
by every policy (common random numbers). The pass sets each failure's ``reschedule_s``:
the time until the last of its nodes' replacements is ready, plus ``cluster.reschedule``
(the job's restart). Policies and the engine are unchanged: a policy's recovery awaits the
replacements of the failures it recovers (``Simulation.await_replacements``, charged to
``reschedule``; ECRM's background rebuild waits for them too), so a late replacement
stalls exactly what the policy needs.

The pass is a small discrete-event simulation of the cluster's nodes. Each place of the job
(a trainer or embedding PS, ``node`` in the rest of ftsim) is held by a host:

- a host fails (failure sources below); after ``detection`` the failure is diagnosed: the
  host retires (its ``retirement.failures``-th failure within ``retirement.window``) or
  goes to repair, and a replacement is asked for;
- the replacement is a warm standby (ready after ``swap``), else a spare from the pool (after
  ``provisioning``), else the first host back from repair (after ``provisioning``), the
  requests served first come, first served; the pool's fresh spares go first, then repaired
  hosts (``host_selection``: the one free longest, or the one with the fewest failures);
- repair: automatic, then with probability ``escalation`` manual; a bad host's defect stays
  with probability ``automatic_miss`` (``manual_miss``), else it becomes good; the host
  returns to the pool (or straight to the first waiting request);
- with ``bad_nodes``, each host is bad with probability ``share`` (drawn once per host).

Failure sources with per-node lifetimes (``exponential``, ``weibull``, ``preset``) are
redrawn host by host: a host's lifetime starts when it joins the job (at 0, or when its
replacement is ready) and is the source's lifetime divided by the host's rate factor,
1 / (1 − s + s·m) for a good host and m times that for a bad one: the source's rate stays
the fleet's mean. Every lifetime process of a place restarts with its new host; a place waiting
for its replacement does not fail. Node *i*'s *k*-th lifetime of a source is the one the
source draws without operations, so instant replacements of good hosts reproduce its
failures. Given failures (``scheduled``, ``trace``, ``failure_log``) and domain failures
(``correlated``) strike at their times: one that strikes a place still waiting for its
replacement changes nothing there (it waits for the same replacement). A logged repair time
(a failure log's) is the failed host's repair time.

Interface: :func:`operations_for` gives a replication's :class:`ClusterOperations` (None
when the scenario has none); :meth:`ClusterOperations.failures` is the failure sequence with
its ``reschedule_s`` set, drawn lazily (as far as the engine consumes it: each failure is
yielded once all its replacements are known, which may take simulating ahead); and
:meth:`ClusterOperations.columns` the result columns over the failures the job saw.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ftsim.scenario.schema import UNLIMITED, Operations, Retirement, Scenario
from ftsim.sim.failures import Failure, failure_sequence, lifetime_parts
from ftsim.sim.rng import LazyStream, Purpose

_JOB, _STANDBYS, _SPARES, _DRAWS = range(4)
"""Sub-streams of :data:`Purpose.OPERATIONS` (see :mod:`ftsim.sim.rng`)."""

_READY, _RETURN, _FAILURE, _DIAGNOSIS = range(4)
"""Event kinds, in the order they are handled at the same instant: a replacement ready at a
failure's instant is in place when it strikes; a host back from repair at a diagnosis's
instant can serve it."""

_PER_NODE = 5
"""Uniform variates drawn per node of a failure (automatic and manual repair times,
escalation, miss, swap or provisioning), whatever happens to it, so the draws stay aligned
across scenarios (coupled by inverse transform)."""
_AUTOMATIC, _ESCALATE, _MANUAL, _MISS, _INSTALL = range(_PER_NODE)

_BLOCK_DRAWS = 256
"""Uniform variates drawn from a stream at a time."""


class _Uniforms:
    """Uniform variates of one stream, handed out one at a time (drawn in blocks)."""

    def __init__(self, rng):
        self._rng = rng
        self._block = np.empty(0)
        self._next = 0

    def take(self, n: int) -> list[float]:
        out = []
        while len(out) < n:
            if self._next == len(self._block):
                self._block, self._next = self._rng.random(_BLOCK_DRAWS), 0
            k = min(n - len(out), len(self._block) - self._next)
            out += self._block[self._next : self._next + k].tolist()
            self._next += k
        return out


@dataclass(slots=True, eq=False)
class Host:
    """A machine of the cluster: whether it is bad, when it failed (seconds)."""

    bad: bool
    failures: list[float] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class Fate:
    """What happened to one failed host: its place (``node``), its diagnosis, repair or
    retirement, and when the place's replacement is ready. A failure that strikes a place
    still waiting shares the fate of the failure that emptied it."""

    node: int
    host: Host
    bad: bool = False
    """Whether the host was bad when it failed."""
    diagnosed_s: float = math.nan
    retired: bool = False
    from_repair: bool = False
    """Whether the replacement had to wait for a host back from repair."""
    waited_s: float = 0.0
    """Seconds from the diagnosis until a host was free for the replacement."""
    ready_s: float | None = None
    """When the replacement is ready (None: not known yet; inf: never, the cluster ran out
    of nodes)."""
    draws: list[float] = field(default_factory=list)
    """The failure's uniform variates for this node (``_PER_NODE`` of them)."""


@dataclass(slots=True, eq=False)
class _Record:
    """One failure as the job sees it, with the fate of each of its nodes."""

    time_s: float
    nodes: tuple[int, ...]
    source: str
    fates: list[Fate]
    new: list[Fate]
    """The fates this failure started (not those of places already waiting)."""
    repair_s: float | None
    """A repair time the source logged (a failure log's), seconds."""

    def resolved(self) -> bool:
        return all(f.ready_s is not None for f in self.fates)


class _Lifetimes:
    """One lifetime process of a failure source, node by node: node *i*'s *k*-th lifetime
    (seconds, before the host's rate factor) is the one the source draws without operations
    (:meth:`lifetime_block`: a block per node, all nodes at once, in the same order)."""

    def __init__(self, label: str, source, rng, scenario: Scenario):
        self.label = label
        self._draw = lambda first: source.lifetime_block(rng, scenario, first)
        self.nodes = source.node_range(scenario)
        self._used = np.zeros(len(self.nodes), dtype=np.int64)
        self._blocks: list[np.ndarray] = []

    def next(self, node: int) -> float:
        """The next lifetime of ``node``'s place, seconds."""
        i = node - self.nodes.start
        k = int(self._used[i])
        self._used[i] = k + 1
        while not self._blocks or k >= len(self._blocks) * self._blocks[0].shape[1]:
            self._blocks.append(self._draw(not self._blocks))
        per_block = self._blocks[0].shape[1]
        return float(self._blocks[k // per_block][i, k % per_block])


class _Pool:
    """The spare pool: fresh spares (a count, or unlimited) first, then repaired hosts."""

    def __init__(self, spec: Operations, classes: _Classes):
        self._fresh = math.inf if spec.spares == UNLIMITED else spec.spares
        self._fewest = spec.host_selection == "fewest_failures"
        self._classes = classes
        self._returned: list[Host] = []
        """Repaired hosts, in the order they came back (free longest first)."""

    def take(self) -> Host | None:
        if self._fresh > 0:
            self._fresh -= 1
            return self._classes.host(_SPARES)
        if not self._returned:
            return None
        i = 0
        if self._fewest:
            i = min(range(len(self._returned)), key=lambda j: len(self._returned[j].failures))
        return self._returned.pop(i)

    def put(self, host: Host) -> None:
        self._returned.append(host)


class _Classes:
    """Good or bad per host, from its group's stream (the job's nodes, the standbys, the
    spares), so adding spares does not change the classes of the others."""

    def __init__(self, spec: Operations, seed: int, rep: int):
        bad = spec.bad_nodes
        self.share = bad.share if bad else 0.0
        self.multiplier = bad.multiplier if bad else 1.0
        groups = (_JOB, _STANDBYS, _SPARES) if bad else ()
        self._groups = {g: _Uniforms(LazyStream(seed, rep, Purpose.OPERATIONS, g)) for g in groups}
        mean = 1.0 - self.share + self.share * self.multiplier
        self.stretch = {False: mean, True: mean / self.multiplier}
        """Factor on a source's lifetime for a good and a bad host: the source's rate is the
        fleet's mean, a good host's rate r / (1 − s + s·m), a bad one's m times it."""

    def host(self, group: int) -> Host:
        if not self._groups:
            return Host(False)
        return Host(self._groups[group].take(1)[0] < self.share)


class ClusterOperations:
    """The operations pass of one replication (see the module docstring)."""

    def __init__(self, scenario: Scenario, rep: int, streams: list):
        """``streams``: one per failure source, as the engine makes them."""
        self.scenario = scenario
        spec = scenario.cluster.operations
        self.spec = spec
        seed = scenario.run.seed
        self._classes = _Classes(spec, seed, rep)
        self._draws = _Uniforms(LazyStream(seed, rep, Purpose.OPERATIONS, _DRAWS))
        self._restart = LazyStream(seed, rep, Purpose.RESCHEDULE)
        self._pool = _Pool(spec, self._classes)
        self._standbys = deque(self._classes.host(_STANDBYS) for _ in range(spec.warm_standbys))
        self._waiting: deque[Fate] = deque()
        n = scenario.cluster.n_nodes
        self._hosts: list[Host | None] = [self._classes.host(_JOB) for _ in range(n)]
        self._pending: list[Fate | None] = [None] * n
        """Per node: the fate whose replacement the node waits for (None: held by a host)."""
        self._generation = [0] * n
        """Per node: bumped when its host leaves (outdates the host's lifetime failures)."""
        self._lifetimes: list[_Lifetimes] = []
        given, given_streams = [], []
        for source, rng in zip(scenario.failures, streams, strict=True):
            parts = lifetime_parts(source, rng)
            if parts is None:
                given.append(source)
                given_streams.append(rng)
            else:
                self._lifetimes += [_Lifetimes(*part, scenario) for part in parts]
        self._given = failure_sequence(given, given_streams, scenario)
        """Given and domain failures, merged in time order (they depend on no host)."""
        self._events: list = []
        self._seq = 0
        self._records: deque[_Record] = deque()
        self.seen: list[_Record] = []
        """Every failure yielded, in order."""
        self._pull_given()
        for node in range(n):
            self._start_lifetimes(node, 0.0)

    # -- the failure sequence, with its replacements ----------------------------------

    def failures(self) -> Iterator[Failure]:
        """The replication's failures in time order, each with its ``reschedule_s``."""
        restart = self.scenario.cluster.reschedule
        while True:
            while not self._records or not self._records[0].resolved():
                if not self._step():
                    if not self._records:
                        return
                    self._run_out()
            record = self._records.popleft()
            self.seen.append(record)
            ready_s = max(f.ready_s for f in record.fates)
            delay_s = ready_s - record.time_s + restart.sample(self._restart)
            yield Failure(record.time_s, record.nodes, record.source, delay_s)

    def columns(self, n_seen: int) -> dict[str, float]:
        """Result columns over the first ``n_seen`` failures (those the job saw): failed
        hosts by class, retirements, replacements that waited for a repaired host and the
        total time they waited, hours."""
        fates = [f for record in self.seen[:n_seen] for f in record.new]
        return {
            "n_node_failures_good": sum(not f.bad for f in fates),
            "n_node_failures_bad": sum(f.bad for f in fates),
            "n_retired": sum(f.retired for f in fates),
            "n_waited_for_repair": sum(f.from_repair for f in fates),
            "spare_wait_h": sum(f.waited_s for f in fates) / 3600.0,
        }

    # -- the event loop ----------------------------------------------------------------

    def _push(self, time_s: float, kind: int, rank: int, payload) -> None:
        self._seq += 1
        heapq.heappush(self._events, (time_s, kind, rank, self._seq, payload))

    def _step(self) -> bool:
        """Handle the next event; False when nothing is left to happen."""
        if not self._events:
            return False
        time_s, kind, _, _, payload = heapq.heappop(self._events)
        if kind == _FAILURE:
            self._fail(time_s, *payload)
        elif kind == _DIAGNOSIS:
            self._diagnose(time_s, payload)
        elif kind == _RETURN:
            self._return(time_s, *payload)
        else:
            self._ready(time_s, *payload)
        return True

    def _run_out(self) -> None:
        """Nothing is left to happen and replacements are still awaited: the cluster has no
        node left to give (retirements emptied it); they never come."""
        for fate in self._waiting:
            fate.ready_s = fate.waited_s = math.inf
        self._waiting.clear()

    def _pull_given(self) -> None:
        failure = next(self._given, None)
        if failure is not None:
            self._push(failure.time_s, _FAILURE, -1, (failure, None))

    def _start_lifetimes(self, node: int, time_s: float) -> None:
        """The host of ``node`` joined at ``time_s``: its next failure, the earliest of its
        lifetime processes (each draws its next lifetime)."""
        stretch = self._classes.stretch[self._hosts[node].bad]
        first = None
        for rank, process in enumerate(self._lifetimes):
            if node in process.nodes:
                at = time_s + process.next(node) * stretch
                if first is None or at < first[0]:
                    first = (at, rank, process.label)
        if first is not None:
            at, rank, label = first
            failure = Failure(at, (node,), label)
            self._push(at, _FAILURE, rank, (failure, self._generation[node]))

    def _fail(self, time_s: float, failure: Failure, generation: int | None) -> None:
        if generation is None:
            self._pull_given()
        elif generation != self._generation[failure.nodes[0]]:
            return  # the host it would have struck had already left
        detection = self._draws.take(1)[0]
        fates, new = [], []
        for node in failure.nodes:
            draws = self._draws.take(_PER_NODE)
            host = self._hosts[node]
            if host is None:  # still waiting for its replacement
                fates.append(self._pending[node])
                continue
            fate = Fate(node, host, bad=host.bad, draws=draws)
            host.failures.append(time_s)
            self._hosts[node] = None
            self._pending[node] = fate
            self._generation[node] += 1
            fates.append(fate)
            new.append(fate)
        record = _Record(time_s, failure.nodes, failure.source, fates, new, failure.reschedule_s)
        self._records.append(record)
        if new:
            diagnosed = time_s + self.spec.detection.quantile(detection)
            self._push(diagnosed, _DIAGNOSIS, 0, record)

    def _diagnose(self, time_s: float, record: _Record) -> None:
        repair, retirement = self.spec.repair, self.spec.retirement
        for fate in record.new:
            fate.diagnosed_s = time_s
            host, u = fate.host, fate.draws
            fate.retired = retires(host, record.time_s, retirement)
            if not fate.retired:
                escalated = u[_ESCALATE] < repair.escalation
                if record.repair_s is not None:
                    duration = record.repair_s
                else:
                    duration = repair.automatic.quantile(u[_AUTOMATIC])
                    if escalated:
                        duration += repair.manual.quantile(u[_MANUAL])
                miss = repair.manual_miss if escalated else repair.automatic_miss
                fixed = u[_MISS] >= miss
                self._push(time_s + duration, _RETURN, 0, (host, fixed))
            self._replace(fate, time_s)

    def _replace(self, fate: Fate, time_s: float) -> None:
        """Ask for a replacement for ``fate``'s node at ``time_s``."""
        install = fate.draws[_INSTALL]
        if self._standbys:
            host, delay = self._standbys.popleft(), self.spec.swap.quantile(install)
        else:
            host = self._pool.take()
            if host is None:
                self._waiting.append(fate)
                return
            delay = self.spec.provisioning.quantile(install)
        self._install(fate, host, time_s + delay)

    def _return(self, time_s: float, host: Host, fixed: bool) -> None:
        if fixed:
            host.bad = False
        if not self._waiting:
            self._pool.put(host)
            return
        fate = self._waiting.popleft()
        fate.from_repair = True
        fate.waited_s = time_s - fate.diagnosed_s
        delay = self.spec.provisioning.quantile(fate.draws[_INSTALL])
        self._install(fate, host, time_s + delay)

    def _install(self, fate: Fate, host: Host, ready_s: float) -> None:
        fate.ready_s = ready_s
        self._push(ready_s, _READY, 0, (fate.node, host))

    def _ready(self, time_s: float, node: int, host: Host) -> None:
        self._hosts[node] = host
        self._pending[node] = None
        self._start_lifetimes(node, time_s)


def retires(host: Host, time_s: float, rule: Retirement | None) -> bool:
    """Whether ``host``, failed at ``time_s`` (its last failure), retires by ``rule``: it
    failed ``rule.failures`` times within ``rule.window`` up to now, this failure included."""
    if rule is None:
        return False
    since = time_s - rule.window
    return sum(t >= since for t in host.failures) >= rule.failures


def operations_for(scenario: Scenario, rep: int, streams: list) -> ClusterOperations | None:
    """Replication ``rep``'s operations pass, on the failure sources' ``streams`` (None
    when the scenario has no ``cluster.operations``)."""
    if scenario.cluster.operations is None:
        return None
    return ClusterOperations(scenario, rep, streams)
