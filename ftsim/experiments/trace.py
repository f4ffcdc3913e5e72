"""Trace export: one replication as a Chrome / Perfetto trace-event file (``ftsim trace``).

A run folder keeps the job-level timeline of replication 0 only, not what each node and
link did, so the requested replication of each requested policy is simulated again from
the folder's ``scenario.yaml`` (timing only; deterministic by seed, so it is the
replication of ``runs.csv``, which is checked) with the network recording every flow
(:class:`ftsim.sim.network.FlowRecord`). The trace is built from the simulation's
timeline phases, its failures and the flow records:

- per policy, a process ``LABEL: job`` with the tracks ``phases`` (what the job does:
  compute, redo, degraded, save, load, replay, reschedule), ``background`` (persists,
  rebuilds) and ``failures`` (an instant per failure);
- ``LABEL: trainers`` and ``LABEL: embedding PS``: a track per node with the job's compute
  phases, the node's part of every transfer (one span per transfer: its flows from or to
  that node), its failures (instants) and the rescheduling of its replacement;
- ``LABEL: NICs``, ``LABEL: storage`` and ``LABEL: racks``: a track per link that carried
  bytes (NIC send/receive, the storage's aggregate and per-node write/read links, rack
  uplinks), one span per transfer with the bytes it moved over that link;
- flow arrows (``ph`` ``s`` → ``f``), one per flow (that lasts 2 µs or more), from its
  source (a node, or the storage read link) to its destination (a node, or the storage
  write link).

Spans on one track that overlap without nesting (a background persist during compute) go
to extra lanes of that track (``trainer0 (2)``), so every thread of the trace holds
properly ordered complete events. Times are simulated seconds written as whole
microseconds (``ts``, ``dur``; the trace-event format's unit). Flows still moving when the
simulation stopped (e.g. a persist in flight at the end of training) end at the last
instant and are counted in ``in_progress_flows``.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ftsim.experiments.runner import simulate
from ftsim.scenario.schema import Scenario
from ftsim.sim.accounting import CATEGORIES
from ftsim.sim.engine import Simulation
from ftsim.sim.network import FlowRecord
from ftsim.sim.nodes import node_name

US_PER_S = 1e6
JOB_KINDS = frozenset(CATEGORIES) | {"compute", "redo", "degraded"}
"""Timeline kinds of the job itself (the rest, e.g. persist and rebuild, run beside it)."""
COMPUTE_KINDS = ("compute", "redo", "degraded")
_NIC = re.compile(r"^((?:trainer|emb_ps)\d+)\.(send|recv)$")
_NODE = re.compile(r"^(trainer|emb_ps)(\d+)$")
_REBUILD_CAP = re.compile(r"^(?:[^/]+/)?ecrm\.flow\.emb_ps\d+>(emb_ps\d+)$")
"""ECRM's cap on one rebuild connection (``flow_bandwidth``), survivor > replacement: a
track beside the replacement's NIC (a composed part's own links are named after the part
first)."""


class TraceError(Exception):
    """A run folder that cannot be traced (printed as is; exit status 2)."""


def _us(seconds: float) -> int:
    """Simulated seconds → whole trace microseconds (integers: a viewer reads them exactly,
    so spans that follow each other never overlap by a rounding error)."""
    return round(seconds * US_PER_S)


@dataclass
class _Span:
    start_us: int
    end_us: int
    name: str
    cat: str
    args: dict
    tid: int = 0
    pid: int = 0


@dataclass
class _Track:
    """A named row of the trace: spans in lanes (threads) where none overlap."""

    name: str
    spans: list[_Span] = field(default_factory=list)
    instants: list[tuple[int, str, str, dict]] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)

    def span(self, start_s: float, end_s: float, name: str, cat: str, args: dict) -> _Span:
        span = _Span(_us(start_s), _us(end_s), name, cat, args)
        self.spans.append(span)
        return span

    def instant(self, time_s: float, name: str, cat: str, args: dict) -> None:
        self.instants.append((_us(time_s), name, cat, args))

    def assign_lanes(self, new_tid) -> None:
        """First fit in start order: a span goes to the first lane free at its start."""
        lane_ends: list[int] = []
        for span in sorted(self.spans, key=lambda s: (s.start_us, s.end_us)):
            free = [lane for lane, end in enumerate(lane_ends) if end <= span.start_us]
            lane = free[0] if free else len(lane_ends)
            if not free:
                lane_ends.append(0)
            lane_ends[lane] = span.end_us
            span.tid = lane
        self.tids = [new_tid() for _ in range(max(len(lane_ends), 1))]
        for span in self.spans:
            span.tid = self.tids[span.tid]


@dataclass
class _Process:
    name: str
    tracks: dict[str, _Track] = field(default_factory=dict)

    def track(self, name: str) -> _Track:
        if name not in self.tracks:
            self.tracks[name] = _Track(name)
        return self.tracks[name]


@dataclass
class _Transfer:
    """The flows of one transfer that share a track (a node or a link), aggregated."""

    span: _Span
    bytes: float = 0.0
    moved: float = 0.0
    flows: int = 0
    cancelled: int = 0
    in_progress: int = 0


def _link_order(name: str, trainers: int) -> tuple:
    """Sort key of link tracks: NICs by node index, send before receive before a rebuild
    cap; storage aggregate links before per-node ones; racks by number."""
    nic = _NIC.match(name) or _REBUILD_CAP.match(name)
    if nic:
        role, number = _NODE.match(nic[1]).groups()
        index = int(number) + (trainers if role == "emb_ps" else 0)
        return (0, index, 2 if nic.re is _REBUILD_CAP else int(nic[2] != "send"), name)
    if name.startswith("storage."):
        parts = name.split(".")
        return (1, len(parts), parts[1] != "write", name)
    rack = re.match(r"^rack(\d+)\.(up|down)$", name)
    if rack:
        return (2, int(rack[1]), rack[2] != "up")
    return (3, name)


def _link_group(name: str) -> str:
    if _NIC.match(name) or _REBUILD_CAP.match(name):
        return "NICs"
    if name.startswith("storage."):
        return "storage"
    return "racks"


def endpoints(links: Iterable[str]) -> tuple[str | None, str | None]:
    """A flow's source and destination from its route: a node (``emb_ps3``, whose NIC send
    or receive link it crosses) or the storage (its ``storage.read`` / ``storage.write``
    link, named so)."""
    src = dst = None
    for name in links:
        nic = _NIC.match(name)
        if nic:
            if nic[2] == "send":
                src = nic[1]
            else:
                dst = nic[1]
        elif name == "storage.write":
            dst = name
        elif name == "storage.read":
            src = name
    return src, dst


def _flows(sim: Simulation) -> list[tuple[FlowRecord, bool]]:
    """Every flow of the simulation as (record, in progress at the end)."""
    network = sim.net.net
    if network.records is None:
        raise ValueError("the simulation did not record flows (simulate with record_flows)")
    active = network.flows  # builds a transfer still running alone (may add records)
    out = [(record, False) for record in network.records]
    for flow in active:
        links = tuple(link.name for link in flow.route)
        end_s = sim.wall_s
        activity = flow.transfer.activity if flow.transfer is not None else flow.category
        record = FlowRecord(
            flow.start_s,
            end_s,
            flow.size_B,
            flow.moved_B,
            links,
            flow.label,
            flow.category,
            False,
            activity,
        )
        out.append((record, True))
    return out


class _PolicyTrace:
    """The processes and arrows of one simulated policy."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        label = sim.policy.params.label
        cluster = sim.scenario.cluster
        self.trainers = cluster.trainers
        self.emb_ps = cluster.emb_ps
        self.job = _Process(f"{label}: job")
        self.nodes = {
            "trainer": _Process(f"{label}: trainers"),
            "emb_ps": _Process(f"{label}: embedding PS"),
        }
        self.links = {g: _Process(f"{label}: {g}") for g in ("NICs", "storage", "racks")}
        self.job.track("phases")
        for i in range(self.trainers + self.emb_ps):
            self._node(node_name(self.trainers, i))  # every node has a track, idle or not
        self.arrows: list[tuple[float, _Span, float, _Span, str]] = []
        self._phases()
        self._failures()
        self._transfers()

    def _node(self, name: str) -> _Track:
        return self.nodes[_NODE.match(name)[1]].track(name)

    def _link(self, name: str) -> _Track:
        return self.links[_link_group(name)].track(name)

    def _track(self, endpoint: str) -> _Track:
        return self._node(endpoint) if _NODE.match(endpoint) else self._link(endpoint)

    def _phases(self) -> None:
        nodes = [node_name(self.trainers, i) for i in range(self.trainers + self.emb_ps)]
        for phase in self.sim.timeline:
            name, kind = phase.activity, phase.category
            args = {"detail": phase.text} if phase.text else {}
            if phase.part is not None:  # a composed policy's part did it: its own track
                track = self.job.track(f"part {phase.part}")
                track.span(phase.start_s, phase.end_s, name, kind, args)
            if kind in JOB_KINDS:
                self.job.track("phases").span(phase.start_s, phase.end_s, name, kind, args)
            else:
                track = self.job.track("background")
                track.span(phase.start_s, phase.end_s, name, kind, args)
                for node in phase.nodes:  # e.g. the replacements a rebuild restores
                    track = self._node(node_name(self.trainers, node))
                    track.span(phase.start_s, phase.end_s, name, kind, args)
            if kind in COMPUTE_KINDS:
                for node in nodes:
                    self._node(node).span(phase.start_s, phase.end_s, name, kind, {})

    def _failures(self) -> None:
        for failure in self.sim.failures_seen:
            names = [node_name(self.trainers, n) for n in failure.nodes]
            args = {
                "nodes": " ".join(names),
                "source": failure.source,
                "reschedule_s": failure.reschedule_s,
            }
            self.job.track("failures").instant(failure.time_s, "failure", "failure", args)
            ready_s = failure.time_s + (failure.reschedule_s or 0.0)
            for name in names:
                track = self._node(name)
                track.instant(failure.time_s, "failure", "node_failure", args)
                if ready_s > failure.time_s:
                    detail = {"detail": "replace the failed node", "ready_h": ready_s / 3600}
                    track.span(failure.time_s, ready_s, "reschedule", "reschedule", detail)

    def _transfers(self) -> None:
        groups: dict[tuple, _Transfer] = {}

        def add(track: _Track, key: tuple, record: FlowRecord, in_progress: bool) -> _Span:
            found = groups.get((track.name, key))
            if found is None:
                name = record.activity
                args = {"label": record.label, "category": record.category}
                span = track.span(record.start_s, record.end_s, name, record.category, args)
                found = groups[track.name, key] = _Transfer(span)
            found.span.end_us = max(found.span.end_us, _us(record.end_s))
            found.bytes += record.size_B
            found.moved += record.moved_B
            found.flows += 1
            found.cancelled += record.cancelled
            found.in_progress += in_progress
            return found.span

        for record, in_progress in _flows(self.sim):
            key = (record.start_s, record.label, record.category)
            src, dst = endpoints(record.links)
            spans = {}
            for endpoint in (src, dst):
                if endpoint is not None and _NODE.match(endpoint):
                    spans[endpoint] = add(self._node(endpoint), key, record, in_progress)
            for link in record.links:
                spans.setdefault(link, add(self._link(link), key, record, in_progress))
            if src and dst:
                arrow = (record.start_s, spans[src], record.end_s, spans[dst], record.activity)
                self.arrows.append(arrow)
        for transfer in groups.values():
            args = transfer.span.args
            args["bytes"] = transfer.bytes
            args["moved_bytes"] = transfer.moved
            args["flows"] = transfer.flows
            seconds = (transfer.span.end_us - transfer.span.start_us) / US_PER_S
            if seconds > 0:  # over the span, in whole microseconds
                args["mean_rate_GBps"] = transfer.moved / seconds / 1e9
            if transfer.cancelled:
                args["cancelled_flows"] = transfer.cancelled
            if transfer.in_progress:
                args["in_progress_flows"] = transfer.in_progress

    def processes(self) -> list[_Process]:
        links = []
        for process in self.links.values():
            order = sorted(process.tracks, key=lambda n: _link_order(n, self.trainers))
            process.tracks = {name: process.tracks[name] for name in order}
            links.append(process)
        parts = [f"part {part}" for part in self.sim.policy.part_names]
        job_order = [
            n for n in ("phases", *parts, "background", "failures") if n in self.job.tracks
        ]
        self.job.tracks = {name: self.job.tracks[name] for name in job_order}
        found = [self.job, self.nodes["trainer"], self.nodes["emb_ps"], *links]
        return [p for p in found if p.tracks]


