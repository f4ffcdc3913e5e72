"""Flow-level network and storage model: links shared by max-min fairness.

A transfer (a checkpoint shard written to storage, a shard read back, dense state copied
from a replica) is a *flow* of ``size_B`` bytes over a *route*, a tuple of :class:`Link`.
Links stand for whatever limits bandwidth, e.g. for node ``i`` writing to storage::

    route = (nic_send[i], storage_write_node[i], rack_uplink[rack(i)], storage_write)

with each node's NIC send and receive links, the storage's per-node limits, optional rack
uplinks (capacity = nodes per rack × NIC / oversubscription) and the storage's aggregate
read and write links, all in bytes/s.

At every instant the active flows share the links by max-min fairness (no flow can get
faster without slowing a flow that is no faster than it), computed by progressive filling
(:func:`max_min_rates`) as in SimGrid's flow-level model. Rates change only when a flow
starts, ends or is cancelled, or a link's capacity changes; in between each flow moves at
a constant rate. So the network keeps ONE pending SimPy wake-up, at the earliest
completion, and replaces it at every change (a superseded wake-up still fires but is
recognised as stale and ignored): the cost grows with the number of flow events, never
with bytes. A transfer that starts on an idle network (most do: a save, a reload) runs on
a schedule computed when it starts, as one SimPy event, and becomes active flows only if
anything else happens before it ends; what it does alone is kept per capacity state
(:class:`Topology`), so a repeated transfer costs O(1). When the general model does take
over, a run of flows of a transfer that are one flow replicated (every PS writing its shard:
the same bytes, each over its own NIC, all into the shared storage) moves as one flow with
a multiplicity while nothing breaks their symmetry (:func:`symmetric_runs`,
:meth:`Network._entries_of`): max-min gives them equal rates, so this is exact, and a
rate computation costs O(groups), not O(flows). A transfer may also be given in groups
(:class:`GroupedFlows` of :class:`FlowGroup`, e.g. every survivor sending to each of several
replacements, the groups sharing the survivors' NICs): alone, it is planned in O(groups)
(:meth:`Network._plan_blocks`), the same exactly. See ``docs/model.md``, "Network and
storage: flow-level model".

Numerics: remaining bytes are advanced as ``remaining_B -= rate_Bps * (now - last_s)``. A
flow is finished when ``remaining_B <= DONE_REL * size_B`` or when the rest would take less
than ``CLOCK_ULPS`` units in the last place of the simulation clock; without this, float
rounding could leave a flow with 1e-12 bytes and a wake-up that never advances the clock.

A flow whose route contains a zero-capacity link gets rate 0 and never completes until
that capacity returns (:meth:`Network.set_capacity`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import simpy

DONE_REL = 1e-12
"""A flow with at most this fraction of its size left is finished (dimensionless)."""
CLOCK_ULPS = 4
"""A flow whose rest would take less than this many clock ulps is finished."""


_INDEX = operator.attrgetter("index")
"""A link's index (mapped over a column in C)."""

_MEMO_SIZE = 4096
"""Entries a memo table of a :class:`Topology` keeps before it starts afresh."""
_CHECKED_SIZE = 65536
"""Routes a :class:`Topology` remembers as checked before it starts afresh (a run at 100×
nodes meets a new route for every survivor of every rebuilt shard: ~33,000 after 200
replications, and more)."""
_STATES_SIZE = 65536
"""Capacity states a :class:`Topology` remembers before it starts afresh."""


def max_min_rates(
    routes: Sequence[Sequence[int]],
    capacities: Sequence[float],
    weights: Sequence[Sequence[int] | None] | None = None,
) -> list[float]:
    """Max-min fair rates (bytes/s) of flows over links, by progressive filling.

    ``routes[f]`` lists the link indices flow ``f`` crosses (no repeats); ``capacities[l]``
    is link ``l``'s capacity in bytes/s (finite, >= 0). Progressive filling raises every
    unfrozen flow's rate together; when a link saturates, the flows crossing it freeze at
    the current level. Instead of raising the level in small steps it jumps to the next
    saturation: link ``l`` saturates at level ``(capacity_l - frozen_l) / unfrozen_l``
    (``frozen_l``: bytes/s given to its frozen flows, ``unfrozen_l``: how many are not),
    kept in a heap and updated only when flows crossing ``l`` freeze. Cost
    O(Σ route lengths × log links). A flow with an empty route is unconstrained (``inf``).

    ``weights`` (None: every flow counts once on every link): ``weights[f]`` gives, per link
    of ``routes[f]``, how many member flows ``f`` stands for there (None: 1 each), as a
    symmetric group (:meth:`Network.transfer`) does: its members share a link (weight m) or
    each cross their own copy of it (weight 1, the copies' capacities equal; groups that
    cross the same copies, one member of each per copy, each count 1 there). Every member
    gets the group's rate, and the arithmetic is that of the members one by one: groups
    frozen by their own copies add to a shared link what the copies' freezes would, one
    copy after the other (:func:`_frozen_by_copies`; the same floats, up to exact ties
    between saturation levels).
    """
    if weights is not None and any(w is not None for w in weights):
        return _max_min_weighted(routes, capacities, weights)
    users: dict[int, list[int]] = {}
    for flow, route in enumerate(routes):
        for link in route:
            users.setdefault(link, []).append(flow)
    unfrozen = {link: len(flows) for link, flows in users.items()}
    frozen_Bps = dict.fromkeys(users, 0.0)
    heap = [(capacities[link] / n, link, n) for link, n in unfrozen.items()]
    heapq.heapify(heap)
    rates = [math.inf] * len(routes)
    while heap:
        level, link, n = heapq.heappop(heap)
        if unfrozen[link] != n:
            continue  # superseded: a flow crossing this link froze since the entry was pushed
        newly: dict[int, int] = {}  # link -> how many of its flows freeze at this level
        for flow in users[link]:
            if rates[flow] == math.inf:
                rates[flow] = level
                for other in routes[flow]:
                    newly[other] = newly.get(other, 0) + 1
        for other, count in newly.items():
            left = unfrozen[other] = unfrozen[other] - count
            frozen_Bps[other] += count * level
            if left:
                share = (capacities[other] - frozen_Bps[other]) / left
                # In exact arithmetic share >= level; rounding must not lower the level.
                heapq.heappush(heap, (share if share > level else level, other, left))
    return rates


def _max_min_weighted(routes, capacities, weights) -> list[float]:
    """:func:`max_min_rates` of flows standing for several members (``weights``)."""
    weight_of = [
        dict(zip(route, ws, strict=True)) if ws is not None else dict.fromkeys(route, 1)
        for route, ws in zip(routes, weights, strict=True)
    ]
    users: dict[int, list[int]] = {}
    unfrozen: dict[int, int] = {}
    for flow, mine in enumerate(weight_of):
        for link, w in mine.items():
            users.setdefault(link, []).append(flow)
            unfrozen[link] = unfrozen.get(link, 0) + w
    frozen_Bps = dict.fromkeys(users, 0.0)
    heap = [(capacities[link] / n, link, n) for link, n in unfrozen.items()]
    heapq.heapify(heap)
    rates = [math.inf] * len(routes)
    while heap:
        level, link, n = heapq.heappop(heap)
        if unfrozen[link] != n:
            continue
        newly: dict[int, int] = {}  # link -> members freezing at this level, added at once
        singly: dict[int, tuple[int, int]] = {}  # link -> (c, m): c members m times in turn
        for flow in users[link]:
            if rates[flow] == math.inf:
                rates[flow] = level
                mine = weight_of[flow]
                by_own_copies = mine[link] == 1
                for other, w in mine.items():
                    if by_own_copies and w > 1:  # one member per copy of ``link``, w copies
                        singly[other] = (singly.get(other, (0, w))[0] + 1, w)
                    else:
                        newly[other] = newly.get(other, 0) + w
        for other, count in newly.items():
            left = unfrozen[other] = unfrozen[other] - count
            frozen_Bps[other] += count * level
            if left:
                share = (capacities[other] - frozen_Bps[other]) / left
                heapq.heappush(heap, (share if share > level else level, other, left))
        for other, (count, copies) in singly.items():
            frozen = frozen_Bps[other] = _frozen_by_copies(frozen_Bps[other], count, copies, level)
            left = unfrozen[other] = unfrozen[other] - count * copies
            if left:
                share = (capacities[other] - frozen) / left
                heapq.heappush(heap, (share if share > level else level, other, left))
    return rates


