"""Bandwidth model of the cluster: how long moving state to or from storage takes.

A transfer is a set of flows, one per node, each of a given size in bytes. Each flow is
capped by its node's bandwidth (the lesser of the NIC and the storage's per-node limit) and
all flows together by the storage's aggregate bandwidth, which they share equally
(processor sharing): when a small flow finishes, the others speed up. The duration of the
whole transfer is when the last flow finishes, plus one network latency.

Where state lives (used by the policies):

- each embedding PS holds 1/E of the embedding rows and their optimizer state (row-wise
  round-robin sharding balances bytes; table-wise sharding is a trainer-level detail);
- the dense parameters and their optimizer state are replicated on every trainer; a
  checkpoint writes one copy (from trainer 0), and a full restore has every trainer read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftsim.scenario.schema import Scenario


def transfer_time_s(
    flow_bytes: Sequence[float], per_node_Bps: float, aggregate_Bps: float, latency_s: float = 0.0
) -> float:
    """Seconds until every flow has moved its bytes under processor sharing.

    ``flow_bytes``: bytes per concurrent flow (one per node). With n active flows each gets
    ``min(per_node_Bps, aggregate_Bps / n)``.
    """
    sizes = sorted(b for b in flow_bytes if b > 0)
    if not sizes:
        return 0.0
    elapsed, sent = 0.0, 0.0
    for i, size in enumerate(sizes):
        rate = min(per_node_Bps, aggregate_Bps / (len(sizes) - i))
        elapsed += (size - sent) / rate
        sent = size
    return elapsed + latency_s


class StateLayout:
    """Bytes of state per node for one scenario, and the storage transfer times it implies."""

    def __init__(self, scenario: Scenario):
        job, cluster = scenario.job, scenario.cluster
        self.cluster = cluster
        self.shard_bytes = job.embedding_bytes / cluster.emb_ps
        """Embedding rows + optimizer state on one embedding PS, bytes."""
        self.dense_bytes = job.dense_bytes
        """Dense parameters + optimizer state (one replica), bytes."""
        storage = cluster.storage
        self._write_node = min(cluster.nic_bandwidth, storage.write_bandwidth_per_node or 1e300)
        self._read_node = min(cluster.nic_bandwidth, storage.read_bandwidth_per_node or 1e300)

    @property
    def total_bytes(self) -> float:
        """One full checkpoint: all shards and one dense copy, bytes."""
        return self.shard_bytes * self.cluster.emb_ps + self.dense_bytes

    def write_s(self, flow_bytes: Sequence[float]) -> float:
        """Seconds to write these concurrent per-node flows to checkpoint storage."""
        return transfer_time_s(
            flow_bytes,
            self._write_node,
            self.cluster.storage.write_bandwidth,
            self.cluster.network_latency,
        )

    def read_s(self, flow_bytes: Sequence[float]) -> float:
        """Seconds to read these concurrent per-node flows from checkpoint storage."""
        return transfer_time_s(
            flow_bytes,
            self._read_node,
            self.cluster.storage.read_bandwidth,
            self.cluster.network_latency,
        )

    def full_save_s(self) -> float:
        """Every embedding PS writes its shard while trainer 0 writes the dense copy."""
        return self.write_s([self.shard_bytes] * self.cluster.emb_ps + [self.dense_bytes])

    def full_load_s(self) -> float:
        """Every embedding PS reads its shard while every trainer reads the dense copy."""
        return self.read_s(
            [self.shard_bytes] * self.cluster.emb_ps + [self.dense_bytes] * self.cluster.trainers
        )

    def nic_s(self, n_bytes: float) -> float:
        """Seconds to move ``n_bytes`` node to node over one NIC (e.g. from a replica)."""
        return n_bytes / self.cluster.nic_bandwidth + self.cluster.network_latency