def trace_events(sims: list[Simulation]) -> list[dict]:
    """The trace events of these simulations (each recorded with ``record_flows``)."""
    metadata: list[dict] = []
    events: list[dict] = []
    flows: list[dict] = []
    counter = {"tid": 0}

    def new_tid() -> int:
        counter["tid"] += 1
        return counter["tid"]

    pid = 0
    arrow_id = 0
    for sim in sims:
        built = _PolicyTrace(sim)
        for process in built.processes():
            pid += 1
            metadata += [
                _meta("process_name", pid, 0, {"name": process.name}),
                _meta("process_sort_index", pid, 0, {"sort_index": pid}),
            ]
            for track in process.tracks.values():
                track.assign_lanes(new_tid)
                for lane, tid in enumerate(track.tids):
                    name = track.name if lane == 0 else f"{track.name} ({lane + 1})"
                    metadata += [
                        _meta("thread_name", pid, tid, {"name": name}),
                        _meta("thread_sort_index", pid, tid, {"sort_index": tid}),
                    ]
                for span in track.spans:
                    span.pid = pid
                    events.append(
                        {
                            "name": span.name,
                            "cat": span.cat,
                            "ph": "X",
                            "ts": span.start_us,
                            "dur": span.end_us - span.start_us,
                            "pid": pid,
                            "tid": span.tid,
                            "args": span.args,
                        }
                    )
                for ts, name, cat, args in track.instants:
                    events.append(
                        {
                            "name": name,
                            "cat": cat,
                            "ph": "i",
                            "s": "t",
                            "ts": ts,
                            "pid": pid,
                            "tid": track.tids[0],
                            "args": args,
                        }
                    )
        for start_s, src, end_s, dst, name in built.arrows:
            start, end = _us(start_s), _us(end_s)
            if end - start < 2:
                continue  # too short to bind strictly inside its spans
            arrow_id += 1
            # 1 µs inside the flow: strictly within the source's and destination's spans,
            # the slices the viewer binds the arrow's ends to
            common = {"name": name, "cat": "transfer", "id": arrow_id}
            flows.append({**common, "ph": "s", "ts": start + 1, "pid": src.pid, "tid": src.tid})
            flows.append(
                {**common, "ph": "f", "bp": "e", "ts": end - 1, "pid": dst.pid, "tid": dst.tid}
            )
    events.sort(key=lambda e: (e["ts"], e["pid"], e["tid"]))
    return metadata + events + flows