def _frozen_by_copies(frozen_Bps: float, count: int, copies: int, level: float) -> float:
    """A link's frozen bytes/s once ``copies`` copies of a link have each frozen ``count``
    members crossing it at ``level``, one copy after the other: as many additions, as the
    members one by one make them (one addition of the total would round differently)."""
    step = count * level
    for _ in range(copies):
        frozen_Bps += step
    return frozen_Bps


def symmetric_runs(specs: Sequence[tuple[float, tuple]]) -> list[tuple[int, int, tuple]]:
    """Runs ``[a, b)`` of at least two consecutive flows ``(size_B, route)`` that are one flow
    replicated: equal sizes and routes of equal length that, at each position, cross either
    one link shared by all of them or each a link of its own (e.g. every PS writing its
    shard: its own NIC, the storage they share). Returns ``(a, b, own)`` with ``own`` the
    positions of the members' own links. Whether a run may move as one flow also depends on
    the capacities and the other flows (:meth:`Network._group_ok`)."""
    runs = []
    n, i = len(specs), 0
    while i < n - 1:
        size, first = specs[i]
        size2, second = specs[i + 1]
        if size2 != size or len(second) != len(first) or size <= 0:
            i += 1
            continue
        own = tuple(p for p, link in enumerate(first) if second[p] is not link)
        shared = {first[p] for p in range(len(first)) if p not in own}
        seen = {first[p] for p in own}
        if seen & shared:
            i += 1
            continue
        j = i + 1
        while j < n:
            size_j, route = specs[j]
            if size_j != size or len(route) != len(first):
                break
            if any(route[p] is not first[p] for p in range(len(first)) if p not in own):
                break
            mine = {route[p] for p in own}
            if len(mine) != len(own) or not mine.isdisjoint(seen) or not mine.isdisjoint(shared):
                break
            seen |= mine
            j += 1
        if j - i >= 2:
            runs.append((i, j, own))
        i = j
    return runs


class Link:
    """A bandwidth limit shared by the flows that cross it; made by :meth:`Network.link`.

    Immutable: ``nominal_Bps`` is the capacity it was created with; what a network's flows
    get now (lower while background load or a stream takes some) is
    :meth:`Network.capacity_of`. Links belong to a :class:`Topology`, which networks of many
    replications can share.
    """

    __slots__ = ("name", "nominal_Bps", "index")

    def __init__(self, name: str, capacity_Bps: float, index: int):
        self.name = name
        self.nominal_Bps = capacity_Bps
        self.index = index
        """Position in the topology (and in each network's capacity list)."""

    def __repr__(self) -> str:
        return f"Link({self.name!r}, {self.nominal_Bps:g} B/s)"


class FlowGroup:
    """Flows of ``size_B`` bytes each, one per member, given at once: member k crosses
    ``columns[p][k]`` for each column p, then the links of ``shared``, its route being
    ``(*(column[k] for column in columns), *shared)``; positions in ``skip`` have no
    member. E.g. every survivor sending its part of a range to a failed shard's
    replacement: one column, every server's NIC send link (the same tuple for every
    range: the network checks it once), ``skip`` the failed servers and those that send
    another part, and the replacement's receive link shared.

    An item of :class:`GroupedFlows`, where it stands for its members, in order: the
    transfer is the same as with their ``(size_B, route)`` pairs; when the members are
    symmetric in it (:meth:`Network._plan_blocks`) a lone transfer plans the group as one
    flow. Raises ValueError for no column, columns of different lengths or a position to
    skip that no column has."""

    __slots__ = ("size_B", "columns", "shared", "skip")

    def __init__(
        self,
        size_B: float,
        columns: Sequence[tuple[Link, ...]],
        shared: Sequence[Link],
        skip: Iterable[int] = (),
    ):
        self.size_B = size_B
        self.columns = tuple(columns)
        self.shared = tuple(shared)
        self.skip = frozenset(skip)
        """Positions of the columns with no member."""
        if not self.columns or len({len(column) for column in self.columns}) > 1:
            raise ValueError("a flow group needs columns of one length (one link per member)")
        if self.skip and not (min(self.skip) >= 0 and max(self.skip) < len(self.columns[0])):
            raise ValueError(f"positions to skip must be in range({len(self.columns[0])})")

    def __len__(self) -> int:
        """Its members."""
        return len(self.columns[0]) - len(self.skip)

    def pairs(self) -> list[tuple[float, tuple[Link, ...]]]:
        """Its members as ``(size_B, route)`` pairs, in order."""
        shared, size_B, skip = self.shared, self.size_B, self.skip
        rows = zip(*self.columns, strict=True)
        return [(size_B, (*row, *shared)) for k, row in enumerate(rows) if k not in skip]


class GroupedFlows(tuple):
    """A transfer's flows given in blocks: ``(size_B, route)`` pairs and :class:`FlowGroup`
    items, each standing for its members (:meth:`Network.transfer`). The transfer's flows
    are the blocks' members one after the other, or in ``order`` if given: flow i is the
    member at position ``order[i]`` of that sequence (e.g. a group's members and single
    flows interleaved, in the order of their senders). ``order`` may be a function that
    returns it, called only if the flows are listed one by one (a lone transfer alone
    does not need them). Kept and passed again (e.g. by
    :meth:`~ftsim.sim.cluster.ClusterNetwork.repeated`), a lone transfer of it is planned
    once per capacity state, in O(blocks). Raises ValueError (when the flows are first
    listed) if ``order`` is not a permutation of the members' positions."""

    def __new__(cls, blocks: Iterable = (), order=None):
        self = super().__new__(cls, blocks)
        self._order = order
        return self

    @property
    def order(self) -> Sequence[int] | None:
        """The flows' order (None: the blocks')."""
        if callable(self._order):
            self._order = self._order()
        return self._order

    def pairs(self) -> list[tuple[float, tuple[Link, ...]]]:
        """Every flow as a ``(size_B, route)`` pair, in order."""
        out: list = []
        for item in self:
            if type(item) is FlowGroup:
                out += item.pairs()
            else:
                out.append(item)
        order = self.order
        if order is None:
            return out
        if sorted(order) != list(range(len(out))):
            raise ValueError(f"order must be a permutation of range({len(out)})")
        return list(map(out.__getitem__, order))


