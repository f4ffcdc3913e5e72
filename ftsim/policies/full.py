"""``full``: periodic full checkpoint, full recovery (the baseline).

Every ``interval`` of compute, all state is saved: each embedding PS writes its shard and
trainer 0 writes the dense parameters, concurrently, as flows on the cluster's network
(:mod:`ftsim.sim.cluster`), sharing links with anything else moving then. On any failure,
every node reloads the last committed checkpoint after the failed nodes are rescheduled,
and the work since that checkpoint is re-executed.

Save modes (:mod:`ftsim.policies.saving`, shared with every policy that saves):

- ``sync``: training stalls for the whole write (δ = write time).
- ``checkfreq``: CheckFreq's two phases (Mohan et al., FAST 2021). Training stalls only for
  an in-memory snapshot (bytes per node / ``snapshot_bandwidth``); the persist to storage
  runs in the background as flows on the network (competing with the job's own traffic
  where ``cluster.background`` reserves a share of the links), optionally slowing training
  by ``persist_slowdown`` (CPU and memory-bandwidth interference of the copy). The
  checkpoint counts only once persisted: a failure during the persist loses it. A snapshot
  waits for the previous persist to finish (charged to ``save``).

``interval`` is a duration, or ``young`` / ``daly`` for the optimum from the job's MTBF
and the stall cost δ (:mod:`ftsim.sim.theory`).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from ftsim.notices import short_duration
from ftsim.policies.base import Plan, Policy, check_planned_interval, register
from ftsim.policies.events import RestoreAll
from ftsim.policies.saving import CheckpointWriter, SavingParams, stall_s
from ftsim.scenario.intervals import Interval
from ftsim.sim.theory import daly_interval_s, young_interval_s


class FullParams(SavingParams):
    """Parameters of ``full``."""

    kind: Literal["full"]
    interval: Interval = Field("daly", description="compute between checkpoints, or young/daly")

    def part_problems(self, dense, by_rows):
        message = "full recovery rolls every node back: use cpr (partial recovery) for a part"
        return [("kind", message)]


def resolve_interval_s(rule: float | str, delta_s: float, mtbf_s: float) -> float:
    """The interval in seconds: given, or the Young/Daly optimum (the whole job if no failures)."""
    if not isinstance(rule, str):
        return rule
    if math.isinf(mtbf_s):
        return math.inf
    return (
        young_interval_s(delta_s, mtbf_s) if rule == "young" else daly_interval_s(delta_s, mtbf_s)
    )


def planned_interval_s(work_s: float, rule: float | str, delta_s: float, mtbf_s: float) -> float:
    """:func:`resolve_interval_s` for a policy's ``interval``; a rule's interval too short
    to simulate over ``work_s`` of training is refused
    (:func:`~ftsim.policies.base.check_planned_interval`)."""
    interval_s = resolve_interval_s(rule, delta_s, mtbf_s)
    if isinstance(rule, str):
        how = (
            f"{rule} (job MTBF {short_duration(mtbf_s)}, checkpoint stall "
            f"{short_duration(delta_s)}) resolves to"
        )
        check_planned_interval(work_s, "interval", interval_s, how)
    return interval_s


class FullCheckpoint(Policy):
    """Full checkpoint, full recovery: one replication."""

    def __init__(self, plan: FullPlan):
        super().__init__(plan)
        self.writer = CheckpointWriter(self.params, plan.snapshot_bytes, plan.inputs.cluster)
        self.committed_s = 0.0
        """Progress captured by the last checkpoint that is safely in storage."""
        self.next_s = plan.interval_s

    def next_action_at(self) -> float:
        return self.next_s

    def act(self, sim):
        progress = sim.progress_s
        yield from self.writer.save(sim, sim.net.full_save(), progress, self._commit)
        self.next_s = progress + self.plan.interval_s

    def _commit(self, progress_s: float) -> None:
        self.committed_s = progress_s
        self.n_checkpoints += 1

    def slowdown(self) -> dict[str, float]:
        return self.writer.slowdown()

    def on_failure(self, sim, failure) -> None:
        self.writer.abort()
        sim.model_event(RestoreAll, key=self.committed_s)
        sim.rollback_to(self.committed_s)
        self.next_s = self.committed_s + self.plan.interval_s

    def recover(self, sim, failures):
        yield from sim.await_replacements(failures)
        yield from sim.transfer("load", sim.net.full_load(), "restore all state")

    def result_columns(self):
        plan = self.plan
        return {
            "interval_h": plan.interval_s / 3600.0,
            "saved_gb": self.n_checkpoints * self.layout.total_bytes / 1e9,
            "save_cost_s": plan.stall_s,
            "load_cost_s": plan.load_s,
        }


@register(FullParams)
class FullPlan(Plan):
    """What every replication of ``full`` shares: the save and load times alone and the
    interval."""

    Runtime = FullCheckpoint

    def __init__(self, params: FullParams, inputs):
        super().__init__(params, inputs)
        layout = self.layout
        self.save_s = layout.full_save_s()
        """Seconds to write a full checkpoint alone."""
        self.load_s = layout.full_load_s()
        """Seconds for every node to read the checkpoint back alone."""
        self.snapshot_bytes = max(layout.shard_bytes, layout.dense_bytes)
        """The largest node's bytes (what a CheckFreq snapshot copies)."""
        self.stall_s = stall_s(params, self.snapshot_bytes, self.save_s, inputs.cluster)
        """Seconds training stalls per checkpoint (δ of the interval rules)."""
        self.interval_s = planned_interval_s(
            inputs.job.work_s, params.interval, self.stall_s, inputs.mtbf_s
        )