def _meta(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def build_trace(scenario: Scenario, policy_indices: list[int], rep: int) -> tuple[dict, list]:
    """Simulate replication ``rep`` of these policies with flow records; the trace (the
    trace-event JSON object) and the simulations."""
    sims = [simulate(scenario, i, rep, record_flows=True) for i in policy_indices]
    trace = {
        "traceEvents": trace_events(sims),
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": GENERATOR,
            "scenario": scenario.name,
            "policies": ", ".join(sim.policy.params.label for sim in sims),
            "replication": rep,
            "seed": scenario.run.seed,
            "time": "simulated time; ts and dur in microseconds",
        },
    }
    return trace, sims


GENERATOR = "ftsim trace"
"""``otherData.generator`` of the traces written here: how an earlier one is recognised."""


def check_trace_file(path: Path, force: bool = False) -> None:
    """TraceError unless a trace may be written to ``path``: a new file, a trace written
    here before (replaced), or with ``force`` any regular file; never anything else (a
    device such as ``/dev/full``, a FIFO): the trace is written beside it and moved over
    it, which replaces the node itself (as root, a device)."""
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror.lower()}") from None
    if not stat.S_ISREG(mode):
        raise TraceError(f"{path}: not a regular file; give a new file's name or a folder")
    if not force and not _is_trace(path):
        raise TraceError(
            f"{path}: exists and is not a trace written by ftsim trace; "
            "give another name, or --force to replace it"
        )