class Topology:
    """Links by name, and what is known of routes and transfers over them: the static part
    of a network, shared by the networks of every replication of one scenario so that each
    builds and checks its routes once, not once per replication.

    It also numbers *capacity states*. A network starts in state 0 (every link at its
    nominal capacity) and each capacity operation (:meth:`Network.set_capacity`,
    ``reserve_share``, ``reserve_rate`` and their bulk forms) moves it to the state that
    this operation leads to from its current one. The capacities are a function of the
    operations applied, so two networks in the same state have the same capacities bit for
    bit: what a transfer does alone in a state is worked out once for all replications
    that get there (:attr:`plans`), and the result of a bulk operation is copied, not
    recomputed (:attr:`snapshots`). Networks that reach equal capacities by different
    operations get different numbers, which only costs a recomputation.
    """

    def __init__(self) -> None:
        self.links: dict[str, Link] = {}
        self.nominal: list[float] = []
        self.checked: dict[tuple[Link, ...], tuple[int, ...]] = {}
        """Route tuples already checked (links of this topology, no repeats) → their link
        indices (at most :data:`_CHECKED_SIZE`)."""
        self.specs: dict[int, tuple] = {}
        """id of a flows tuple → (the tuple, checked specs, local paths, sizes)."""
        self.local: dict[tuple, tuple] = {}
        """Paths of a transfer's flows (link indices) → the same in local link indices, with
        the global index of each local link: transfers over the same links with new sizes
        (e.g. Check-N-Run's differential checkpoints) look them up. Integers only, which
        the garbage collector stops tracking."""
        self.states: dict[tuple, int] = {}
        """(state, operation) → the state it leads to."""
        self.snapshots: dict[int, tuple[list[float], dict, dict]] = {}
        """State reached by a bulk operation → its capacities, shares and reserved rates."""
        self.plans: dict[tuple[int, int], tuple] = {}
        """(id of a flows tuple, state) → (the tuple, checked specs, its lone schedule, its
        end offset in seconds): how that transfer runs alone on a network in that state."""
        self.rates: dict[tuple, list[float]] = {}
        """(paths in local link indices, capacities) → their max-min rates."""
        self.schedules: dict[tuple, tuple] = {}
        """(paths, sizes, capacities, weights) → a lone schedule of several phases."""
        self.blocks: dict[int, tuple] = {}
        """id of a :class:`GroupedFlows` → (it, how :meth:`Network._plan_blocks` plans it: its
        blocks' paths in local link indices, the global index of each local link, sizes,
        weights, members, and each distinct column of its groups (:attr:`columns`) with the
        positions they skip; or None if its groups are not symmetric in it)."""
        self.link_set: set[Link] = set()
        """The links of :attr:`links`, to check many at once."""
        self.columns: dict[int, tuple] = {}
        """id of a column of a :class:`FlowGroup` → (it, its link indices, each link's
        position, by capacity state whether its links have equal capacities), or (it, None,
        None, None) if its links are not distinct links of this topology."""
        self.runs: dict[int, tuple] = {}
        """id of a specs tuple → (the tuple, its :func:`symmetric_runs` with each run's own
        links as a frozenset of link indices, and per capacity state whether each run's own
        links have equal capacities)."""
        self._numbers = itertools.count(1)

    def max_min_rates(
        self,
        routes: tuple[tuple[int, ...], ...],
        capacities: tuple[float, ...],
        weights: tuple | None = None,
    ) -> list[float]:
        """:func:`max_min_rates`, memoized on the exact routes, capacities and weights (a
        pure function, so the result is the same bit for bit): a run repeats the same
        transfers (every full save of a replication, and of every replication)."""
        key = (routes, capacities) if weights is None else (routes, capacities, weights)
        rates = self.rates.get(key)
        if rates is None:
            if len(self.rates) >= _MEMO_SIZE:
                self.rates.clear()
            rates = self.rates[key] = max_min_rates(routes, capacities, weights)
        return rates

    def lone_schedule(
        self,
        paths: tuple[tuple[int, ...], ...],
        sizes: tuple[float, ...],
        capacities: tuple[float, ...],
        weights: tuple | None = None,
    ) -> tuple[tuple[tuple[float, float, tuple[float, ...]], ...], tuple[float, ...]]:
        """How flows that start together on an otherwise idle network proceed, if nothing else
        happens: phases ``(start_s, duration_s, rates)`` of constant max-min rates (one rate per
        flow, 0 once done), and each flow's end offset in seconds (``inf`` if it never ends).
        With ``weights`` (:func:`max_min_rates`) a flow stands for a symmetric group, whose
        members have its rate and end (:meth:`Network._plan_blocks`).

        The same progressive filling and completion rule as the event-driven network, without
        SimPy: a lone transfer then needs a single wake-up (see :meth:`Network.transfer`).
        Schedules of several phases are memoized (a run repeats the same transfers); one of a
        single phase (every flow done at the first completion, e.g. equal flows: a log replay,
        whose sizes are new every time) is recomputed from the memoized rates instead, which
        costs less than keeping it.
        """
        n = len(sizes)
        if n and min(sizes) > 0:
            rates = self.max_min_rates(paths, capacities, weights)
            if min(rates) > 0:
                step = min(map(operator.truediv, sizes, rates))
                resolution_s = CLOCK_ULPS * math.ulp(step)  # the general rule at now = step
                for size_B, r in zip(sizes, rates, strict=True):
                    left_B = size_B - r * step
                    if left_B > DONE_REL * size_B and left_B > r * resolution_s:
                        break  # not done with the others: several phases
                else:
                    return ((0.0, step, tuple(rates)),), (step,) * n
        key = (paths, sizes, capacities, weights)
        found = self.schedules.get(key)
        if found is not None:
            return found
        remaining = list(sizes)
        if n and min(sizes) > 0:
            ends, active = [math.inf] * n, list(range(n))
        else:
            ends = [0.0 if size <= 0 else math.inf for size in sizes]
            active = [i for i in range(n) if sizes[i] > 0]
        phases = []
        now = 0.0
        while active:
            everyone = len(active) == n
            if everyone:
                rates = self.max_min_rates(paths, capacities, weights)
            else:
                rates = self.max_min_rates(
                    tuple([paths[i] for i in active]),
                    capacities,
                    None if weights is None else tuple([weights[i] for i in active]),
                )
            if everyone and min(rates) > 0:  # the first phase, every flow moving
                step = min(map(operator.truediv, remaining, rates))
            else:
                steps = [remaining[i] / r for i, r in zip(active, rates, strict=True) if r > 0]
                if not steps:
                    break  # blocked by a zero-capacity link: never ends
                step = min(steps)
            if everyone:
                full = tuple(rates)
            else:
                rates_of = [0.0] * n
                for i, r in zip(active, rates, strict=True):
                    rates_of[i] = r
                full = tuple(rates_of)
            phases.append((now, step, full))
            now += step
            resolution_s = CLOCK_ULPS * math.ulp(now)  # as in Network._sync
            still = []
            for i, r in zip(active, rates, strict=True):
                left_B = remaining[i] = remaining[i] - r * step
                if left_B <= DONE_REL * sizes[i] or left_B <= r * resolution_s:
                    ends[i] = now
                else:
                    still.append(i)
            active = still
        if len(self.schedules) >= _MEMO_SIZE:
            self.schedules.clear()
        found = self.schedules[key] = (tuple(phases), tuple(ends))
        return found

    def next_state(self, state: int, operation: tuple) -> int:
        """The state ``operation`` leads to from ``state`` (a new number if never seen).

        Numbers are never reused, so the tables can be emptied when they grow large (a run
        whose operations differ in every replication) without two histories sharing one."""
        key = (state, operation)
        found = self.states.get(key)
        if found is None:
            if len(self.states) >= _STATES_SIZE:
                self.states.clear()
                self.snapshots.clear()
                self.plans.clear()
            found = self.states[key] = next(self._numbers)
        return found


class Flow:
    """One transfer of ``size_B`` bytes over ``route``; made by :meth:`Network.start` or as
    part of a :class:`Transfer`.

    ``done`` (flows made by :meth:`Network.start` only; None in a transfer, whose own event
    stands for all its flows) succeeds (value: the flow) ``latency_s`` after the last byte
    arrives, at ``end_s + latency_s``; it never fires for a cancelled flow. ``rate_Bps`` is
    the current rate and ``remaining_B`` the bytes left as of the network's last update.
    """

    __slots__ = (
        "size_B",
        "route",
        "label",
        "category",
        "start_s",
        "end_s",
        "remaining_B",
        "rate_Bps",
        "cancelled",
        "done",
        "path",
        "transfer",
        "count",
        "members",
        "weights",
        "own",
    )

    def __init__(
        self,
        env: simpy.Environment,
        size_B: float,
        route: tuple[Link, ...],
        label: str,
        category: str,
        transfer: Transfer | None = None,
    ):
        self.count = 1
        """Flows this one stands for: more than one for a symmetric group (internal to the
        network: a transfer's ``flows`` are always single flows)."""
        self.members: tuple[tuple[Link, ...], ...] | None = None
        """A group's routes, one per member (the first is ``route``)."""
        self.weights: tuple[int, ...] | None = None
        """A group's members per link of ``path``: all of them on a shared link, 1 on the
        first member's copy of a link each member has its own of."""
        self.own: frozenset[int] | None = None
        """A group: the indices of the links its members each have their own of."""
        self.size_B = size_B
        self.route = route
        self.label = label
        self.category = category
        self.start_s: float = env.now
        self.end_s: float | None = None
        """When the last byte arrived or the flow was cancelled; None while active."""
        self.remaining_B = size_B
        self.rate_Bps = 0.0
        self.cancelled = False
        self.transfer = transfer
        self.done = env.event() if transfer is None else None
        self.path = _path(route)
        """The route as link indices."""

    @property
    def moved_B(self) -> float:
        """Bytes moved so far (as of the network's last update)."""
        return self.size_B - max(self.remaining_B, 0.0)


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """A finished or cancelled flow, for trace export and byte accounting."""

    start_s: float
    end_s: float
    """Last byte arrived (``done`` fired ``latency_s`` later) or cancelled, s."""
    size_B: float
    moved_B: float
    links: tuple[str, ...]
    label: str
    category: str
    cancelled: bool
    activity: str
    """What the flow's transfer does (its category unless named, e.g. a log ``replay``)."""


def bytes_by_category(records: Iterable[FlowRecord]) -> dict[str, float]:
    """Bytes moved per category, counting the part a cancelled flow moved."""
    totals: dict[str, float] = {}
    for record in records:
        totals[record.category] = totals.get(record.category, 0.0) + record.moved_B
    return totals


