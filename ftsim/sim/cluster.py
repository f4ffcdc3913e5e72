"""The cluster's links and where state lives: routes for every transfer, and closed forms.

During a run every byte a policy moves is a flow on the cluster's :class:`ClusterNetwork`
(links of :mod:`ftsim.sim.network`, shared by max-min fairness with whatever else is
moving). Links, all in bytes/s:

- each node's NIC, one link to send and one to receive (``cluster.nic_bandwidth``);
- the checkpoint storage's aggregate write and read bandwidth, and its optional per-node
  write and read limits (``cluster.storage``);
- optional racks (``cluster.racks``): one uplink each way per rack, of capacity
  size × NIC / oversubscription, crossed by traffic leaving or entering the rack (storage
  sits outside every rack);
- background load (``cluster.background``): a share of each embedding PS's NIC taken by the
  job's own training traffic, and a share of the storage taken by other tenants (constant
  or a time series), reserved before any policy transfer.

Routes: node → storage ``(nic_send, [per-node write], [rack up], storage_write)``; storage →
node ``(storage_read, [per-node read], [rack down], nic_recv)``; node → node ``(nic_send,
[rack up, rack down], nic_recv)``.

The closed forms below (:func:`transfer_time_s`) give the time of a transfer that runs
alone, with the storage shared equally among its flows (processor sharing, each flow capped
by its node's bandwidth): the same answer the flow model gives for a lone transfer on a
flat cluster, and its test oracle. Policies use them to plan (e.g. Daly's interval from the
save time); the simulation itself always runs the flows.

Where state lives (used by the policies):

- each embedding PS holds 1/E of the embedding rows and their optimizer state (row-wise
  round-robin sharding balances bytes; table-wise sharding is a trainer-level detail);
- the dense parameters and their optimizer state are replicated on every trainer; a
  checkpoint writes one copy (from trainer 0), and a full restore has every trainer read it.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ftsim.sim.network import Link, Network, Topology, Transfer
from ftsim.sim.nodes import node_name

if TYPE_CHECKING:
    import simpy

    from ftsim.scenario.schema import ClusterParams, JobParams

FlowSpec = tuple[float, tuple[Link, ...]]
"""One flow of a transfer: (bytes, route)."""


def transfer_time_s(
    flow_bytes: Sequence[float], per_node_Bps: float, aggregate_Bps: float, latency_s: float = 0.0
) -> float:
    """Seconds until every flow has moved its bytes under processor sharing.

    ``flow_bytes``: bytes per concurrent flow (one per node). With n active flows each gets
    ``min(per_node_Bps, aggregate_Bps / n)``. Flows of equal size end together, so the cost
    is O(distinct sizes) steps after a sort (a full save of E equal shards is one step).
    """
    sizes = sorted(flow_bytes)
    i = bisect.bisect_right(sizes, 0.0)  # zero-size flows take no time
    if i == len(sizes):
        return 0.0
    elapsed, sent = 0.0, 0.0
    while i < len(sizes):
        size = sizes[i]
        rate = min(per_node_Bps, aggregate_Bps / (len(sizes) - i))
        elapsed += (size - sent) / rate
        sent = size
        i = bisect.bisect_right(sizes, size, i)
    return elapsed + latency_s


def lone_transfer_s(
    flow_bytes: Sequence[float],
    caps_Bps: Sequence[float],
    aggregate_Bps: float,
    latency_s: float = 0.0,
) -> float:
    """Seconds until concurrent flows, each capped at its own rate and all sharing one
    aggregate link by max-min fairness (water-filling), have moved their bytes.

    With equal caps this is :func:`transfer_time_s`. Used to plan with the capacities left
    by constant background load (PS flows capped lower than trainer flows), and ECRM's
    rebuild of a shard (a flow from each of thousands of survivors at 100× nodes): each
    step, flows in order of cap take ``min(cap, what is left / flows left)`` in turn,
    then all move until the first ends. The steps' element-wise arithmetic runs in NumPy
    (the same IEEE operations, so the same floats as flow by flow in Python), and the
    rates of n equal caps, which depend on nothing else, are worked out once
    (:func:`_equal_cap_rates`).
    """
    sizes = np.asarray(flow_bytes, dtype=float)
    caps = np.asarray(caps_Bps, dtype=float)
    if sizes.shape != caps.shape:
        raise ValueError(f"{len(sizes)} flows but {len(caps)} caps")
    moving = sizes > 0
    moving_at_all = bool(moving.any())
    sizes, caps = sizes[moving], caps[moving]
    if len(caps) and not (caps == caps[0]).all():  # equal caps: a stable sort keeps the order
        order = np.argsort(caps, kind="stable")
        sizes, caps = sizes[order], caps[order]
    elapsed = 0.0
    while len(sizes):
        if caps[0] == caps[-1]:  # sorted: all equal
            rates = _equal_cap_rates(float(caps[0]), aggregate_Bps, len(caps))
        else:
            rates = np.array(_water_rates(caps.tolist(), aggregate_Bps))
        if not rates.min() > 0:
            raise ZeroDivisionError("a flow gets no bandwidth: it never ends")
        step = float((sizes / rates).min())
        elapsed += step
        sizes = sizes - rates * step
        moving = sizes > 1e-9 * step * caps
        sizes, caps = sizes[moving], caps[moving]
    return elapsed + latency_s if moving_at_all else 0.0


def _water_rates(caps: list[float], aggregate_Bps: float) -> list[float]:
    """Max-min rates of flows with these caps (ascending) sharing ``aggregate_Bps``: each
    in turn takes its cap or an equal share of what is left."""
    left, rates, n = aggregate_Bps, [], len(caps)
    for i, cap in enumerate(caps):
        rate = min(cap, left / (n - i))
        rates.append(rate)
        left -= rate
    return rates


@functools.lru_cache(maxsize=256)
def _equal_cap_rates(cap_Bps: float, aggregate_Bps: float, n: int) -> np.ndarray:
    """:func:`_water_rates` of ``n`` flows capped at ``cap_Bps`` (read-only), kept for the
    next shard's rebuild plan: a pure function of three numbers."""
    rates = np.array(_water_rates([cap_Bps] * n, aggregate_Bps))
    rates.flags.writeable = False
    return rates