def _is_trace(path: Path) -> bool:
    """Whether the file ``path`` begins as :func:`write_trace` begins a trace."""
    try:
        with gzip.open(path) if path.suffix == ".gz" else path.open("rb") as file:
            head = file.read(200)
    except (OSError, EOFError):  # (gzip.BadGzipFile is an OSError)
        return False
    return f'"generator": "{GENERATOR}"'.encode() in head


def write_trace(path: Path, trace: dict) -> None:
    """One event per line; gzip-compressed when ``path`` ends in ``.gz`` (the Perfetto UI
    opens both)."""
    from ftsim.experiments.output import atomic_write_bytes

    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    lines = ",\n".join(json.dumps(e, separators=(",", ":")) for e in trace["traceEvents"])
    text = json.dumps(head)[:-1] + ',\n"traceEvents":[\n' + lines + "\n]}\n"
    data = text.encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    atomic_write_bytes(path, data)


# -- run folders --------------------------------------------------------------------------


def read_run_folder(run_dir: Path) -> tuple[Scenario, list[dict]]:
    """The resolved scenario of a ``run`` folder and its result rows; TraceError if the
    folder is not one."""
    from ftsim.experiments.folders import FolderError, check_results
    from ftsim.experiments.lock import writer
    from ftsim.scenario.loader import load_scenario

    if run_dir.is_file():
        raise TraceError(f"{run_dir}: is a file; give a run folder (the output of ftsim run)")
    if not run_dir.is_dir():
        raise TraceError(f"{run_dir}: no such folder")
    manifest = run_dir / "manifest.json"
    if manifest.is_file():
        try:
            command = json.loads(manifest.read_text()).get("command")
        except OSError as exc:
            raise TraceError(f"{manifest}: cannot read the manifest ({exc.strerror})") from None
        except (ValueError, AttributeError):
            command = None
        if command == "sweep":
            raise TraceError(
                f"{run_dir}: a sweep folder; trace needs a run folder: run the point you want "
                "with `ftsim run SCENARIO --set KEY=VALUE ...` and trace that"
            )
    holder = writer(run_dir)
    if holder is not None and not (run_dir / "runs.csv").exists():  # not "not a run folder"
        raise TraceError(
            f"{run_dir}: another ftsim process{holder} is writing its results there: trace "
            "it once that ends"
        )
    for name in ("scenario.yaml", "runs.csv"):
        if (run_dir / name).is_dir():
            raise TraceError(f"{run_dir / name}: is a folder, not a file (not a run folder)")
        if not (run_dir / name).is_file():
            raise TraceError(f"{run_dir}: no {name} (not a run folder)")
    try:  # plot's checks: a damaged manifest or runs.csv was traced as if whole (exit 0)
        check_results(run_dir)
    except FolderError as exc:
        raise TraceError(str(exc)) from None
    scenario = load_scenario(run_dir / "scenario.yaml")
    with (run_dir / "runs.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return scenario, rows


def edited_scenario(run_dir: Path, scenario: Scenario) -> str | None:
    """Why the folder's ``scenario.yaml`` is not the one that ran, when its config hash
    differs from the manifest's (it was edited), else None."""
    from ftsim.scenario.loader import config_hash, input_digests

    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        recorded = manifest.get("config_hash")
    except (OSError, ValueError, AttributeError):
        return None
    now_inputs = input_digests(scenario)
    for path, digest in (manifest.get("inputs") or {}).items():
        if now_inputs.get(path, digest) != digest:
            return (
                f"{path} changed after the run (its SHA-256 is now {now_inputs[path][:12]}…, "
                f"the manifest's {digest[:12]}…)"
            )
    now = config_hash(scenario)
    if not isinstance(recorded, str) or recorded == now:
        return None
    return (
        f"scenario.yaml was edited after the run (its config hash is {now}, the manifest's "
        f"{recorded})"
    )


def mismatches(sims: list[Simulation], rows: list[dict], edited: str | None = None) -> list[str]:
    """Warnings for re-simulated replications that differ from the folder's ``runs.csv``:
    ``edited`` says why (the scenario was edited), else another version of ftsim made it."""
    warnings = []
    why = edited or "the folder was made by another version of ftsim"
    for sim in sims:
        row = sim.row()
        stored = [
            r for r in rows if r.get("policy") == row["policy"] and r.get("rep") == str(row["rep"])
        ]
        if not stored:
            warnings.append(
                f"warning: runs.csv has no row for {row['policy']} replication {row['rep']}"
            )
            continue
        differ = []
        for column in TRACED:
            try:
                was = float(stored[0][column])
            except (KeyError, ValueError):
                continue
            if not math.isclose(was, row[column], rel_tol=1e-9, abs_tol=1e-12):
                differ.append(f"{column} {row[column]:.6g} vs {was:.6g}")
        if differ:
            warnings.append(
                f"warning: {row['policy']} replication {row['rep']} simulated again differs "
                f"from runs.csv ({', '.join(differ)}): {why}; the trace shows this "
                "version's simulation of the folder's scenario.yaml"
            )
    return warnings


TRACED = ("wall_h", "n_failures", *(f"{c}_h" for c in CATEGORIES))
"""The columns of runs.csv a trace's re-simulation must reproduce: what the trace draws
(the job's phases by category, the failures, the end)."""