class Transfer(simpy.Event):
    """Concurrent flows started together (see :meth:`Network.transfer`): the event succeeds
    (value None) ``latency_s`` after the last byte of the last flow; never if one of them
    is cancelled. One event for the whole transfer, not one per flow. (A value referring to
    the transfer itself would make every transfer a reference cycle that only Python's
    cyclic garbage collector frees, which then runs several times as often.)

    While the transfer runs alone on the network its flows exist only as a precomputed
    schedule, and one timeout (:attr:`wake`) stands for their completion; ``flows`` builds
    the flows when asked, and the network does (dropping the wake-up, which then fires
    stale) when anything else happens meanwhile.
    """

    schedule = None
    """While (or since) running alone: the result of :func:`lone_schedule`."""
    cancelled_s: float | None = None
    """When it was cancelled while running alone (its flows, built only if asked for,
    stopped then)."""
    wake: simpy.Timeout | None = None
    """While running alone: the timeout at its planned end (last byte plus latency),
    whose value is the transfer; None once it fired, or once a disturbance or a cancel
    made that end stale (so that no transfer stays a reference cycle)."""
    _flows: tuple[Flow, ...] | None = None
    _entries: list[Flow] | None = None
    """In the general model: its flows as the network moves them, runs of symmetric
    flows as one group each (the single flows of ``flows`` are built when asked)."""
    # (class defaults: a transfer, made several times per checkpoint, sets only the others)

    def __init__(self, network: Network, specs, label: str, category: str, blocks=None):
        super().__init__(network.env)
        self.network = network
        self.specs: tuple[tuple[float, tuple[Link, ...]], ...] = specs
        """Its flows as checked ``(size_B, route)`` pairs; while :attr:`blocks` is set, the
        :class:`GroupedFlows` it was given, whose blocks :attr:`schedule` follows."""
        self.blocks: tuple[int, ...] | None = blocks
        """Planned in blocks (:meth:`Network._plan_blocks`): flows each block stands for;
        None once (or if never) the specs and schedule are those of single flows."""
        self.label = label
        self.category = category
        self.activity = category
        """What the transfer does (set by its starter; default: the category)."""
        self.start_s = network.env.now
        self.pending = len(specs) if blocks is None else sum(blocks)
        """Flows whose last byte has not arrived yet."""

    @property
    def flows(self) -> tuple[Flow, ...]:
        """The transfer's flows, in the order given."""
        if self._flows is None:
            self.network._flows_of(self)
        return self._flows