class StateLayout:
    """Bytes of state per node for one scenario, and the storage transfer times it implies
    when a transfer runs alone (closed forms for planning; runs use :class:`ClusterNetwork`).

    Planning takes constant background shares into account (a PS's NIC share, a constant
    storage share); it ignores rack uplinks and a time-varying storage load.
    """

    def __init__(self, job: JobParams, cluster: ClusterParams):
        self.cluster = cluster
        self.shard_bytes = job.embedding_bytes / cluster.emb_ps
        """Embedding rows + optimizer state on one embedding PS, bytes."""
        self.dense_bytes = job.dense_bytes
        """Dense parameters + optimizer state (one replica), bytes."""
        storage = cluster.storage
        background = cluster.background
        ps_nic = cluster.nic_bandwidth * (1.0 - background.ps_nic_share)
        storage_free = 1.0 - (
            background.storage_share if isinstance(background.storage_share, float) else 0.0
        )
        self._write_cap = {
            "trainer": min(cluster.nic_bandwidth, storage.write_bandwidth_per_node or 1e300),
            "emb_ps": min(ps_nic, storage.write_bandwidth_per_node or 1e300),
        }
        self._read_cap = {
            "trainer": min(cluster.nic_bandwidth, storage.read_bandwidth_per_node or 1e300),
            "emb_ps": min(ps_nic, storage.read_bandwidth_per_node or 1e300),
        }
        self._write_aggregate = storage.write_bandwidth * storage_free
        self._read_aggregate = storage.read_bandwidth * storage_free

    @property
    def total_bytes(self) -> float:
        """One full checkpoint: all shards and one dense copy, bytes."""
        return self.shard_bytes * self.cluster.emb_ps + self.dense_bytes

    def write_s(self, flow_bytes: Sequence[float], role: str = "emb_ps") -> float:
        """Seconds to write these concurrent per-node flows (of nodes of ``role``) to
        checkpoint storage, alone."""
        return self._lone(flow_bytes, [self._write_cap[role]] * len(flow_bytes), write=True)

    def read_s(self, flow_bytes: Sequence[float], role: str = "emb_ps") -> float:
        """Seconds to read these concurrent per-node flows from checkpoint storage, alone."""
        return self._lone(flow_bytes, [self._read_cap[role]] * len(flow_bytes), write=False)

    def full_save_s(self) -> float:
        """Every embedding PS writes its shard while trainer 0 writes the dense copy."""
        sizes = [self.shard_bytes] * self.cluster.emb_ps + [self.dense_bytes]
        caps = [self._write_cap["emb_ps"]] * self.cluster.emb_ps + [self._write_cap["trainer"]]
        return self._lone(sizes, caps, write=True)

    def full_load_s(self) -> float:
        """Every embedding PS reads its shard while every trainer reads the dense copy."""
        cluster = self.cluster
        sizes = [self.shard_bytes] * cluster.emb_ps + [self.dense_bytes] * cluster.trainers
        caps = [self._read_cap["emb_ps"]] * cluster.emb_ps
        caps += [self._read_cap["trainer"]] * cluster.trainers
        return self._lone(sizes, caps, write=False)

    def nic_s(self, n_bytes: float) -> float:
        """Seconds to move ``n_bytes`` node to node over one NIC (e.g. from a replica)."""
        return n_bytes / self.cluster.nic_bandwidth + self.cluster.network_latency

    def _lone(self, sizes: Sequence[float], caps: Sequence[float], write: bool) -> float:
        aggregate = self._write_aggregate if write else self._read_aggregate
        latency = self.cluster.network_latency
        if len(set(caps)) <= 1:
            return transfer_time_s(sizes, caps[0] if caps else 1.0, aggregate, latency)
        return lone_transfer_s(sizes, caps, aggregate, latency)


