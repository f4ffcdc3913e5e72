"""How a policy writes its full checkpoints: synchronously, or CheckFreq's snapshot and persist.

CheckFreq (Mohan et al., FAST 2021) splits a checkpoint in two: training stalls only for an
in-memory **snapshot** (the largest node's bytes / ``snapshot_bandwidth``; by default the
node's copy rate, half its ``cluster.memory_bandwidth``: a copy on all cores reads and
writes every byte), and the
**persist** to storage runs in the background as flows on the cluster's network, sharing
links with everything else. The checkpoint counts only once persisted: a failure during the
persist loses it when the policy calls :meth:`CheckpointWriter.abort` (a failure of a node
whose state it writes, or one that rolls the job back; recovery uses the previous one), and
a snapshot waits for the previous persist to finish (charged to ``save``). Any policy whose
params derive from :class:`SavingParams` gets both modes through :class:`CheckpointWriter`.

Model events: a synchronous save records :class:`~ftsim.policies.events.Checkpoint`; a
CheckFreq save records :class:`~ftsim.policies.events.Snapshot` at the snapshot and
:class:`~ftsim.policies.events.Commit` when the persist completes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import simpy
from pydantic import Field

from ftsim.policies.base import PolicyParams
from ftsim.policies.events import Checkpoint, Commit, Snapshot
from ftsim.scenario.notices import register_no_effect
from ftsim.scenario.quantities import BytesPerSecond


class SavingParams(PolicyParams):
    """Parameters of a policy that writes full checkpoints."""

    save_mode: Literal["sync", "checkfreq"] = Field(
        "sync", description="sync: stall for the write; checkfreq: snapshot, persist behind"
    )
    snapshot_bandwidth: BytesPerSecond | None = Field(
        None,
        description="per-node in-memory snapshot copy rate (checkfreq); default: half the "
        "cluster's memory_bandwidth (a copy on all cores reads and writes each byte)",
    )
    persist_slowdown: float = Field(
        0.0,
        ge=0,
        description="fractional training slowdown while persisting (checkfreq): CPU and "
        "memory-bandwidth interference of the copy",
    )


def snapshot_Bps(params: SavingParams, cluster) -> float:
    """Copy rate of a CheckFreq snapshot, bytes/s: ``snapshot_bandwidth``, or the
    ``cluster``'s memory copy rate."""
    return params.snapshot_bandwidth or cluster.memory_copy_Bps


def stall_s(params: SavingParams, snapshot_bytes: float, write_s: float, cluster) -> float:
    """Seconds training stalls per checkpoint (the δ of the interval rules), given the
    largest node's bytes and the write's time alone (``write_s``): the write, or with
    CheckFreq the in-memory snapshot."""
    if params.save_mode == "checkfreq":
        return snapshot_bytes / snapshot_Bps(params, cluster)
    return write_s


class CheckpointWriter:
    """Writes one policy's full checkpoints in its ``save_mode`` (one per replication)."""

    def __init__(self, params: SavingParams, snapshot_bytes: float, cluster):
        """``cluster``: the scenario's, whose memory bandwidth sets the default copy rate."""
        self.params = params
        self.checkfreq = params.save_mode == "checkfreq"
        self.snapshot_Bps = snapshot_Bps(params, cluster)
        """Copy rate of a CheckFreq snapshot, bytes/s."""
        self.snapshot_s = snapshot_bytes / self.snapshot_Bps
        """Stall of a CheckFreq snapshot: the largest node's bytes over the copy rate, s."""
        self._persist: simpy.Process | None = None

    def save(
        self,
        sim,
        flows,
        progress_s: float,
        committed: Callable[[float], None],
        detail: str = "checkpoint",
        snapshot_bytes: float | None = None,
    ):
        """Phases of one checkpoint of the state at ``progress_s`` (the flows to write);
        ``committed(progress_s)`` is called once it is in storage. ``detail`` names the
        write in the timeline; ``snapshot_bytes``: the largest node's bytes in this
        checkpoint when they differ from the writer's (a policy whose saves differ in
        content, as SWIFT's shard checkpoints and dense snapshots)."""
        if not self.checkfreq:
            yield from sim.transfer("save", flows, detail)
            committed(progress_s)
            sim.model_event(Checkpoint, key=progress_s)
            return
        if self.persisting:
            yield from sim.wait("save", self._persist, "wait for persist")
        snapshot_s = self.snapshot_s
        if snapshot_bytes is not None:
            snapshot_s = snapshot_bytes / self.snapshot_Bps
        yield from sim.phase("save", snapshot_s, "snapshot")
        sim.model_event(Snapshot, key=progress_s)
        persist = self._persist_behind(sim, flows, progress_s, committed, detail)
        self._persist = sim.background(persist)

    @property
    def persisting(self) -> bool:
        return self._persist is not None and self._persist.is_alive

    def _persist_behind(self, sim, flows, progress_s: float, committed, detail: str):
        start = sim.now
        if self.params.persist_slowdown:
            sim.replan()
        transfer = sim.net.start(flows, "persist", f"persist {detail}")
        try:
            yield transfer
            committed(progress_s)
            sim.model_event(Commit, key=progress_s)
        except simpy.Interrupt:
            sim.net.cancel(transfer)
        sim.record(start, sim.now, "persist")
        if sim.is_active(self._persist):
            self._persist = None
        if self.params.persist_slowdown:
            sim.replan()

    def abort(self) -> None:
        """A persist under way is lost (e.g. every node rolls back)."""
        if self.persisting:
            self._persist.interrupt("failure")

    def on_failure(self, nodes, trainers: int, rollback: bool = False, dense: bool = True) -> bool:
        """A failure of the global node indices ``nodes`` (the first ``trainers`` are
        trainers): the persist under way is lost if the failure rolls the job back, takes a
        PS (its in-memory snapshot of the shard) or, when the persist carries the dense copy
        (``dense``), trainer 0, which writes it; another trainer is repaired from a replica
        and the persist goes on. Returns whether a persist was lost."""
        lost = self.persisting and (
            rollback or any(n >= trainers for n in nodes) or (dense and 0 in nodes)
        )
        if lost:
            self._persist.interrupt("failure")
        return lost

    def slowdown(self) -> dict[str, float]:
        """Training slowdown while a persist runs (``persist_slowdown``, charged to other)."""
        return {"other": self.params.persist_slowdown} if self.persisting else {}


for _name in ("snapshot_bandwidth", "persist_slowdown"):
    register_no_effect(
        SavingParams,
        _name,
        lambda p, s: "save_mode is sync (no snapshot)" if p.save_mode == "sync" else None,
    )