class Network:
    """Links, the flows crossing them, and their max-min fair rates over simulated time.

    ``latency_s`` is added once to every flow's completion. With ``record`` every finished
    or cancelled flow is appended to ``records`` (otherwise ``records`` is None).
    """

    def __init__(
        self,
        env: simpy.Environment,
        latency_s: float = 0.0,
        record: bool = True,
        topology: Topology | None = None,
    ):
        if not (math.isfinite(latency_s) and latency_s >= 0):
            raise ValueError(f"latency_s must be finite and >= 0, got {latency_s}")
        self.env = env
        self.latency_s = latency_s
        self.records: list[FlowRecord] | None = [] if record else None
        self.topology = topology or Topology()
        self._links = self.topology.links
        self._capacities: list[float] = list(self.topology.nominal)
        """Current capacity of every link, bytes/s (this network's, not the topology's)."""
        self._shares: dict[int, float] = {}
        self._reserved: dict[int, float] = {}
        self._state = 0
        """Capacity state (see :class:`Topology`): 0 until a capacity changes."""
        self._active: dict[Flow, None] = {}  # insertion-ordered set: deterministic order
        self._updated_s = env.now
        self._wake: simpy.Event | None = None
        self._checked = self.topology.checked
        self._spec_cache = self.topology.specs
        self._local = self.topology.local
        self._plans = self.topology.plans
        self._lone: Transfer | None = None
        """A transfer running alone on an otherwise idle network, on its precomputed
        schedule (no flows in ``_active``); made real flows when anything else happens."""

    @property
    def flows(self) -> tuple[Flow, ...]:
        """The active flows, in start order (single flows: groups are split)."""
        self._materialize()
        for group in [f for f in self._active if f.count > 1]:
            self._split(group)
        return tuple(self._active)

    def link(self, name: str, capacity_Bps: float | None = None) -> Link:
        """The link called ``name``, created with ``capacity_Bps`` bytes/s if new.

        Raises KeyError for an unknown name without a capacity, and ValueError for a known
        name given a different capacity.
        """
        if name in self._links:
            link = self._links[name]
            if capacity_Bps is not None and capacity_Bps != link.nominal_Bps:
                raise ValueError(f"link {name!r} exists with {link.nominal_Bps} B/s")
            return link
        if capacity_Bps is None:
            raise KeyError(f"no link {name!r}; give a capacity to create it")
        _check_capacity(capacity_Bps)
        link = Link(name, capacity_Bps, len(self.topology.nominal))
        self._links[name] = link
        self.topology.link_set.add(link)
        self.topology.nominal.append(capacity_Bps)
        self._grow()
        return link

    def capacity_of(self, link: Link) -> float:
        """``link``'s capacity for this network's flows now, bytes/s."""
        self._grow()
        return self._capacities[link.index]

    def _grow(self) -> None:
        """Links another network of the topology created since: at their nominal capacity."""
        nominal = self.topology.nominal
        if len(self._capacities) < len(nominal):
            self._capacities.extend(nominal[len(self._capacities) :])

    def start(
        self, size_B: float, route: Iterable[Link], label: str = "", category: str = ""
    ) -> Flow:
        """Start moving ``size_B`` bytes over ``route`` now; rates of all flows are updated.

        ``label`` names the flow in records (e.g. ``"shard3"``), ``category`` groups bytes
        for accounting (e.g. ``"save"``). A zero-size flow completes at once (``done``
        fires after ``latency_s``).
        """
        self._materialize()
        finished = self._sync()
        flow = self._add(size_B, route, label, category)
        self._split_hit(set(flow.path))
        if finished or flow.end_s is None:
            self._reallocate()
        return flow

    def transfer(
        self,
        flows: Iterable[tuple[float, Iterable[Link]]],
        label: str = "",
        category: str = "",
    ) -> Transfer:
        """Start concurrent flows ``(size_B, route)``; the event fires when all are done.

        Rates are recomputed once for the whole set, e.g. every PS writing its shard. On an
        idle network the transfer runs on its precomputed schedule; a tuple of flows passed
        again (e.g. a cached full save) then costs O(1), whatever the number of flows.
        ``flows`` may be a :class:`GroupedFlows`, whose symmetric groups a lone transfer
        plans as one flow each (:meth:`_plan_blocks`).
        """
        if self._lone is not None or self._active:
            self._materialize()
            finished = self._sync()
            if self._active:
                return self._transfer_among(flows, label, category, finished)
        return self._transfer_alone(flows, label, category)

    def _transfer_among(self, flows, label: str, category: str, finished: bool) -> Transfer:
        """Start ``flows`` as active flows of the general model (others are moving); each
        run of symmetric flows that may move as one is a group (:meth:`_entries_of`)."""
        specs, _, _ = self._specs(flows)
        transfer = Transfer(self, specs, label, category)

        def single(i: int) -> Flow:
            return self._add(*specs[i], label, category, transfer)

        def group(a: int, b: int, own: tuple, own_links: frozenset) -> Flow:
            flow = self._group(transfer, a, b, own, own_links)
            self._active[flow] = None
            return flow

        entries = self._entries_of(specs, single, group)
        self._keep(transfer, entries)
        self._admit(entries)
        if transfer.pending == 0:  # empty, or only zero-size flows
            self._finish(transfer)
        if finished or any(flow.end_s is None for flow in entries):
            self._reallocate()
        return transfer

    # -- symmetric groups --------------------------------------------------------------

    def _entries_of(self, specs, single, group, fits=None) -> list[Flow]:
        """The flows of a transfer with ``specs`` as the general model moves them, in order:
        ``single(i)`` for flow i, ``group(a, b, own, own_links)`` for a run of symmetric flows
        a … b − 1 (:func:`symmetric_runs`) that may move as one: the members' own links
        have equal capacities now and no other flow crosses any of them. Max-min then gives
        every member the same rate (the allocation is unique and the members are
        interchangeable), so the group is exact as long as that holds; anything that breaks
        the symmetry splits it into its members first (:meth:`_admit`, :meth:`_recap`,
        ``flows``). A transfer of E flows of one shape is then one flow of the general
        model, not E (ECRM's full save over 1,800 PS disturbed by a rebuild). ``fits(a, b)``,
        if given, must also hold for a run to be a group."""
        runs, equal = self._runs_of(specs)
        entries: list[Flow] = []
        i = 0
        if runs:
            taken = self._used_links()
            state = self._state
            if state not in equal:  # the capacities are those of the state (Topology)
                if len(equal) >= _MEMO_SIZE:
                    equal.clear()
                equal[state] = [
                    _equal_capacities(self._capacities, specs, a, b, own) for a, b, own, _ in runs
                ]
            for (a, b, own, own_links), same in zip(runs, equal[state], strict=True):
                if not same or not own_links.isdisjoint(taken):
                    continue
                if fits is not None and not fits(a, b):
                    continue
                entries += [single(k) for k in range(i, a)]
                entries.append(group(a, b, own, own_links))
                i = b
        entries += [single(k) for k in range(i, len(specs))]
        return entries

    def _runs_of(self, specs) -> tuple[list[tuple[int, int, tuple, frozenset]], dict]:
        """:func:`symmetric_runs` of ``specs`` whose own links no other flow of them crosses,
        with those links (as link indices), kept by identity of the tuple (a cached full
        save or load); and by capacity state, whether each run's own links have equal
        capacities (filled by :meth:`_entries_of`)."""
        memo = self.topology.runs
        found = memo.get(id(specs))
        if found is not None and found[0] is specs:
            return found[1:]
        runs = symmetric_runs(specs)
        uses: dict[int, int] = {}
        if runs:
            for _, route in specs:
                for link in route:
                    uses[link.index] = uses.get(link.index, 0) + 1
        kept = []
        for a, b, own in runs:
            own_links = frozenset(specs[k][1][p].index for k in range(a, b) for p in own)
            if all(uses[i] == 1 for i in own_links):  # no other flow of them crosses one
                kept.append((a, b, own, own_links))
        runs = kept
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[id(specs)] = found = (specs, runs, {})
        return found[1:]

    def _group(self, transfer: Transfer, a: int, b: int, own: tuple, own_links) -> Flow:
        """One flow of the general model for the symmetric flows a … b − 1 of ``transfer``."""
        size_B, route = transfer.specs[a]
        flow = Flow(self.env, size_B, route, transfer.label, transfer.category, transfer)
        count = flow.count = b - a
        flow.members = tuple([r for _, r in transfer.specs[a:b]])
        flow.weights = tuple([1 if p in own else count for p in range(len(route))])
        flow.own = own_links
        return flow

    def _keep(self, transfer: Transfer, entries: list[Flow]) -> None:
        """Give ``transfer`` its flows (``entries``, kept as they are while it has groups)."""
        if any(flow.count > 1 for flow in entries):
            transfer._entries = entries
        else:
            transfer._flows = tuple(entries)

    def _used_links(self) -> set[int]:
        """Link indices the active flows cross (every member's own links, for a group)."""
        taken: set[int] = set()
        for flow in self._active:
            taken.update(flow.path)
            if flow.own is not None:
                taken |= flow.own
        return taken

    def _admit(self, new: list[Flow]) -> None:
        """New flows started: split every other group whose members' own links they cross."""
        if not new:
            return
        groups = [f for f in self._active if f.count > 1 and f.transfer is not new[0].transfer]
        if not groups:
            return
        links: set[int] = set()
        for flow in new:
            links.update(flow.path)
            if flow.own is not None:
                links |= flow.own
        self._split_hit(links, groups)

    def _split_hit(self, links: set[int], groups: list[Flow] | None = None) -> None:
        """Split the active groups (or those of ``groups``) with own links among ``links``."""
        if groups is None:
            groups = [f for f in self._active if f.count > 1]
        for group in groups:
            if not group.own.isdisjoint(links):
                self._split(group)

    def _split(self, group: Flow) -> None:
        """Replace ``group`` by its members, single flows in its state, in its place (among
        the active flows if it is active, and in its transfer's flows)."""
        members = []
        for route in group.members:
            flow = Flow(self.env, group.size_B, route, group.label, group.category, group.transfer)
            flow.start_s, flow.end_s = group.start_s, group.end_s
            flow.remaining_B, flow.rate_Bps = group.remaining_B, group.rate_Bps
            flow.cancelled = group.cancelled
            members.append(flow)
        if group in self._active:
            self._active = {
                flow: None
                for entry in self._active
                for flow in (members if entry is group else (entry,))
            }
        transfer = group.transfer
        entries = [
            flow
            for entry in transfer._entries
            for flow in (members if entry is group else (entry,))
        ]
        if any(flow.count > 1 for flow in entries):
            transfer._entries = entries
        else:
            transfer._entries = None
            transfer._flows = tuple(entries)

    def cancel_transfer(self, transfer: Transfer) -> None:
        """Stop every flow of ``transfer`` that is still moving (e.g. a failure aborts a
        save); the transfer's event never fires."""
        if transfer is self._lone:  # nothing else moves: drop its schedule
            self._lone = None
            transfer.wake = None
            self._updated_s = transfer.cancelled_s = self.env.now
            if self.records is not None:  # otherwise its flows are built only if asked for
                for flow in transfer.flows:
                    self._record(flow)
            return
        self._stop(transfer._entries if transfer._entries is not None else transfer.flows)

    def cancel(self, flow: Flow) -> float:
        """Stop ``flow`` now (e.g. a save aborted by a failure); returns bytes it moved.

        Its ``done`` never fires. Cancelling a flow whose last byte has arrived does nothing.
        """
        self._materialize()
        self._stop((flow,))
        return flow.moved_B

    def _stop(self, flows) -> None:
        """Cancel the ``flows`` still active, then update the rates once."""
        changed = self._sync()
        for flow in flows:
            if flow in self._active:
                del self._active[flow]
                flow.cancelled = True
                self._end(flow)
                changed = True
        if changed:
            self._reallocate()

    # -- capacities --------------------------------------------------------------------

    def set_capacity(self, link: Link, capacity_Bps: float) -> None:
        """Change ``link``'s current capacity (bytes/s) from now on, e.g. background load."""
        _check_capacity(capacity_Bps)
        self._check_link(link)
        self._recap(("capacity", link.index, capacity_Bps), ((link, capacity_Bps),))

    def reserve_share(self, link: Link, share: float) -> None:
        """Leave ``1 - share`` of ``link``'s nominal capacity (less any reserved rate) to
        flows from now on."""
        _check_share(share)
        self._check_link(link)
        self._shares[link.index] = share
        self._recap(("share", link.index, share), ((link, self._left_Bps(link)),))

    def reserve_rate(self, link: Link, rate_Bps: float) -> None:
        """A continuous stream (e.g. an update log written as training goes) takes
        ``rate_Bps`` more of ``link`` from now on (negative: gives it back). Flows get what
        background shares and streams leave, but never less than ``MIN_LEFT`` of the nominal
        capacity: a saturated link still lets other flows through."""
        if not math.isfinite(rate_Bps):
            raise ValueError(f"rate_Bps must be finite, got {rate_Bps}")
        self._check_link(link)
        self._reserve(link, rate_Bps)
        self._recap(("rate", link.index, rate_Bps), ((link, self._left_Bps(link)),))

    def reserve_shares(self, links: tuple[Link, ...], share: float) -> None:
        """:meth:`reserve_share` on each of ``links`` at once (e.g. the training traffic's
        share of every PS NIC): one rate update, and a copy of the result when a network
        of the topology did the same from the same state (O(1) per replication)."""
        _check_share(share)

        def apply() -> None:
            for link in links:
                self._shares[link.index] = share
                self._capacities[link.index] = self._left_Bps(link)

        self._bulk(("shares", links, share), links, apply)

    def reserve_rates(self, links: tuple[Link, ...], rate_Bps: float) -> None:
        """:meth:`reserve_rate` on each of ``links`` at once (e.g. a stream on every PS
        NIC): one rate update, and a copy of the result when a network of the topology did
        the same from the same state (O(1) per replication)."""
        if not math.isfinite(rate_Bps):
            raise ValueError(f"rate_Bps must be finite, got {rate_Bps}")

        def apply() -> None:
            for link in links:
                self._reserve(link, rate_Bps)
                self._capacities[link.index] = self._left_Bps(link)

        self._bulk(("rates", links, rate_Bps), links, apply)

    def _reserve(self, link: Link, rate_Bps: float) -> None:
        reserved = max(self._reserved.get(link.index, 0.0) + rate_Bps, 0.0)
        self._reserved[link.index] = reserved

    def _left_Bps(self, link: Link) -> float:
        """What background shares and streams leave of ``link`` to flows, bytes/s."""
        reserved = self._reserved.get(link.index, 0.0)
        left = link.nominal_Bps * (1.0 - self._shares.get(link.index, 0.0)) - reserved
        if reserved > 0:
            left = max(left, MIN_LEFT * link.nominal_Bps)
        return left

    def _recap(self, operation: tuple, changes: Iterable[tuple[Link, float]]) -> None:
        """Capacities change now (``changes``: link, new bytes/s) by ``operation``: advance
        the flows to now, move to the state the operation leads to, update the rates."""
        busy = self._lone is not None or bool(self._active)
        if busy:
            self._materialize()
            self._sync()
        self._grow()
        changes = tuple(changes)
        self._split_hit({link.index for link, _ in changes})  # its members would differ
        for link, capacity_Bps in changes:
            self._capacities[link.index] = capacity_Bps
        self._state = self.topology.next_state(self._state, operation)
        if busy:
            self._reallocate()

    def _bulk(self, operation: tuple, links: tuple[Link, ...], apply) -> None:
        """A capacity operation on many links (``apply`` does it): advance the flows, apply
        it or copy its result from :attr:`Topology.snapshots`, update the rates once."""
        state = self.topology.next_state(self._state, operation)
        snapshot = self.topology.snapshots.get(state)
        if snapshot is None:
            for link in links:
                self._check_link(link)
        busy = self._lone is not None or bool(self._active)
        if busy:
            self._materialize()
            self._sync()
            self._split_hit({link.index for link in links})
        self._grow()
        if snapshot is None:
            apply()
            self.topology.snapshots[state] = (
                list(self._capacities),
                dict(self._shares),
                dict(self._reserved),
            )
        else:
            capacities, shares, reserved = snapshot
            self._capacities[: len(capacities)] = capacities
            self._shares = dict(shares)
            self._reserved = dict(reserved)
        self._state = state
        if busy:
            self._reallocate()

    def follow_shares(self, link: Link, points: Sequence[tuple[float, float]]) -> simpy.Process:
        """Reserve ``share`` of ``link`` from each ``(time_s, share)`` point to the next.

        Times are absolute simulation times in non-decreasing order; points in the past
        apply at once, in order. Returns the SimPy process doing it.
        """
        self._check_link(link)
        times = [time_s for time_s, _ in points]
        if any(later < earlier for earlier, later in pairwise(times)):
            raise ValueError("share points must be in non-decreasing time order")
        for _, share in points:
            _check_share(share)
        return self.env.process(self._follow(link, list(points)))

    def _follow(
        self, link: Link, points: list[tuple[float, float]]
    ) -> Generator[simpy.Event, None, None]:
        """The process behind :meth:`follow_shares`."""
        for time_s, share in points:
            if time_s > self.env.now:
                yield self.env.timeout(time_s - self.env.now)
            self.reserve_share(link, share)

    # -- flows -------------------------------------------------------------------------

    def _add(
        self,
        size_B: float,
        route: Iterable[Link],
        label: str,
        category: str,
        transfer: Transfer | None = None,
    ) -> Flow:
        """Make a flow starting now; active unless zero-size (then completed at once)."""
        _check_size(size_B)
        links = self._route(route)
        flow = Flow(self.env, size_B, links, label, category, transfer)
        if size_B > 0:
            self._active[flow] = None
        else:
            self._complete(flow)
        return flow

    def _route(self, route: Iterable[Link]) -> tuple[Link, ...]:
        """A checked route without repeats (a link crossed twice is shared once)."""
        if isinstance(route, tuple) and route in self._checked:  # seen before (e.g. cached)
            return route
        links = tuple(dict.fromkeys(route))
        if not links:
            raise ValueError("a route needs at least one link")
        if not self.topology.link_set.issuperset(links):
            for link in links:
                self._check_link(link)  # says which
        if isinstance(route, tuple) and links == route:
            if len(self._checked) >= _CHECKED_SIZE:
                self._checked.clear()
            self._checked[route] = _path(route)
        return links

    # -- a transfer alone on the network -----------------------------------------------

    def _specs(self, flows) -> tuple[tuple, tuple, tuple]:
        """Checked ``(size_B, route)`` pairs, their paths in local link indices with the
        global index of each local link, and sizes. A tuple of flows passed again (e.g. a
        cached full save) is looked up, not checked again."""
        if isinstance(flows, tuple):
            found = self._spec_cache.get(id(flows))
            if found is not None and found[0] is flows:
                return found[1:]
        sizes, routes = _unzip(flows.pairs() if type(flows) is GroupedFlows else flows)
        specs, local = self._check(sizes, routes)
        if isinstance(flows, tuple):
            if len(self._spec_cache) >= _MEMO_SIZE:  # tuples made anew for each transfer
                self._spec_cache.clear()
            self._spec_cache[id(flows)] = (flows, specs, local, sizes)
        return specs, local, sizes

    def _check(self, sizes: tuple, routes: tuple) -> tuple[tuple, tuple]:
        """Checked ``(size_B, route)`` pairs of these sizes and routes, and their paths in
        local link indices with the global index of each local link (looked up if these
        paths were seen before)."""
        total_B = sum(sizes)
        if not (math.isfinite(total_B) and min(sizes, default=0.0) >= 0):
            for size_B in sizes:
                _check_size(size_B)
        known = self._checked
        try:  # routes checked before (as ClusterNetwork's are): their paths are known
            paths = tuple([known[route] for route in routes])
        except (KeyError, TypeError):  # new, or given as lists
            routes = tuple([self._route(route) for route in routes])
            paths = tuple([known.get(route) or _path(route) for route in routes])
        local = self._local.get(paths)
        if local is None:
            if len(self._local) >= _MEMO_SIZE:
                self._local.clear()
            local = self._local[paths] = _localize(paths)
        return tuple(zip(sizes, routes, strict=True)), local

    def _plan(self, flows) -> tuple:
        """How ``flows`` run alone from now, in this capacity state: (the flows, checked
        specs, :func:`lone_schedule`, end offset in seconds, None), or for a
        :class:`GroupedFlows` whose groups are symmetric, (the flows, the flows, the
        schedule of its blocks, end offset, flows per block) (:meth:`_plan_blocks`). A tuple
        of flows (e.g. the cached full save) has its plan kept in :attr:`Topology.plans`,
        where :meth:`_transfer_alone` finds it by identity next time; other flows are
        planned each time (their routes and schedules are memoized, but keeping one plan per
        list, most of them never seen again, costs more than it saves)."""
        kept = type(flows) is tuple or type(flows) is GroupedFlows
        plan = self._plan_blocks(flows) if type(flows) is GroupedFlows else None
        if plan is None:
            if kept:
                specs, (paths, used), sizes = self._specs(flows)
            else:
                sizes, routes = _unzip(flows)
                specs, (paths, used) = self._check(sizes, routes)
            self._grow()
            capacities = self._capacities
            schedule = self.topology.lone_schedule(
                paths, sizes, tuple(map(capacities.__getitem__, used))
            )
            plan = (flows, specs, schedule, max(schedule[1], default=0.0), None)
        if kept:
            if len(self._plans) >= _MEMO_SIZE:
                self._plans.clear()
            self._plans[id(flows), self._state] = plan
        return plan

    def _plan_blocks(self, flows: GroupedFlows) -> tuple | None:
        """:meth:`_plan` of grouped flows whose groups are symmetric, each group planned as
        one flow with weights (:func:`max_min_rates`); None if they are not, or if in this
        capacity state a column's links have unequal capacities (then the flows are planned
        one by one).

        Symmetric: each group's columns are links of their own (distinct, not among its
        shared links); two columns of the transfer are equal (member k of each group crosses
        its link k: e.g. every survivor sends to each of 4 replacements) or have no link in
        common; and no pair and no group's shared link crosses a column.
        Swapping members k and k' of all the groups linked by shared columns (all of one
        size) then maps the network onto itself, capacities included, so members k and k'
        have equal max-min rates (the allocation is unique) and ends. A group then moves as
        one flow over the first link of each column (weight 1: each copy carries one member
        of each group sharing it) and its shared links (weight: its members), exactly, as
        long as it runs alone. The weighted arithmetic is that of the members one by one
        (:func:`_max_min_weighted`): the same floats unless links of a column and others
        saturate at exactly the same level (then the members freeze in another order and
        the floats may differ in the last places; tests/test_network_groups.py bounds the
        difference at 1e-12)."""
        blocks = self._blocks(flows)
        if blocks is None:
            return None
        paths, used, sizes, weights, members, owned = blocks
        self._grow()
        capacities, state = self._capacities, self._state
        for (_, indices, _, equal), skip in owned:
            same = equal.get(state)
            if same is None:
                if len(equal) >= _MEMO_SIZE:
                    equal.clear()
                same = equal[state] = _equal_in(capacities, indices)
            if not same and not _equal_in(
                capacities, tuple([i for k, i in enumerate(indices) if k not in skip])
            ):
                return None
        schedule = self.topology.lone_schedule(
            paths, sizes, tuple(map(capacities.__getitem__, used)), weights
        )
        return (flows, flows, schedule, max(schedule[1], default=0.0), members)

    def _blocks(self, flows: GroupedFlows) -> tuple | None:
        """How :meth:`_plan_blocks` plans ``flows`` (:attr:`Topology.blocks`), worked out
        once per tuple: its links are checked in bulk (a column as a set, in C), pairs as
        by :meth:`_check`; O(blocks) in Python."""
        memo = self.topology.blocks
        found = memo.get(id(flows))
        if found is not None and found[0] is flows:
            return found[1]
        blocks = self._block_plan(flows)
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[id(flows)] = (flows, blocks)
        return blocks

    def _block_plan(self, flows: GroupedFlows) -> tuple | None:
        """:meth:`_blocks`, worked out (None: not symmetric, see :meth:`_plan_blocks`).
        A column is checked once (:meth:`_column`), so a range whose survivors are every
        server's NIC but a few skipped costs O(blocks + skipped), not O(survivors)."""
        columns: dict[int, tuple] = {}  # id of a column → its :meth:`_column`, as used here
        skips: dict[int, frozenset] = {}  # id of a distinct column → its skipped positions
        crossed: set[Link] = set()  # links of pairs and shared links of groups
        sizes, paths, weights, members = [], [], [], []
        known = self._checked
        for item in flows:
            if type(item) is not FlowGroup:
                size_B, route = item
                if not 0.0 <= size_B < math.inf:
                    _check_size(size_B)
                path = known.get(route) if type(route) is tuple else None
                if path is None:  # not seen as it is: checked, without repeats
                    route = self._route(route)
                    path = known.get(route) or _path(route)
                crossed.update(route)
                sizes.append(size_B)
                paths.append(path)
                weights.append(None)
                members.append(1)
                continue
            _check_size(item.size_B)
            m, skip = len(item), item.skip
            mine = []
            for column in item.columns:
                found = columns.get(id(column))
                if found is None:
                    found = columns[id(column)] = self._column(column, columns.values())
                if found is None or skips.setdefault(id(found), skip) != skip:
                    return None  # not links of their own, or members of another group's
                mine.append(found)
            if m < 2 or len({id(found) for found in mine}) != len(mine):
                return None  # a member would cross a link twice
            shared = item.shared
            if len(set(shared)) != len(shared):
                return None
            for link in shared:
                self._check_link(link)
            crossed.update(shared)
            first = min(set(range(len(skip) + 1)) - skip)  # the first member's position
            sizes.append(item.size_B)
            paths.append((*[found[1][first] for found in mine], *map(_INDEX, shared)))
            weights.append((1,) * len(mine) + (m,) * len(shared))
            members.append(m)
        distinct = {id(found): found for found in columns.values()}
        for key, (_, _, positions, _) in distinct.items():
            skip = skips[key]
            for link in crossed:  # a pair or shared link on a member's own link
                position = positions.get(link)
                if position is not None and position not in skip:
                    return None
        if not distinct:
            return None
        local, used = _localize(paths)
        owned = tuple([(found, skips[key]) for key, found in distinct.items()])
        return local, used, tuple(sizes), tuple(weights), tuple(members), owned

    def _column(self, column: tuple[Link, ...], seen) -> tuple | None:
        """``column`` as (the column, its link indices, each link's position, its equal
        capacities by state), worked out once per tuple (:attr:`Topology.columns`), or the
        entry of an equal column among ``seen``; None if its links are not distinct links of
        this network, or share a link with a column of ``seen``."""
        memo = self.topology.columns
        found = memo.get(id(column))
        if found is None or found[0] is not column:
            found = None
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            positions = {link: k for k, link in enumerate(column)}
            if len(positions) == len(column) and self.topology.link_set.issuperset(positions):
                found = (column, tuple(map(_INDEX, column)), positions, {})
            memo[id(column)] = found = found or (column, None, None, None)
        if found[1] is None:
            return None
        for other in seen:
            if other is not None and other is not found:
                if other[0][0] is column[0] and other[0] == column:
                    return other
                if not found[2].keys().isdisjoint(other[2].keys()):
                    return None
        return found

    def _unblock(self, transfer: Transfer) -> None:
        """A transfer planned in blocks gets its flows' specs and schedule one by one (to
        build its flows, or hand them to the general model)."""
        members = transfer.blocks
        if members is None:
            return
        transfer.blocks = None
        order = transfer.specs.order
        transfer.specs = self._specs(transfer.specs)[0]
        phases, ends = transfer.schedule
        transfer.schedule = (
            tuple([(s, d, _spread(rates, members, order)) for s, d, rates in phases]),
            _spread(ends, members, order),
        )

    def _transfer_alone(self, flows, label: str, category: str) -> Transfer:
        """Start ``flows`` on an idle network, on their precomputed schedule (a look-up if
        :meth:`_plan` knows them): one wake-up, when it is done (last byte plus latency)."""
        kept = type(flows) is tuple or type(flows) is GroupedFlows
        plan = self._plans.get((id(flows), self._state)) if kept else None
        if plan is None or plan[0] is not flows:
            plan = self._plan(flows)
        transfer = Transfer(self, plan[1], label, category, plan[4])
        transfer.schedule = plan[2]
        end_s = plan[3]
        self._updated_s = self.env.now
        self._wake = None  # one left by flows that just ended is stale
        if end_s == 0.0:
            self._close_alone(transfer)
            self._finish(transfer)
        elif end_s < math.inf:
            self._lone = transfer
            transfer.wake = self.env.timeout(end_s + self.latency_s, transfer)
            transfer.wake.callbacks.append(self._on_lone_done)
        else:
            self._lone = transfer  # blocked by a zero-capacity link until it changes
        return transfer

    def _on_lone_done(self, wake: simpy.Timeout) -> None:
        """A lone transfer's wake-up: unless stale, its flows have all arrived (recorded
        now if it still ran alone) and it succeeds."""
        transfer: Transfer = wake.value
        if wake is not transfer.wake:
            return
        transfer.wake = None  # done: no cycle left between the two for the collector
        if transfer is self._lone:
            self._lone = None
            self._updated_s = self.env.now
            self._close_alone(transfer)
        transfer.succeed()

    def _close_alone(self, transfer: Transfer) -> None:
        """All flows of a lone transfer have arrived: record them."""
        transfer.pending = 0
        if self.records is not None:
            self._unblock(transfer)
            ends = transfer.schedule[1]
            for flow, end_s in zip(transfer.flows, ends, strict=True):
                if flow.end_s is None:  # the clock's rounding put "now" an ulp short of it
                    flow.remaining_B = 0.0
                    flow.end_s = transfer.start_s + end_s
                self._record(flow)

    def _flows_of(self, transfer: Transfer) -> None:
        """Build the flows of a transfer that ran (or runs) alone, as of now (or as of its
        cancel, for one cancelled while alone)."""
        if transfer is self._lone:
            self._materialize()
        self._unblock(transfer)
        if transfer._entries is not None:
            for flow in [f for f in transfer._entries if f.count > 1]:
                self._split(flow)
        if transfer._flows is not None:
            return
        phases, ends = transfer.schedule
        stopped_s = transfer.cancelled_s
        elapsed_s = (self.env.now if stopped_s is None else stopped_s) - transfer.start_s
        flows = []
        for i, (size_B, route) in enumerate(transfer.specs):
            flow = Flow(self.env, size_B, route, transfer.label, transfer.category, transfer)
            flow.start_s = transfer.start_s
            if ends[i] <= elapsed_s:
                flow.remaining_B = 0.0
                flow.end_s = transfer.start_s + ends[i]
            else:
                moved = sum(r[i] * min(d, elapsed_s - s) for s, d, r in phases if s < elapsed_s)
                flow.remaining_B = size_B - moved
                if stopped_s is not None:
                    flow.cancelled = True
                    flow.end_s = stopped_s
            flows.append(flow)
        transfer._flows = tuple(flows)

    def _materialize(self) -> None:
        """Something else happens on the network: the lone transfer's flows become real
        active flows with the bytes they have left now, and the general model takes over.
        If all its bytes are in (only the latency is left), its wake-up still finishes it."""
        transfer = self._lone
        if transfer is None:
            return
        self._lone = None
        self._wake = None
        now = self._updated_s = self.env.now
        self._unblock(transfer)
        phases, ends = transfer.schedule
        start_s, specs = transfer.start_s, transfer.specs
        elapsed_s = now - start_s

        def state(flow: Flow, i: int) -> Flow:
            """``flow`` (flow i, or a group led by it) as of now on the lone schedule."""
            flow.start_s = start_s
            if ends[i] <= elapsed_s:
                flow.remaining_B = 0.0
                flow.end_s = start_s + ends[i]
                transfer.pending -= flow.count
                self._record(flow)
            else:
                moved = sum(r[i] * min(d, elapsed_s - s) for s, d, r in phases if s < elapsed_s)
                flow.remaining_B = flow.size_B - moved
                self._active[flow] = None
            return flow

        def single(i: int) -> Flow:
            size_B, route = specs[i]
            return state(
                Flow(self.env, size_B, route, transfer.label, transfer.category, transfer), i
            )

        def group(a: int, b: int, own: tuple, own_links: frozenset) -> Flow:
            return state(self._group(transfer, a, b, own, own_links), a)

        def together(a: int, b: int) -> bool:  # members of a run end together when alone
            return ends[a:b].count(ends[a]) == b - a

        entries = self._entries_of(specs, single, group, together)
        self._keep(transfer, entries)
        if transfer.pending:
            transfer.wake = None  # its end changes: the general model will finish it
        self._reallocate()

    def _check_link(self, link: Link) -> None:
        if self._links.get(link.name) is not link:
            raise ValueError(f"{link!r} does not belong to this network")

    def _sync(self) -> bool:
        """Advance every active flow's bytes to now and complete those that are done.

        Returns whether any completed (then rates must be recomputed).
        """
        now = self.env.now
        elapsed_s = now - self._updated_s
        self._updated_s = now
        resolution_s = CLOCK_ULPS * math.ulp(now)
        finished = []
        for flow in self._active:
            flow.remaining_B -= flow.rate_Bps * elapsed_s
            left_B = flow.remaining_B
            if left_B <= DONE_REL * flow.size_B or left_B <= flow.rate_Bps * resolution_s:
                finished.append(flow)
        for flow in finished:
            del self._active[flow]
            self._complete(flow)
        return bool(finished)

    def _reallocate(self) -> None:
        """Recompute all rates and replace the pending wake-up by the earliest completion."""
        self._wake = None  # a pending wake-up is now stale
        if not self._active:
            return
        flows = list(self._active)
        paths, used = _localize(tuple([flow.path for flow in flows]))
        weights = tuple([flow.weights for flow in flows])
        if weights.count(None) == len(weights):
            weights = None
        self._grow()
        capacities = self._capacities
        rates = self.topology.max_min_rates(
            paths, tuple(map(capacities.__getitem__, used)), weights
        )
        soonest_s = math.inf
        for flow, rate in zip(flows, rates, strict=True):
            flow.rate_Bps = rate
            if rate > 0:
                soonest_s = min(soonest_s, flow.remaining_B / rate)
        if soonest_s < math.inf:
            self._wake = self.env.timeout(soonest_s)
            self._wake.callbacks.append(self._on_wake)

    def _on_wake(self, event: simpy.Event) -> None:
        if event is self._wake:
            self._sync()
            self._reallocate()

    def _complete(self, flow: Flow) -> None:
        """The last byte of ``flow`` has arrived now: record it; fire ``done`` (or, for the
        last flow of a transfer, the transfer) after the latency."""
        flow.remaining_B = 0.0
        self._end(flow)
        transfer = flow.transfer
        if transfer is not None:
            transfer.pending -= flow.count
            built = transfer._flows is not None or transfer._entries is not None
            if transfer.pending == 0 and built:  # not mid-transfer()
                self._finish(transfer)
        elif self.latency_s > 0:
            self.env.timeout(self.latency_s).callbacks.append(lambda _: flow.done.succeed(flow))
        else:
            flow.done.succeed(flow)

    def _finish(self, transfer: Transfer) -> None:
        """Every flow of ``transfer`` has arrived: it succeeds after the latency."""
        if self.latency_s > 0:
            self.env.timeout(self.latency_s).callbacks.append(lambda _: transfer.succeed())
        else:
            transfer.succeed()

    def _end(self, flow: Flow) -> None:
        flow.end_s = self.env.now
        flow.rate_Bps = 0.0
        self._record(flow)

    def _record(self, flow: Flow) -> None:
        if self.records is not None:
            for route in flow.members or (flow.route,):  # a group: each member
                self.records.append(
                    FlowRecord(
                        flow.start_s,
                        flow.end_s,
                        flow.size_B,
                        flow.moved_B,
                        tuple(link.name for link in route),
                        flow.label,
                        flow.category,
                        flow.cancelled,
                        flow.transfer.activity if flow.transfer is not None else flow.category,
                    )
                )