REPEATED_SIZE = 1024
"""Transfers a policy repeats (e.g. ECRM's rebuild ranges, one per set of rebuilt shards)
that the replications of a scenario × policy keep, the most recently used: prod50h meets a
new set of 4 of its 18 PS in most failures (3,060 sets), 100× nodes in every one."""


class SharedRoutes:
    """The links of a cluster, the routes over them and the repeated transfers (a full
    save, every PS writing the same bytes), built as replications first need them and
    shared by the networks of every replication of one scenario × policy (each network
    keeps its own capacities and flows): a replication then costs its events, not the size
    of the cluster. Owned by :class:`ftsim.experiments.prepare.Prepared`."""

    def __init__(self) -> None:
        self.topology = Topology()
        self.routes: dict[str, dict] = {}
        """Kind (``write``, ``read``, ``in``) → node number → its route; ``ps nics`` → every
        PS NIC link."""
        self.transfers: dict = {}
        """Repeated transfers (a full save or load, all PS writing the same bytes), built
        once: the network then recognizes the tuple and skips checking it again."""
        self.repeated: dict = {}
        """Key → a transfer a policy makes again and again (:meth:`ClusterNetwork.repeated`):
        the :data:`REPEATED_SIZE` most recently used, in order of use."""


class ClusterNetwork:
    """The links of one replication's cluster on a :class:`Network`, and the flows of its
    transfers. Links are created when a route first needs them, so the cost follows the
    nodes a run touches."""

    def __init__(
        self,
        env: simpy.Environment,
        cluster: ClusterParams,
        layout: StateLayout,
        shared: SharedRoutes | None = None,
        record: bool = False,
    ):
        """``shared``: what the replications of one scenario × policy share (a new one:
        nothing shared)."""
        self.cluster = cluster
        self.layout = layout
        shared = shared or SharedRoutes()
        topology, self._routes, self._full = shared.topology, shared.routes, shared.transfers
        self._repeated = shared.repeated
        self._writes = self._routes.setdefault("write", {})
        """Node → its route to storage (likewise ``_reads``, ``_ins``), by node number."""
        self._reads = self._routes.setdefault("read", {})
        self._ins = self._routes.setdefault("in", {})
        self._betweens = self._routes.setdefault("between", {})
        self.net = Network(env, cluster.network_latency, record, topology)
        """The flow model; with ``record`` it keeps every finished flow (for traces)."""
        self.trainers = cluster.trainers
        storage = cluster.storage
        self._storage_write = self.net.link("storage.write", storage.write_bandwidth)
        self._storage_read = self.net.link("storage.read", storage.read_bandwidth)
        background = cluster.background
        if background.ps_nic_share:
            self.net.reserve_shares(self._ps_nics(), background.ps_nic_share)
        share = background.storage_share
        for link in (self._storage_write, self._storage_read):
            if isinstance(share, list):
                self.net.follow_shares(link, [(point.at, point.share) for point in share])
            elif share:
                self.net.reserve_share(link, share)

    # -- nodes and links ---------------------------------------------------------------

    def ps_node(self, shard: int) -> int:
        """Global node index of embedding PS ``shard``."""
        return self.trainers + shard

    def _ps_nics(self) -> tuple[Link, ...]:
        """Both links (send, receive) of every embedding PS's NIC, built once for all the
        replications of the scenario."""
        links = self._routes.get("ps nics")
        if links is None:
            nodes = [self.ps_node(shard) for shard in range(self.cluster.emb_ps)]
            links = tuple(self._nic(node, way) for node in nodes for way in ("send", "recv"))
            self._routes["ps nics"] = links
        return links

    def _nic(self, node: int, way: str) -> Link:
        return self.net.link(f"{node_name(self.trainers, node)}.{way}", self.cluster.nic_bandwidth)

    def _rack(self, node: int) -> int | None:
        racks = self.cluster.racks
        return None if racks is None else node // racks.size

    def _uplink(self, rack: int, way: str) -> Link:
        racks = self.cluster.racks
        capacity = racks.size * self.cluster.nic_bandwidth / racks.oversubscription
        return self.net.link(f"rack{rack}.{way}", capacity)

    def _node_limit(self, node: int, write: bool) -> list[Link]:
        storage = self.cluster.storage
        limit = storage.write_bandwidth_per_node if write else storage.read_bandwidth_per_node
        if limit is None:
            return []
        way = "write" if write else "read"
        return [self.net.link(f"storage.{way}.{node_name(self.trainers, node)}", limit)]

    # -- routes ------------------------------------------------------------------------

    def to_storage(self, node: int) -> tuple[Link, ...]:
        route = self._writes.get(node)
        if route is None:
            route = self._writes[node] = self._to_storage(node)
        return route

    def from_storage(self, node: int) -> tuple[Link, ...]:
        route = self._reads.get(node)
        if route is None:
            route = self._reads[node] = self._from_storage(node)
        return route

    def _to_storage(self, node: int) -> tuple[Link, ...]:
        rack = self._rack(node)
        uplink = [] if rack is None else [self._uplink(rack, "up")]
        limit = self._node_limit(node, write=True)
        return (self._nic(node, "send"), *limit, *uplink, self._storage_write)

    def _from_storage(self, node: int) -> tuple[Link, ...]:
        rack = self._rack(node)
        downlink = [] if rack is None else [self._uplink(rack, "down")]
        limit = self._node_limit(node, write=False)
        return (self._storage_read, *limit, *downlink, self._nic(node, "recv"))

    def from_node_side(self, node: int) -> tuple[Link, ...]:
        """What bytes arriving at ``node`` from many senders cross on its side: its NIC's
        receive link (and its rack's downlink when racks are set: senders are spread over
        the cluster)."""
        route = self._ins.get(node)
        if route is None:
            rack = self._rack(node)
            down = () if rack is None else (self._uplink(rack, "down"),)
            route = self._ins[node] = (*down, self._nic(node, "recv"))
        return route

    def between(self, src: int, dst: int) -> tuple[Link, ...]:
        """Node ``src`` to node ``dst``: its NIC's send link, the racks' uplinks if they
        differ, ``dst``'s receive link (built once for every replication)."""
        route = self._betweens.get((src, dst))
        if route is None:
            route = self._betweens[src, dst] = self._between(src, dst)
        return route

    def _between(self, src: int, dst: int) -> tuple[Link, ...]:
        racks = (self._rack(src), self._rack(dst))
        cross = (
            []
            if racks[0] == racks[1]
            else [
                self._uplink(racks[0], "up"),
                self._uplink(racks[1], "down"),
            ]
        )
        return (self._nic(src, "send"), *cross, self._nic(dst, "recv"))

    # -- the transfers policies make ---------------------------------------------------

    def repeated(self, key: tuple, build) -> tuple:
        """The flows ``build()`` makes (a tuple, e.g. a :class:`~ftsim.sim.network.GroupedFlows`,
        kept as it is), built once for every replication of the scenario × policy and kept
        under ``key`` (what determines them; the :data:`REPEATED_SIZE` most recently used
        keys are kept): the network then finds how the transfer runs alone by the tuple,
        not by checking it again. For a transfer a policy makes again and again with the
        same flows (ECRM's rebuild ranges)."""
        repeated = self._repeated
        found = repeated.pop(key, None)
        if found is None:
            built = build()
            found = built if isinstance(built, tuple) else tuple(built)
            if len(repeated) >= REPEATED_SIZE:  # the least recently used goes
                del repeated[next(iter(repeated))]
        repeated[key] = found
        return found

    def shard_writes(self, shards: Sequence[int], bytes_each: float | None = None):
        """Each PS of ``shards`` writes ``bytes_each`` (default: its whole shard) to storage.
        Every PS writing the same bytes (a partial save) is built once per run: the network
        then recognizes it and skips checking it again."""
        size = self.layout.shard_bytes if bytes_each is None else bytes_each
        if len(shards) == self.cluster.emb_ps:
            key = ("all writes", size)
            if key not in self._full:
                flows = [(size, self.to_storage(self.ps_node(s))) for s in range(len(shards))]
                self._full[key] = tuple(flows)
            return self._full[key]
        return [(size, self.to_storage(self.ps_node(s))) for s in shards]

    def shard_reads(self, shards: Sequence[int], bytes_each: float | None = None) -> list:
        """Each PS of ``shards`` reads ``bytes_each`` (default: its whole shard) from storage."""
        size = self.layout.shard_bytes if bytes_each is None else bytes_each
        return [(size, self.from_storage(self.ps_node(s))) for s in shards]

    def dense_write(self) -> list:
        """Trainer 0 writes one copy of the dense state to storage."""
        return [(self.layout.dense_bytes, self.to_storage(0))]

    def dense_reads(self, trainers: Sequence[int] | None = None) -> list:
        """These trainers (default: all) read the dense state from storage."""
        trainers = range(self.trainers) if trainers is None else trainers
        return [(self.layout.dense_bytes, self.from_storage(t)) for t in trainers]

    def full_save(self) -> tuple:
        """Every PS writes its shard while trainer 0 writes the dense copy."""
        if "save" not in self._full:
            flows = [*self.shard_writes(range(self.cluster.emb_ps)), *self.dense_write()]
            self._full["save"] = tuple(flows)
        return self._full["save"]

    def full_load(self) -> tuple:
        """Every PS reads its shard while every trainer reads the dense copy."""
        if "load" not in self._full:
            flows = self.shard_reads(range(self.cluster.emb_ps)) + self.dense_reads()
            self._full["load"] = tuple(flows)
        return self._full["load"]

    def replica_copy(self, trainer: int) -> list:
        """The dense state from a surviving trainer replica to ``trainer``'s replacement."""
        source = (trainer + 1) % self.trainers
        return [(self.layout.dense_bytes, self.between(source, trainer))]

    def stream_on_ps_nics(self, rate_Bps: float) -> None:
        """A continuous stream (e.g. parity updates) takes ``rate_Bps`` of every embedding
        PS's NIC, both ways, from now on; negative to end it. One bulk operation, copied
        from the first replication that made it (O(1) per replication, not O(PS))."""
        self.net.reserve_rates(self._ps_nics(), rate_Bps)

    def stream_to_storage(self, rate_Bps: float) -> None:
        """A continuous write stream (an update log) takes ``rate_Bps`` of the storage's
        aggregate write bandwidth from now on; negative to end it."""
        self.net.reserve_rate(self._storage_write, rate_Bps)

    def start(
        self, flows: list, category: str, label: str = "", activity: str | None = None
    ) -> Transfer:
        """Start these flows now; the event fires when all are done. ``activity``: what
        they do, in their records (default: the category)."""
        transfer = self.net.transfer(flows, label, category)
        if activity is not None:
            transfer.activity = activity
        return transfer

    def link(self, name: str, capacity_Bps: float) -> Link:
        """The link ``name`` of capacity ``capacity_Bps``, made on first use (e.g. a cap on
        the share of a NIC a background activity may take)."""
        return self.net.link(name, capacity_Bps)

    def cancel(self, transfer: Transfer) -> None:
        """Stop a transfer's flows (e.g. interrupted by a failure)."""
        self.net.cancel_transfer(transfer)
