"""``ftsim trace``: a replication as a Chrome/Perfetto trace-event file.

The file is checked against the trace-event format (the fields every event needs, complete
events that nest, flow arrows that pair up and bind to a slice, metadata naming every
process and thread) and against the simulation it shows (failures, saves, bytes).
"""

import csv
import gzip
import json
import os
import stat
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from ftsim.cli import main
from ftsim.experiments.runner import simulate
from ftsim.experiments.trace import endpoints
from ftsim.policies.inputs import PlanInputs
from tests.conftest import SCENARIOS, scenario

PHASES = {"X", "i", "s", "f", "M"}


def check_trace_format(trace: dict) -> list[dict]:
    """Assert that ``trace`` is valid trace-event JSON (Object Format); its events."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    events = trace["traceEvents"]
    names: dict[str, set] = {"process_name": set(), "thread_name": set()}
    used_pids, used_threads = set(), set()
    spans = defaultdict(list)
    arrows = defaultdict(list)
    for e in events:
        for key in ("name", "ph", "ts", "pid", "tid"):
            assert key in e, f"{key} missing: {e}"
        assert isinstance(e["name"], str) and e["name"]
        assert e["ph"] in PHASES, e
        assert isinstance(e["ts"], int | float) and isinstance(e["pid"], int)
        assert isinstance(e["tid"], int)
        if e["ph"] == "M":
            if e["name"] in names:
                assert isinstance(e["args"]["name"], str) and e["args"]["name"]
                names[e["name"]].add(
                    e["pid"] if e["name"] == "process_name" else (e["pid"], e["tid"])
                )
            continue
        used_pids.add(e["pid"])
        used_threads.add((e["pid"], e["tid"]))
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0, e
            spans[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
        elif e["ph"] == "i":
            assert e.get("s", "t") in {"g", "p", "t"}
        else:
            assert "id" in e and "cat" in e, e
            arrows[e["id"]].append(e)
    assert used_pids <= names["process_name"], "a pid without a process_name"
    assert used_threads <= names["thread_name"], "a tid without a thread_name"
    for thread, intervals in spans.items():  # complete events on a thread nest or follow
        stack: list[float] = []
        for start, end in sorted(intervals, key=lambda iv: (iv[0], -iv[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"{thread}: spans overlap without nesting"
            stack.append(end)
    for flow_id, pair in arrows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], f"flow {flow_id}: {pair}"
        start, end = sorted(pair, key=lambda e: e["ph"] == "f")
        assert start["cat"] == end["cat"] and start["name"] == end["name"]
        assert start["ts"] <= end["ts"]
        for e in pair:  # each end binds to a slice enclosing it on its thread
            enclosing = spans[e["pid"], e["tid"]]
            assert any(a < e["ts"] < b for a, b in enclosing), f"flow {flow_id} binds nowhere"
    return events


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke") / "run"
    assert main(["run", str(SCENARIOS / "smoke.yaml"), "--reps", "3", "-q", "-o", str(out)]) == 0
    return out


def _trace(run_dir, *args, out=None):
    out = out or run_dir / "t.json"
    assert main(["trace", str(run_dir), *args, "-o", str(out)]) == 0
    data = out.read_bytes()
    return json.loads(gzip.decompress(data) if out.suffix == ".gz" else data)


def _processes(events):
    return {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}


def _threads(events):
    return {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}


def test_the_trace_is_valid_and_shows_every_failure_and_save(smoke_run):
    events = check_trace_format(_trace(smoke_run, "--rep", "1"))
    processes, threads = _processes(events), _threads(events)
    with (smoke_run / "runs.csv").open() as handle:
        rows = {r["policy"]: r for r in csv.DictReader(handle) if r["rep"] == "1"}
    s = scenario("smoke")
    for policy in s.policy_labels:
        job = [e for e in events if e["ph"] != "M" and processes[e["pid"]] == f"{policy}: job"]
        failures = [e for e in job if e["ph"] == "i" and e["cat"] == "failure"]
        assert len(failures) == int(rows[policy]["n_failures"]) > 0
        failed_nodes = sum(len(e["args"]["nodes"].split()) for e in failures)
        node_failures = [e for e in events if e["ph"] == "i" and e["cat"] == "node_failure"]
        mine = [e for e in node_failures if processes[e["pid"]].startswith(f"{policy}: ")]
        assert len(mine) == failed_nodes == int(rows[policy]["n_failed_nodes"])
        for e in mine:  # on the failed node's own track
            assert threads[e["tid"]] in e["args"]["nodes"].split()
        wall_us = float(rows[policy]["wall_h"]) * 3600e6
        assert max(e["ts"] + e.get("dur", 0) for e in job) == pytest.approx(wall_us)
    assert set(processes.values()) >= {"full: trainers", "full: embedding PS", "full: storage"}
    assert {threads[e["tid"]] for e in events if e["ph"] == "X"} >= {
        "trainer3", "emb_ps3", "trainer0.send", "emb_ps0.recv", "storage.write", "storage.read"
    }  # fmt: skip


def test_save_spans_match_the_timeline_and_write_a_checkpoint_each(smoke_run):
    events = check_trace_format(_trace(smoke_run))  # replication 0: in timeline.csv
    processes, threads = _processes(events), _threads(events)
    with (smoke_run / "timeline.csv").open() as handle:
        timeline = list(csv.DictReader(handle))
    checkpoint_B = PlanInputs.of(scenario("smoke")).layout.total_bytes
    for policy in ("full", "checkfreq"):
        saves = [
            (float(r["start_h"]) * 3600e6, float(r["end_h"]) * 3600e6)
            for r in timeline
            if r["policy"] == policy and r["kind"] == "save"
        ]
        spans = [
            (e["ts"], e["ts"] + e["dur"])
            for e in events
            if e["ph"] == "X" and processes[e["pid"]] == f"{policy}: job" and e["cat"] == "save"
        ]
        assert len(spans) == len(saves) > 0
        for (a, b), (c, d) in zip(spans, saves, strict=True):
            assert a == pytest.approx(c, abs=1) and b == pytest.approx(d, abs=1)  # whole µs
        # every checkpoint moves one checkpoint's bytes through the storage write link
        kind = "save" if policy == "full" else "persist"
        writes = [
            e
            for e in events
            if e["ph"] == "X"
            and processes[e["pid"]] == f"{policy}: storage"
            and threads[e["tid"]] == "storage.write"
            and e["cat"] == kind
        ]
        assert writes and all(e["args"]["bytes"] == pytest.approx(checkpoint_B) for e in writes)
        done = [e for e in writes if "cancelled_flows" not in e["args"]]
        assert all(e["args"]["moved_bytes"] == pytest.approx(checkpoint_B) for e in done)
        assert all(e["args"]["flows"] == 5 for e in writes)  # 4 shards and the dense copy
    checkfreq_saves = [e for e in events if processes[e["pid"]] == "checkfreq: job"]
    assert {e["name"] for e in checkfreq_saves if e["ph"] == "X"} >= {"persist", "compute"}


def test_flow_arrows_join_each_transfer_to_its_endpoints(smoke_run):
    events = check_trace_format(_trace(smoke_run, "--policy", "full"))
    threads = _threads(events)
    starts = {e["id"]: threads[e["tid"]] for e in events if e["ph"] == "s"}
    ends = {e["id"]: threads[e["tid"]] for e in events if e["ph"] == "f"}
    pairs = Counter((starts[i], ends[i]) for i in starts)
    assert pairs[("emb_ps2", "storage.write")] > 0  # saves: PS → storage
    assert pairs[("trainer0", "storage.write")] == pairs[("emb_ps2", "storage.write")]
    assert pairs[("storage.read", "trainer1")] > 0  # reloads: storage → every node
    assert {a for a, _ in pairs} <= {f"emb_ps{i}" for i in range(4)} | {"trainer0", "storage.read"}


def test_log_replays_are_their_own_spans_on_the_nodes_that_replay(tmp_path):
    run = tmp_path / "run"
    args = ["run", str(SCENARIOS / "prod50h.yaml"), "--no-trainer", "--reps", "1", "-q"]
    assert main([*args, "--policy", "swift", "-o", str(run)]) == 0
    events = check_trace_format(_trace(run))
    processes, threads = _processes(events), _threads(events)
    replays = [e for e in events if e["ph"] == "X" and e["name"] == "replay"]
    assert {processes[e["pid"]] for e in replays} == {
        "swift: job", "swift: embedding PS", "swift: NICs", "swift: storage"
    }  # fmt: skip
    on_ps = {threads[e["tid"]] for e in replays if processes[e["pid"]] == "swift: embedding PS"}
    assert on_ps and all(name.startswith("emb_ps") for name in on_ps)


def test_each_part_of_a_composed_policy_has_its_own_track(tmp_path):
    """Every phase a part charged (its detail starts with the part's name) is on its track,
    and nothing else is: the job's own phases (compute, rescheduling) stay off them."""
    run = tmp_path / "run"
    args = ["run", str(SCENARIOS / "composed.yaml"), "--no-trainer", "--reps", "1", "-q"]
    assert main([*args, "--policy", "mfu.swift_shards", "-o", str(run)]) == 0
    events = check_trace_format(_trace(run))
    threads = _threads(events)
    assert {"part logged", "part mfu"} <= set(threads.values())
    sim = simulate(scenario("composed", "trainer.enabled=false"), 3, 0)
    for part in ("logged", "mfu"):
        spans = sorted(
            (e["ts"], e["name"], e["args"].get("detail", ""))
            for e in events
            if e["ph"] == "X" and threads[e["tid"]] == f"part {part}"
        )
        charged = sorted(
            (round(p.start_s * 1e6), p.category, p.text) for p in sim.timeline if p.part == part
        )
        assert charged and [(t, d) for t, _, d in spans] == [(t, d) for t, _, d in charged]
        assert {name for _, name, _ in spans} <= {"save", "load", "replay", "rebuild"}


def test_ecrm_rebuild_caps_are_nic_tracks_next_to_their_node(tmp_path):
    """A rebuild reads through a cap on each connection into the replacement: their tracks
    sit with the NICs, right after that node's send and receive links."""
    run = tmp_path / "run"
    failures = "failures=[{kind: scheduled, count: 2, role: emb_ps}]"
    capped = "policies.4.flow_bandwidth=5 Gbit/s"
    args = ["run", str(SCENARIOS / "prod50h.yaml"), "--no-trainer", "--reps", "1", "-q"]
    assert (
        main([*args, "--policy", "ecrm", "--set", failures, "--set", capped, "-o", str(run)]) == 0
    )
    events = check_trace_format(_trace(run))
    processes, threads = _processes(events), _threads(events)
    nic_tracks = [
        threads[e["tid"]]
        for e in events
        if e["name"] == "thread_name" and processes[e["pid"]] == "ecrm: NICs"
    ]
    caps = [name for name in nic_tracks if name.startswith("ecrm.flow.")]
    assert caps
    for node in {cap.split(">")[1] for cap in caps}:
        mine = sorted(nic_tracks.index(c) for c in caps if c.endswith(f">{node}"))
        after = nic_tracks.index(f"{node}.recv") + 1
        assert mine == list(range(after, after + len(mine)))  # together, after its links
    assert not any(p.endswith(": racks") for p in processes.values())  # no racks here


def test_recording_flows_changes_no_result():
    s = scenario("smoke")
    for index in range(len(s.policies)):
        plain, recorded = simulate(s, index, 2), simulate(s, index, 2, record_flows=True)
        assert plain.row() == recorded.row()
        assert plain.net.net.records is None and recorded.net.net.records
        for record in recorded.net.net.records:  # every flow recorded has arrived or stopped
            assert record.start_s <= record.end_s <= recorded.wall_s
            assert record.cancelled or record.moved_B == record.size_B


def test_endpoints_come_from_the_route():
    assert endpoints(("emb_ps3.send", "rack1.up", "storage.write")) == ("emb_ps3", "storage.write")
    assert endpoints(("storage.read", "storage.read.trainer2", "trainer2.recv")) == (
        "storage.read",
        "trainer2",
    )
    assert endpoints(("trainer1.send", "trainer0.recv")) == ("trainer1", "trainer0")


def test_gzip_output_and_default_name(smoke_run, capsys):
    trace = _trace(smoke_run, "--policy", "checkfreq", out=smoke_run / "t.json.gz")
    assert trace == _trace(smoke_run, "--policy", "checkfreq", out=smoke_run / "t.json")
    assert main(["trace", str(smoke_run), "--policy", "full"]) == 0
    assert (smoke_run / "trace_rep0_full.json").is_file()
    assert "ui.perfetto.dev" in capsys.readouterr().out


def _edited_copy(run: Path, into: Path, column: str, edit) -> tuple[Path, float]:
    """A copy of ``run`` (scenario, manifest, timeline, runs.csv) whose first row's ``column`` is
    ``edit(value)``; the copy and the value it had."""
    copy = into / "copy"
    copy.mkdir()
    for name in ("scenario.yaml", "manifest.json", "timeline.csv"):
        (copy / name).write_bytes((run / name).read_bytes())
    text = (run / "runs.csv").read_text().splitlines()
    first = text[1].split(",")
    at = text[0].split(",").index(column)
    was = float(first[at])
    first[at] = repr(edit(was))
    (copy / "runs.csv").write_text("\n".join([text[0], ",".join(first), *text[2:]]) + "\n")
    return copy, was


def test_a_folder_that_differs_from_this_version_is_traced_with_a_warning(
    smoke_run, tmp_path, capsys
):
    copy, _ = _edited_copy(smoke_run, tmp_path, "wall_h", lambda _: 99.0)
    assert main(["trace", str(copy), "--policy", "full", "-o", str(tmp_path / "t.json")]) == 0
    assert "warning: full replication 0 simulated again differs from runs.csv" in (
        capsys.readouterr().err
    )


def test_a_category_that_differs_from_runs_csv_is_said_too(smoke_run, tmp_path, capsys):
    """The trace draws the job's phases by category, but only wall_h and the failures were
    compared: lost_h edited by +0.5 h went unsaid (a new user's study)."""
    copy, was = _edited_copy(smoke_run, tmp_path, "lost_h", lambda v: v + 0.5)
    assert main(["trace", str(copy), "--policy", "full", "-o", str(tmp_path / "t.json")]) == 0
    err = capsys.readouterr().err
    assert f"differs from runs.csv (lost_h {was:.6g} vs {was + 0.5:.6g})" in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rep", "3"], "--rep: the run has replications 0 to 2 (got 3)"),
        (["--policy", "cpr"], "--policy: no policy named 'cpr'"),
    ],
)
def test_bad_options_exit_2(smoke_run, capsys, args, words):
    assert main(["trace", str(smoke_run), *args]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_a_file_is_replaced_only_if_it_is_a_trace_or_with_force(smoke_run, tmp_path, capsys, name):
    """A trace replaces an earlier trace (plain or gzip); any other file is refused, left as
    it was (a trace written over a run's scenario.yaml made the folder unusable), unless
    --force."""
    out = tmp_path / name
    traced = ["trace", str(smoke_run), "--policy", "full", "-o", str(out)]
    assert main(traced) == 0
    assert main(traced) == 0  # an earlier trace: replaced
    other = tmp_path / f"notes{out.suffix}"
    other.write_bytes(b"mine")
    assert main([*traced[:-1], str(other)]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        f"ftsim: {other}: exists and is not a trace written by ftsim trace; "
        "give another name, or --force to replace it\n"
    )
    assert other.read_bytes() == b"mine"
    assert main([*traced[:-1], str(other), "--force"]) == 0
    assert other.read_bytes() == out.read_bytes()


def test_a_device_or_fifo_is_never_replaced(smoke_run, tmp_path, capsys):
    """As root, a trace written to ``-o /dev/full`` replaced the device with a file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (fifo, Path("/dev/null")):
        assert main(["trace", str(smoke_run), "-o", str(target), "--force"]) == 2
        assert capsys.readouterr().err == (
            f"ftsim: {target}: not a regular file; give a new file's name or a folder\n"
        )
    assert stat.S_ISFIFO(fifo.stat().st_mode) and stat.S_ISCHR(Path("/dev/null").stat().st_mode)


def test_only_run_folders_are_traced(tmp_path, capsys):
    assert main(["trace", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["trace", str(tmp_path)]) == 2
    assert "no scenario.yaml (not a run folder)" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text('{"command": "sweep"}')
    assert main(["trace", str(tmp_path)]) == 2
    assert "a sweep folder; trace needs a run folder" in capsys.readouterr().err


def test_phases_carry_part_activity_and_nodes_as_fields():
    """A phase's facts are fields, and the timeline's text is written from them: a part's
    phases say their part (the text keeps its "<part>: " prefix), SWIFT's log replays are
    the activity ``replay`` of a ``load``, and a rebuild in an ECRM part occupies the job's
    nodes of the part's shards (by rows, every shard: a part's shard i is the job's)."""
    sim = simulate(scenario("composed", "trainer.enabled=false"), 3, 0)
    parts = {p.part for p in sim.timeline}
    assert parts == {None, "logged", "mfu"}
    for p in sim.timeline:
        assert p.text == (f"{p.part}: {p.detail}" if p.part else p.detail)
        assert p.activity == ("replay" if p.detail.startswith("replay") else p.category)
    assert any(p.activity == "replay" and p.category == "load" for p in sim.timeline)
    rows = {(r["kind"], r["detail"]) for r in sim.timeline_rows()}
    assert ("load", "logged: replay logs") in rows

    ecrm = simulate(scenario("composed", "trainer.enabled=false"), 2, 0)
    trainers = ecrm.scenario.cluster.trainers
    rebuilds = [p for p in ecrm.timeline if p.category == "rebuild"]
    assert rebuilds
    for p in rebuilds:
        assert p.part == "parity"
        assert p.nodes == tuple(trainers + int(w.removeprefix("emb_ps")) for w in p.detail.split())


def test_the_trace_reads_the_fields_not_the_text():
    """A phase whose text only looks like a replay, or like another part's, is traced by its
    fields: rewriting every detail leaves the trace's span names and part tracks as they
    were (an injected parser of the text would rename or move them)."""
    from ftsim.experiments.trace import _PolicyTrace

    def spans(sim):
        trace = _PolicyTrace(sim)
        return sorted(
            (name, span.name, span.start_us)
            for name, track in trace.job.tracks.items()
            for span in track.spans
        )

    sim = simulate(scenario("composed", "trainer.enabled=false"), 3, 0, record_flows=True)
    before = spans(sim)
    sim.timeline = [p._replace(detail=f"replay mfu: {p.detail}") for p in sim.timeline]
    assert spans(sim) == before


def test_trace_refuses_a_damaged_run_folder_as_plot_does(smoke_run, tmp_path, capsys):
    """A manifest cut short was traced as a run folder of another version (exit 0), and a
    runs.csv of bytes that are not UTF-8 was a UnicodeDecodeError traceback: both are now
    the one-line errors plot gives."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(smoke_run, copy)
    (copy / "manifest.json").write_text('{"command": "run", ')
    assert main(["trace", str(copy), "-o", str(tmp_path / "t.json")]) == 2
    assert "manifest.json: not valid JSON" in capsys.readouterr().err
    shutil.copy(smoke_run / "manifest.json", copy / "manifest.json")
    (copy / "runs.csv").write_bytes(b"policy,rep\nfull\xe9,0\n")
    assert main(["trace", str(copy), "-o", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ftsim: ") and "runs.csv" in err and "Traceback" not in err