def _equal_capacities(capacities: list[float], specs, a: int, b: int, own: tuple) -> bool:
    """Whether flows a … b − 1 of ``specs`` have equal capacities on their own links, at
    each position of ``own``."""
    for p in own:
        first = capacities[specs[a][1][p].index]
        for k in range(a + 1, b):
            if capacities[specs[k][1][p].index] != first:
                return False
    return True


def _equal_in(capacities: list[float], column: tuple[int, ...]) -> bool:
    """Whether the links ``column`` (link indices) have equal capacities (counted in C:
    a column may hold thousands of links)."""
    return list(map(capacities.__getitem__, column)).count(capacities[column[0]]) == len(column)


def _spread(values: tuple, members: tuple[int, ...], order: tuple[int, ...] | None) -> tuple:
    """Each block's value once per flow of the block (``members``: flows per block), in the
    flows' ``order`` (:class:`GroupedFlows`)."""
    spread = tuple(itertools.chain.from_iterable(map(itertools.repeat, values, members)))
    return spread if order is None else tuple(map(spread.__getitem__, order))


def _localize(paths: Sequence[tuple[int, ...]]) -> tuple[tuple, tuple[int, ...]]:
    """Paths over global link indices → the same paths over local indices 0, 1, … (in
    order of first use) and the global index of each local link: rates depend only on the
    links the flows cross, so memoized results hold whatever else the network holds."""
    index: dict[int, int] = {}
    local = []
    for path in paths:
        numbers = []
        for g in path:
            number = index.get(g)
            if number is None:
                number = index[g] = len(index)
            numbers.append(number)
        local.append(tuple(numbers))
    return tuple(local), tuple(index)


def _unzip(flows: Iterable[tuple[float, Iterable[Link]]]) -> tuple[tuple, tuple]:
    """``(size_B, route)`` pairs → (sizes, routes); ValueError if one is not a pair."""
    pairs = flows if isinstance(flows, (tuple, list)) else tuple(flows)
    if not pairs:
        return (), ()
    sizes, routes = zip(*pairs, strict=True)
    return sizes, routes


def _path(route: tuple[Link, ...]) -> tuple[int, ...]:
    """A route as link indices."""
    return tuple([link.index for link in route])


MIN_LEFT = 0.01
"""Share of a link's nominal capacity that streams never take (assumption: a saturated link
still gives other flows a little; without it a save behind a log that fills the storage
would never end)."""


def _check_size(size_B: float) -> None:
    if not (math.isfinite(size_B) and size_B >= 0):
        raise ValueError(f"size_B must be finite and >= 0, got {size_B}")


def _check_capacity(capacity_Bps: float) -> None:
    if not (math.isfinite(capacity_Bps) and capacity_Bps >= 0):
        raise ValueError(f"capacity_Bps must be finite and >= 0, got {capacity_Bps}")


def _check_share(share: float) -> None:
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
