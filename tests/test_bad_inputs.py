"""Bad input anywhere on the command line: exit status 2, one located line per problem on
standard error, never a traceback or a hang, and nothing on disk changed.

Each case builds its inputs (and any results that must survive) in a folder of its own and
gives the command; the cases run concurrently through the real command line
(``python -m ftsim``) in subprocesses. A digest of every case folder (SHA-256 over every
file and folder) is the same before and after. ``tests/test_cli_errors.py`` covers
malformed scenario fields; these cases cover files, numbers, traces, output folders,
``plot``, sweeps and ``validate``. The last tests kill and interrupt sweeps and runs.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml

import ftsim
from ftsim.scenario.loader import read_yaml, set_path
from tests.conftest import SCENARIOS, terminal_signals

SMOKE = SCENARIOS / "smoke.yaml"
SMOKE_DATA = read_yaml(SMOKE)
FTSIM = [sys.executable, "-m", "ftsim"]
HANG_S = 60
"""A command still running after this long counts as a hang."""


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (the optional ``dask`` extra may be missing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


# -- building inputs -------------------------------------------------------------------------


def scenario(folder: Path, change: dict | None = None, raw: str | bytes | None = None) -> Path:
    """``folder/s.yaml``: smoke.yaml with ``change`` (dotted path → value), or ``raw``."""
    path = folder / "s.yaml"
    if raw is not None:
        path.write_bytes(raw.encode() if isinstance(raw, str) else raw)
        return path
    data = copy.deepcopy(SMOKE_DATA)
    for key, value in (change or {}).items():
        set_path(data, key.split("."), value)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(change=None, raw=None, command=("run",)):
    """A case maker: ``ftsim run`` (or ``command``) on a changed smoke scenario."""
    return lambda f, shared: [*command, str(scenario(f, change, raw)), "-q", "-o", str(f / "out")]


def show(raw):
    return lambda f, shared: ["show", "config", str(scenario(f, raw=raw))]


def sets(*assignments, command="run"):
    """A case maker: smoke.yaml with ``--set`` assignments."""
    options = [part for a in assignments for part in ("--set", a)]
    return lambda f, shared: [command, str(SMOKE), *options, "-q", "-o", str(f / "out")]


def criteo_with_a_bad_line(f, shared):
    """A case maker: smoke.yaml training on a Criteo file whose 7th line has a bad label: the
    malformed line is met only once training reads it, mid-run."""
    good = "\t".join(["0"] + ["1"] * 13 + ["a1b2c3d4"] * 26)
    lines = [good] * 12
    lines[6] = "\t".join(["2"] + ["1"] * 13 + ["a1b2c3d4"] * 26)
    (f / "d.tsv").write_text("\n".join(lines) + "\n")
    data = {"kind": "criteo", "path": "d.tsv", "row_cap": 10, "chunk_lines": 4}
    trainer = {"steps": 5, "batch_size": 2, "replications": 1, "eval_samples": 2, "data": data}
    path = scenario(f, {"trainer": trainer})
    return ["run", str(path), "--reps", "1", "-q", "-o", str(f / "out")]


def trace(text: str | bytes):
    """A case maker: smoke.yaml replaying the failure trace ``text``."""

    def make(f, shared):
        (f / "trace.csv").write_bytes(text.encode() if isinstance(text, str) else text)
        path = scenario(f, {"failures": [{"kind": "trace", "file": "trace.csv"}]})
        return ["run", str(path), "-q", "-o", str(f / "out")]

    return make


def sweep(*options, folder_option=True):
    """A case maker: ``ftsim sweep smoke.yaml`` with ``options`` (and -o in the case folder)."""

    def make(f, shared):
        out = ["-o", str(f / "out")] if folder_option else []
        return ["sweep", str(SMOKE), "--no-trainer", "--reps", "1", "-q", *out, *options]

    return make


def foreign_folder(f: Path) -> Path:
    """A non-empty folder that no ftsim command wrote."""
    folder = f / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my own notes\n")
    (folder / "runs.csv").write_text("a,b\n1,2\n")
    return folder


def output_into(command: str, target: Callable[[Path, dict], Path], *extra: str):
    """A case maker: ``command`` of the valid smoke scenario writing to ``target``."""

    def make(f, shared):
        args = [command, str(SMOKE), "--no-trainer", "--reps", "1", "-q", *extra]
        return [*args, "-o", str(target(f, shared))]

    return make


def a_file(f, shared):
    (f / "results.txt").write_text("keep me\n")
    return f / "results.txt"


def read_only(f, shared, keep: str | None = None):
    """A read-only folder, empty or holding a file ``keep``."""
    folder = f / "locked"
    folder.mkdir()
    if keep:
        (folder / keep).write_text("old results\n")
    if not shared["lock"](folder):
        raise _NoReadOnly
    return folder


def fake_sweep(f, shared):
    folder = f / "sweep"
    (folder / "shards").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"command": "sweep", "config_hash": "x"}))
    return folder


def run_copy(f: Path, shared: dict) -> Path:
    """A copy of a real ``run`` output folder."""
    return Path(shutil.copytree(shared["run"], f / "run"))


def plot_of(change: Callable[[Path], None], *options: str):
    """A case maker: ``plot`` of a copy of a real run folder after ``change`` to it."""

    def make(f, shared):
        folder = run_copy(f, shared)
        change(folder)
        return ["plot", str(folder), *options]

    return make


def rewrite(name: str, text: str | bytes):
    def change(folder: Path) -> None:
        data = text.encode() if isinstance(text, str) else text
        (folder / name).write_bytes(data)

    return change


def runs_csv(edit: Callable[[list[str]], list[str]]):
    """A plot change: the lines of runs.csv edited (the manifest's checksums updated too,
    so only the structure is wrong)."""

    def change(folder: Path) -> None:
        lines = (folder / "runs.csv").read_text().splitlines(keepends=True)
        (folder / "runs.csv").write_text("".join(edit(lines)))
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest.pop("files")
        (folder / "manifest.json").write_text(json.dumps(manifest))

    return change


def manifest_field(key: str, value):
    """A plot change: the manifest's ``key`` set to ``value``."""

    def change(folder: Path) -> None:
        manifest = json.loads((folder / "manifest.json").read_text())
        (folder / "manifest.json").write_text(json.dumps({**manifest, key: value}))

    return change


def replace_cell(column: str, value: str):
    def edit(lines):
        header = lines[0].rstrip("\n").split(",")
        cells = lines[1].rstrip("\n").split(",")
        cells[header.index(column)] = value
        return [lines[0], ",".join(cells) + "\n", *lines[2:]]

    return edit


def delete(name: str):
    return lambda folder: (folder / name).unlink()


def lock_plots(shared):
    def change(folder: Path) -> None:
        if not shared["lock"](folder):
            raise _NoReadOnly

    return change


class _NoReadOnly(Exception):
    """Read-only folders cannot be made here (root without chattr): the case is skipped."""


def advise(*options: str, target: Callable[[Path, dict], Path] | None = None, name=SMOKE):
    """A case maker: ``ftsim advise`` of ``name`` (smoke) with ``options``, into ``target``."""

    def make(f, shared):
        out = f / "out" if target is None else target(f, shared)
        return ["advise", str(name), "-q", *options, "-o", str(out)]

    return make


def under_a_file(f, shared):
    return a_file(f, shared) / "sub"


def with_manifest(text: str | None):
    """A target: a copy of a real run folder whose manifest is ``text`` (None: a folder)."""

    def target(f, shared):
        folder = run_copy(f, shared)
        (folder / "manifest.json").unlink()
        if text is None:
            (folder / "manifest.json").mkdir()
        else:
            (folder / "manifest.json").write_text(text)
        return folder

    return target


def plot_into(target: Callable[[Path, dict], Path], *options: str):
    """A case maker: ``plot`` of a copy of a real run folder, its figures into ``target``."""

    def make(f, shared):
        folder = run_copy(f, shared)
        return ["plot", str(folder), "-q", *options, "-o", str(target(f, shared) or folder)]

    return make


def grid(key: str, n: int) -> list[str]:
    """``--grid key=1,2,...,n``."""
    return ["--grid", f"{key}={','.join(map(str, range(1, n + 1)))}"]


def fake_list_manifest(f: Path) -> Path:
    folder = f / "sweep"
    folder.mkdir()
    (folder / "manifest.json").write_text("[1, 2, 3]")
    return folder


def deep(levels: int) -> str:
    """A scenario whose ``job`` is ``levels`` nested flow lists."""
    return "name: deep\njob: " + "[" * levels + "]" * levels + "\n"


def deep_block(levels: int) -> str:
    """A scenario whose ``job`` is ``levels`` nested block mappings."""
    return (
        "name: deep\n" + "".join(f"{' ' * i}k{i}:\n" for i in range(levels)) + " " * levels + "x\n"
    )


LAUGHS = "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" if i else 'l0: &l0 ["lol"]\n'
    for i in range(10)
)

TRACE_HEADER = "time_h,node\n"


def failure_file(kind: str, text: str | None):
    """A case maker: smoke.yaml replaying a failure ``kind`` (trace or failure_log) file
    ``text``, or a folder of that name when ``text`` is None."""

    def make(f, shared):
        if text is None:
            (f / "failures.csv").mkdir()
        else:
            (f / "failures.csv").write_text(text)
        field = "file" if kind == "trace" else "path"
        path = scenario(f, {"failures": [{"kind": kind, field: "failures.csv"}]})
        return ["run", str(path), "-q", "-o", str(f / "out")]

    return make


LOG_HEADER = "nodenum,Prob Started,Prob Fixed\n"


def composed_part(policy: str) -> str:
    """``--set policies=...``: a composed policy whose first part (shards 0, 1) is ``policy``."""
    rest = "{kind: cpr, target_pls: 0.1, fallback: false, trainer_failure: replica}"
    return (
        f"policies=[{{kind: composed, parts: [{{scope: {{shards: [0, 1]}}, name: p, policy: "
        f"{policy}}}, {{scope: rest, policy: {rest}}}]}}]"
    )


def sweep_manifest_folder(f: Path, shared) -> Path:
    """A sweep folder whose manifest.json is a folder (it cannot be read)."""
    folder = f / "sweep"
    (folder / "manifest.json").mkdir(parents=True)
    return folder


# (id, make(case folder, shared) -> argv, words the message must contain)
CASES = [
    # -- scenario files ------------------------------------------------------------------
    ("binary scenario", run(raw=b"name: x\x00\x01\x02job: \xff"), "binary file"),
    ("utf-16 scenario", run(raw=SMOKE.read_text().encode("utf-16")), "UTF-16"),
    ("latin-1 scenario", run(raw="name: caf\xe9\n".encode("latin-1")), "not UTF-8 text"),
    ("deep nesting", run(raw=deep(100_000)), "nested deeper than"),
    ("deep block nesting", run(raw=deep_block(60)), "nested deeper than"),
    ("huge scenario", run(raw="name: x\n" + "# padding\n" * 200_000), "larger than 1 MiB"),
    ("alias expansion", run(raw=LAUGHS), "aliases expand to"),
    ("recursive alias", run(raw="name: &a [*a]\n"), "collection containing it"),
    ("duplicate top key", run(raw=SMOKE.read_text() + "name: again\n"), "duplicate key 'name'"),
    (
        "duplicate nested key",
        run(raw=SMOKE.read_text().replace("  trainers: 4\n", "  trainers: 4\n  trainers: 8\n")),
        "duplicate key 'trainers'",
    ),
    ("two documents", run(raw="name: a\n---\nname: b\n"), "single document"),
    ("python tag", run(raw="name: !!python/object:os.system x\n"), "invalid YAML"),
    ("bad int tag", run(raw="name: x\nrun: {seed: !!int abc}\n"), "cannot read 'abc'"),
    ("bad date", run(raw="name: x\ndescription: 2020-13-45\n"), "month must be in 1..12"),
    ("5000-digit integer", run(raw="name: x\nrun: {seed: " + "9" * 5000 + "}\n"), "4300 digits"),
    ("scalar at top", run(raw="just some text\n"), "must be a mapping"),
    ("non-string key", run(raw="name: x\n1: 2\n"), "Keys should be strings"),
    ("scenario is a folder", lambda f, s: ["run", str(f), "-q"], "is a folder"),
    ("scenario is a device", lambda f, s: ["run", "/dev/zero", "-q"], "not a regular file"),
    ("show config binary", show(b"\x00\x00\x00"), "binary file"),
    ("show config deep", show(deep(200)), "nested deeper than"),
    ("show config aliases", show(LAUGHS), "aliases expand to"),
    ("show config folder", lambda f, s: ["show", "config", str(f)], "is a folder"),
    ("show config missing", lambda f, s: ["show", "config", str(f / "no.yaml")], "not found"),
    ("show config empty", show(""), "must be a mapping"),
    ("sweep utf-16", run(raw="name: x\n".encode("utf-16"), command=("sweep",)), "UTF-16"),
    # -- numbers -------------------------------------------------------------------------
    ("rows 1e308", run({"job.tables.0.rows": "1e308"}), "job.tables.0.rows"),
    ("rows huge literal", run({"job.tables.0.rows": 10**30}), "job.tables.0.rows"),
    ("seed 1e400", sets("run.seed=1e400"), "run.seed"),
    ("seed negative", lambda f, s: ["run", str(SMOKE), "--seed", "-1", "-q"], "--seed must be"),
    ("seed negative set", lambda f, s: ["run", str(SMOKE), "--set", "run.seed=-1"], "run.seed"),
    (
        "throughput nan",
        run({"job.throughput": float("nan"), "job.iteration_time": None}),
        "job.throughput",
    ),
    ("max wall factor inf", run({"run.max_wall_factor": float("inf")}), "run.max_wall_factor"),
    ("training 1e400 h", sets("job.training=1e400 h"), "job.training"),
    # shorter than the engine's resolution: the job ended as it started (a zero division)
    ("training 1e-300 s", sets("job.training=1e-300 s"), "job: the failure-free training must"),
    ("slowdown nan", run({"policies.2.persist_slowdown": float("nan")}), "persist_slowdown"),
    (
        "lognormal cv inf",
        run({"cluster.reschedule": {"kind": "lognormal", "mean": "1 min", "cv": float("inf")}}),
        "cluster.reschedule.cv",
    ),
    ("learning rate inf", sets("trainer={optimizer: {dense: {lr: .inf}}}"), "trainer.optimizer"),
    ("negative rows", run({"job.tables.0.rows": -5}), "job.tables.0.rows"),
    ("malformed Criteo line mid-run", criteo_with_a_bad_line, "d.tsv: malformed Criteo line 7"),
    (
        "negative exponent in a list",
        sets("trainer={data: {kind: synthetic, zipf_exponent: [1.0, -1]}}"),
        "trainer.data.zipf_exponent.1: Input should be greater than or equal to 0",
    ),
    (
        "composed part that rolls back",
        sets(
            "policies=[{kind: composed, parts: [{scope: {shards: [0]}, policy: {kind: full}},"
            " {scope: rest, policy: {kind: cpr, interval: 1 h, fallback: false}}]}]"
        ),
        "policies.0.parts.0.policy.kind: full recovery rolls every node back",
    ),
    ("negative dense params", run({"job.dense_params": -1}), "job.dense_params"),
    ("negative latency", run({"cluster.network_latency": "-1 ms"}), "cluster.network_latency"),
    (
        "job mtbf 1 ms",
        sets("failures.0.job_mtbf=1 ms", "cluster.reschedule.mean=0 s"),
        "failures.0.job_mtbf: a replication",
    ),
    ("training 0 s", sets("job.training=0 s"), "job.training: must be positive (got '0 s')"),
    (
        "training and iterations",
        sets("job.iterations=100"),
        "job: give exactly one of training and iterations\n",  # no dump of the section
    ),
    (
        "both mtbfs",
        sets("failures.0.node_mtbf=10 h"),
        "failures.0.node_mtbf: give exactly one of node_mtbf and job_mtbf (got both; an "
        "override that gives one sets the other to null, e.g. job_mtbf=null)",
    ),
    (
        "bandwidth unit in lower case",
        sets("cluster.nic_bandwidth=25 gbps"),
        "cluster.nic_bandwidth: unknown bandwidth unit 'gbps' (e.g. 'GB/s', 'MB/s', 'Gbit/s', "
        "'Gbps': units are case-sensitive)",
    ),
    (
        "job mtbf far below a restart",
        sets("failures.0.job_mtbf=20 s"),
        "failures.0.job_mtbf: a failure every 20 s on average (the job's), while a restart "
        "takes 2 min (cluster.reschedule): 6 failures would strike during each, more than 5",
    ),
    ("job mtbf 0 s", sets("failures.0.job_mtbf=0 s"), "failures.0.job_mtbf: MTBF must be"),
    (
        "node mtbf 0 s",
        sets("failures.0.job_mtbf=null", "failures.0.node_mtbf=0 s"),
        "failures.0.node_mtbf",
    ),
    ("interval 1 ms", sets("policies.0.interval=1 ms"), "policies.0.interval: a replication"),
    ("trainers 1e8", sets("cluster.trainers=1e8"), "cluster.trainers"),
    ("emb_ps 1e6", sets("cluster.emb_ps=1e6"), "cluster.emb_ps"),
    ("replications 1e9", sets("run.replications=1e9"), "run.replications"),
    ("trainer steps 1e9", sets("trainer={steps: 1000000000}"), "trainer.steps"),
    ("trainer batch 400 digits", sets(f"trainer={{batch_size: {10**400}}}"), "trainer.batch_size"),
    (
        "trainer tables huge",
        sets("trainer={data: {cardinalities: [1000000000000]}}"),
        "trainer.data",
    ),
    (
        "scheduled count 1e12",
        sets("failures.0={kind: scheduled, count: 1000000000000}"),
        "failures.0.count",
    ),
    (
        "correlated 1 us",
        sets("failures.0={kind: correlated, domain_size: 2, domain_mtbf: 1 us}"),
        "failures.0.domain_mtbf",
    ),
    ("wall factor 1e300", sets("run.max_wall_factor=1.0e+300"), "failures.0.job_mtbf"),
    ("set empty segment", sets("job..rows=5"), "empty key"),
    # -- failure traces ------------------------------------------------------------------
    (
        "trace time nan",
        trace(TRACE_HEADER + "nan,emb_ps0\n"),
        "line 2: time_h must be a finite number",
    ),
    ("trace time inf", trace(TRACE_HEADER + "0.5,emb_ps0\ninf,emb_ps1\n"), "line 3"),
    ("trace time negative", trace(TRACE_HEADER + "-1,emb_ps0\n"), "must not be negative"),
    ("trace unsorted", trace(TRACE_HEADER + "2,emb_ps0\n1,emb_ps1\n"), "time order"),
    ("trace not a number", trace(TRACE_HEADER + "soon,emb_ps0\n"), "not a number"),
    ("trace bad role", trace("time_s,role\n5,gpu\n"), "role must be"),
    ("trace bad header", trace("when,who\n1,emb_ps0\n"), "header needs"),
    ("trace binary", trace(b"time_h,node\n\x00\x00"), "binary file"),
    ("trace utf-16", trace("time_h,node\n1,emb_ps0\n".encode("utf-16")), "UTF-16"),
    ("trace unknown node", trace(TRACE_HEADER + "1,emb_ps99\n"), "does not exist"),
    # -- output folders ------------------------------------------------------------------
    ("run into a file", output_into("run", a_file), "is a file"),
    ("run under a file", output_into("run", lambda f, s: a_file(f, s) / "x"), "lies under"),
    ("run into a foreign folder", output_into("run", lambda f, s: foreign_folder(f)), "--force"),
    ("run into a sweep", output_into("run", fake_sweep), "holds the output of 'ftsim sweep'"),
    (
        "run --force into read-only",
        output_into("run", lambda f, s: read_only(f, s, keep="runs.csv"), "--force"),
        "cannot write",
    ),
    (
        "run output under a file",
        lambda f, s: ["run", str(SMOKE), "--set", f"run.output={a_file(f, s)}", "-q"],
        "lies under",
    ),
    (
        "sweep into a foreign folder",
        output_into("sweep", lambda f, s: foreign_folder(f)),
        "--force",
    ),
    ("sweep into a run folder", output_into("sweep", run_copy), "'ftsim sweep'"),
    ("sweep into read-only", output_into("sweep", read_only), "cannot write"),
    ("sweep into a file", output_into("sweep", a_file), "is a file"),
    (
        "validate over a foreign file",
        lambda f, s: ["validate", "--quick", "-o", str(a_file(f, s))],
        "not a validation report",
    ),
    ("validate into a folder", lambda f, s: ["validate", "-o", str(f)], "is a folder"),
    (
        "validate docs and -o",
        lambda f, s: ["validate", "--update-docs", "-o", str(f / "v.md")],
        "leave out -o",
    ),
    # -- plot ----------------------------------------------------------------------------
    ("plot garbage runs", plot_of(rewrite("runs.csv", b"\x89PNG\r\n\x00garbage")), "runs.csv"),
    ("plot header only", plot_of(runs_csv(lambda lines: lines[:1])), "no result rows"),
    ("plot truncated", plot_of(runs_csv(lambda lines: [*lines[:2], lines[2][:9]])), "incomplete"),
    ("plot foreign runs", plot_of(rewrite("runs.csv", "a,b\n1,2\n")), "not ftsim results"),
    ("plot text number", plot_of(runs_csv(replace_cell("overhead_frac", "lots"))), "overhead"),
    ("plot short row", plot_of(runs_csv(lambda lines: [*lines[:1], "smoke,full\n"])), "fields"),
    ("plot no timeline", plot_of(delete("timeline.csv")), "timeline.csv"),
    ("plot no manifest", plot_of(delete("manifest.json")), "manifest.json"),
    ("plot manifest not json", plot_of(rewrite("manifest.json", "{nope")), "not valid JSON"),
    ("plot manifest a list", plot_of(rewrite("manifest.json", "[1, 2]")), "manifest.json"),
    ("plot manifest points", plot_of(manifest_field("points", 5)), "'points'"),
    ("plot manifest columns", plot_of(manifest_field("columns", ["nope"])), "'columns'"),
    ("plot point out of range", plot_of(lambda folder: None, "--point", "7"), "--point 7"),
    ("plot point negative", plot_of(lambda folder: None, "--point", "-1"), "--point -1"),
    ("plot a file", lambda f, s: ["plot", str(a_file(f, s))], "not a folder"),
    ("plot nothing there", lambda f, s: ["plot", str(f / "absent")], "no such folder"),
    ("plot read-only", lambda f, s: plot_of(lock_plots(s))(f, s), "cannot write"),
    # -- sweeps --------------------------------------------------------------------------
    ("halfwidth nan", sweep("--target-halfwidth", "nan"), "--target-halfwidth"),
    ("halfwidth zero", sweep("--target-halfwidth", "0"), "--target-halfwidth"),
    ("halfwidth negative", sweep("--target-halfwidth", "-0.1"), "--target-halfwidth"),
    ("halfwidth inf", sweep("--target-halfwidth", "inf"), "--target-halfwidth"),
    ("max reps huge", sweep("--max-reps", "1000000000"), "--max-reps"),
    ("jobs zero", sweep("--jobs", "0"), "--jobs"),
    ("batch zero", sweep("--batch", "0"), "--batch"),
    (
        "resume a list manifest",
        lambda f, s: sweep("--resume", str(fake_list_manifest(f)), folder_option=False)(f, s),
        "has no config_hash (not a sweep's)",
    ),
    (
        "resume a run folder",
        lambda f, s: sweep("--resume", str(run_copy(f, s)), folder_option=False)(f, s),
        "output of ftsim run",
    ),
    (
        "resume nothing",
        lambda f, s: sweep("--resume", str(f / "absent"), folder_option=False)(f, s),
        "absent: no such folder (resume a sweep in the folder it wrote)",
    ),
    (
        "resume with force",
        lambda f, s: sweep("--resume", str(fake_sweep(f, s)), "--force", folder_option=False)(f, s),
        "--force",
    ),
    ("dask address without dask", sweep("--dask-address", "tcp://127.0.0.1:1"), "--executor dask"),
    (
        "dask unreachable",
        sweep("--executor", "dask", "--dask-address", "tcp://127.0.0.1:1"),
        "cannot connect" if _installed("distributed") else "pip install",
    ),
    ("too many points", sweep(*grid("run.seed", 101), *grid("cluster.trainers", 101)), "points"),
    ("grid empty", sweep("--grid", "run.seed="), "--grid"),
    (
        "grid unknown nested key",
        sweep("--grid", "cluster.storage.bogus.deep=1,2"),
        "sweep cluster.storage.bogus.deep: unknown key 'bogus'",
    ),
    ("grid unknown policy key", sweep("--grid", "policies.*.intervall=1 h"), "'interval'"),
    ("halfwidth negative zero", sweep("--target-halfwidth", "-0"), "--target-halfwidth"),
    (
        "resume a file",
        lambda f, s: sweep("--resume", str(a_file(f, s)), folder_option=False)(f, s),
        "is a file",
    ),
    (
        "resume an unreadable manifest",
        lambda f, s: sweep("--resume", str(sweep_manifest_folder(f, s)), folder_option=False)(f, s),
        "cannot read the sweep manifest",
    ),
    # -- zeros, extremes, not-a-number (by class: tests/test_input_classes.py) -------------
    ("duration nan", run({"job.training": float("nan")}), "job.training: is not a number"),
    ("bandwidth inf", run({"cluster.nic_bandwidth": -float("inf")}), "is infinite"),
    ("interval nan", run({"policies.0.interval": float("nan")}), "policies.0.interval: is not"),
    (
        "zero snapshot bandwidth",
        sets("policies.2.snapshot_bandwidth=0 GB/s"),
        "policies.2.snapshot_bandwidth: must be positive",
    ),
    (
        "zero per-node storage bandwidth",
        run({"cluster.storage.read_bandwidth_per_node": "0 Gbit/s"}),
        "cluster.storage.read_bandwidth_per_node: must be positive",
    ),
    ("zero NIC bare", run({"cluster.nic_bandwidth": 0}), "cluster.nic_bandwidth: must be positive"),
    (
        "composed zero codec bandwidth",
        sets(composed_part("{kind: checknrun, recovery: partial, codec_bandwidth: 0 GB/s}")),
        "policies.0.parts.0.policy.codec_bandwidth: must be positive",
    ),
    (
        "composed zero copy bandwidth",
        sets(
            "policies=[{kind: composed, parts: [{scope: {hottest: 0.1}, policy: {kind: ecrm,"
            " k: 1, fallback: partial, memcpy_bandwidth: 0 B/s}}, {scope: rest, policy: {kind:"
            " cpr, target_pls: 0.1, fallback: false, trainer_failure: replica}}]}]"
        ),
        "policies.0.parts.0.policy.memcpy_bandwidth: must be positive",
    ),
    (
        "composed tiny target pls",
        sets(composed_part("{kind: cpr_mfu, target_pls: 1e-9, fallback: false}")),
        "policies.0.parts.0.policy.target_pls: a replication would simulate",
    ),
    (
        "tiny target accuracy loss",
        sets("policies=[{kind: cpr, target_accuracy_loss: 1.0e-12, pls_slope: 1}]"),
        "policies.0.target_accuracy_loss: a replication would simulate",
    ),
    (
        "composed replay machines",
        sets(composed_part("{kind: swift, replay_machines: 1000000000000000}")),
        "policies.0.parts.0.policy.replay_machines: exceeds the 2 embedding PS",
    ),
    (
        "zipf exponent huge",
        sets("policies=[{kind: cpr_mfu, target_pls: 0.1, popularity_exponent: 1.0e+300}]"),
        "policies.0.popularity_exponent: Input should be less than or equal to 10",
    ),
    (
        "weibull shape tiny",
        sets("failures.0={kind: weibull, job_mtbf: 1 h, shape: 1.0e-9}"),
        "failures.0.shape: Input should be greater than or equal to 0.01",
    ),
    (
        "alias bomb under a key",
        run(
            raw="name: x\njob:\n  tables:\n"
            + "".join("    " + line + "\n" for line in LAUGHS.splitlines())
        ),
        "job.tables.l9: invalid YAML",
    ),
    # -- failure logs and traces ---------------------------------------------------------
    ("failure log is a folder", failure_file("failure_log", None), "failure log is a folder"),
    ("trace is a folder", failure_file("trace", None), "trace file is a folder"),
    (
        "failure log mixed zones",
        failure_file(
            "failure_log",
            LOG_HEADER
            + "1,2005-06-21T10:54Z,2005-06-21T11:54Z\n2,6/21/2005 12:00,6/21/2005 13:00\n",
        ),
        "failures.csv line 3, column 2 (Prob Started): '6/21/2005 12:00' has no time zone",
    ),
    (
        "failure log bad fixed cell",
        failure_file("failure_log", LOG_HEADER + "1,6/21/2005 10:54,later\n"),
        "failures.csv line 2, column 3 (Prob Fixed): expected a time",
    ),
    (
        "failure log empty file",
        failure_file("failure_log", ""),
        "failures.csv line 1: the file is empty",
    ),
    # -- advise: its options and output folder (checked before the search) ----------------
    ("advise -o a file", advise(target=a_file), "is a file, not a folder"),
    ("advise -o under a file", advise(target=under_a_file), "which is a file, not a folder"),
    ("advise -o a run folder", advise(target=run_copy), "holds the output of 'ftsim run'"),
    ("advise -o a foreign folder", advise(target=lambda f, s: foreign_folder(f)), "no manifest"),
    (
        "advise -o an unreadable manifest",
        advise(target=with_manifest("{nope")),
        "manifest.json: cannot be read (not valid JSON",
    ),
    (
        "advise -o a file before its search",  # 500 replications per candidate: minutes
        advise("--reps", "500", target=a_file, name=SCENARIOS / "prod50h.yaml"),
        "is a file, not a folder",
    ),
    (
        "advise max-pls above 1",
        advise("--max-pls", "1.5"),
        "--max-pls must be a number from 0 to 1",
    ),
    (
        "advise max-pls nan",
        advise("--max-pls", "nan"),
        "--max-pls must be a number from 0 to 1",
    ),
    ("advise memory nan", advise("--max-memory-overhead", "nan"), "--max-memory-overhead"),
    ("advise memory negative", advise("--max-memory-overhead", "-1"), "--max-memory-overhead"),
    ("advise jobs zero", advise("--jobs", "0"), "--jobs must be a whole number of at least 1"),
    ("advise unknown policy", advise("--policy", "nope"), "no policy named 'nope'"),
    ("advise reps zero", advise("--reps", "0"), "--reps must be at least 1 (got 0)"),
    ("advise reps zero set", advise("--set", "run.replications=0"), "run.replications: Input"),
    ("advise reps yes", advise("--set", "run.replications=yes"), "not a yes/no value"),
    # -- plot: where the figures go --------------------------------------------------------
    ("plot -o the run folder", plot_into(lambda f, s: None), "holds the results of 'ftsim run'"),
    ("plot -o another run folder", plot_into(lambda f, s: fake_sweep(f, s)), "'ftsim sweep'"),
    ("plot -o a file", plot_into(a_file), "is a file, not a folder"),
    ("plot -o under a file", plot_into(under_a_file), "which is a file, not a folder"),
    ("plot -o a read-only folder", plot_into(read_only), "cannot write"),
    ("plot format empty", plot_of(lambda folder: None, "--format", ""), "--format"),
    ("plot format commas", plot_of(lambda folder: None, "--format", ",,"), "--format"),
    ("plot format gif", plot_of(lambda folder: None, "--format", "png,gif"), "format gif"),
    ("plot max-pls nan", plot_of(lambda folder: None, "--max-pls", "nan"), "--max-pls"),
    ("plot point of a run", plot_of(lambda folder: None, "--point", "1"), "it has: 0"),
    # -- run -o a folder whose manifest cannot be read ------------------------------------
    *(
        (f"run -o {what}", output_into("run", with_manifest(text)), f"cannot be read ({words}")
        for what, text, words in (
            ("manifest not JSON", "{nope", "not valid JSON"),
            ("manifest a list", "[1]", "not a JSON object"),
            ("manifest a folder", None, "is a folder"),
            ("manifest binary", "\x00\x01", "is a binary file"),
        )
    ),
    # -- a yes/no where a number is expected (by class: tests/test_input_classes.py) -------
    ("replications yes", sets("run.replications=yes"), "run.replications: expected a number"),
    ("trainers true", sets("cluster.trainers=true"), "cluster.trainers: expected a number"),
    ("seed on", run({"run.seed": True}), "run.seed: expected a number, not a yes/no"),
    (
        "policy count yes",
        sets("policies=[{kind: checknrun, baseline_every: yes}]"),
        "policies.0.baseline_every: expected a number",
    ),
    # -- an interval rule resolving to more checkpoints than a replication may simulate ----
    (
        "daly over a 1 us failure window",
        sets("failures=[{kind: scheduled, count: 3, end: 1 us}]", "policies.1.interval=daly"),
        "policies.1.interval: daly (job MTBF 3.33e-07 s",
    ),
    # -- trace and validate outputs ------------------------------------------------------
    ("trace of a file", lambda f, s: ["trace", str(a_file(f, s))], "is a file"),
    ("trace of nothing", lambda f, s: ["trace", str(f / "absent")], "no such folder"),
    (
        "validate -o without a suffix",
        lambda f, s: ["validate", "--quick", "-o", str(f / "report")],
        "give a file name with a suffix",
    ),
]


# -- the Python API with bad arguments (in process) ------------------------------------------

API_CASES = [
    ("run a number", lambda f: ftsim.run(123), "scenario must be a file's path or a Scenario"),
    ("run None", lambda f: ftsim.run(None), "scenario must be a file's path"),
    ("run a mapping", lambda f: ftsim.run({"name": "x"}), "scenario must be a file's path"),
    ("run a folder", lambda f: ftsim.run(f), "is a folder, not a file"),
    ("run a missing file", lambda f: ftsim.run(f / "no.yaml"), "file not found"),
    ("run overrides a list", lambda f: ftsim.run(SMOKE, ["a=1"]), "overrides must map"),
    ("run overrides a text", lambda f: ftsim.run(SMOKE, "a=1"), "overrides must map"),
    ("run an unknown key", lambda f: ftsim.run(SMOKE, {"nope": 1}), "nope: unknown key"),
    (
        "run reps yes",
        lambda f: ftsim.run(SMOKE, reps=True),
        "reps must be a whole number of at least 1 (got True, a bool)",
    ),
    (
        "run reps negative",
        lambda f: ftsim.run(SMOKE, reps=-1),
        "reps must be a whole number of at least 1 (got -1)",
    ),
    (
        "run reps fractional",
        lambda f: ftsim.run(SMOKE, reps=1.5),
        "reps must be a whole number of at least 1 (got 1.5)",
    ),
    (
        "run seed yes",
        lambda f: ftsim.run(SMOKE, seed=True),
        "seed must be a whole number of at least 0 (got True, a bool)",
    ),
    (
        "run seed a word",
        lambda f: ftsim.run(SMOKE, seed="a"),
        "seed must be a whole number of at least 0 (got 'a', a str)",
    ),
    ("run policies a number", lambda f: ftsim.run(SMOKE, policies=5), "policies must be"),
    ("run an unknown policy", lambda f: ftsim.run(SMOKE, policies=["x"]), "no policy named"),
    ("run jobs zero", lambda f: ftsim.run(SMOKE, jobs=0), "jobs must be a whole number"),
    ("run jobs a text", lambda f: ftsim.run(SMOKE, jobs="2"), "jobs must be a whole number"),
    ("run trainer a text", lambda f: ftsim.run(SMOKE, trainer="no"), "trainer must be True"),
    ("run progress a text", lambda f: ftsim.run(SMOKE, progress="yes"), "progress must be"),
    ("run out a number", lambda f: ftsim.run(SMOKE, out=5), "out must be a folder's path"),
    ("run out a file", lambda f: ftsim.run(SMOKE, out=a_file(f, {})), "is a file, not a folder"),
    ("sweep grid a text", lambda f: ftsim.sweep(SMOKE, "x"), "grid must map dotted keys"),
    ("sweep grid a list", lambda f: ftsim.sweep(SMOKE, ["run.seed=1"]), "grid must map"),
    ("sweep grid a scalar", lambda f: ftsim.sweep(SMOKE, {"run.seed": 1}), "valid list"),
    ("sweep grid no values", lambda f: ftsim.sweep(SMOKE, {"run.seed": []}), "at least one"),
    ("sweep zip a number", lambda f: ftsim.sweep(SMOKE, {"zip": 5}), "zip"),
    (
        "sweep zip unequal",
        lambda f: ftsim.sweep(SMOKE, {"zip": {"run.seed": [1], "cluster.trainers": [1, 2]}}),
        "equal lengths",
    ),
    ("sweep executor", lambda f: ftsim.sweep(SMOKE, {"run.seed": [1]}, executor="x"), "executor"),
    ("load a number", lambda f: ftsim.load(5), "run_dir must be a folder's path"),
    ("load None", lambda f: ftsim.load(None), "run_dir must be a folder's path"),
    ("load a file", lambda f: ftsim.load(a_file(f, {})), "not a folder"),
    ("load nothing there", lambda f: ftsim.load(f / "absent"), "no such folder"),
    ("load a foreign folder", lambda f: ftsim.load(foreign_folder(f)), "manifest.json"),
    ("load_scenario overrides a list", lambda f: ftsim.load_scenario(SMOKE, ["a"]), "overrides"),
]
"""(name, call in a fresh folder, words of the message) of each bad argument to the API."""


@pytest.mark.parametrize(("name", "call", "words"), API_CASES, ids=[c[0] for c in API_CASES])
def test_the_python_api_refuses_a_bad_argument_with_one_of_its_errors(tmp_path, name, call, words):
    """ftsim's own error (``ScenarioError``, ``StudyError``, ``FolderError``: what the
    command line prints as one line), naming the argument or field; never a TypeError from
    deep inside; nothing written."""
    (tmp_path / "f").mkdir()
    with pytest.raises(Exception) as caught:  # noqa: PT011 (the class is what is checked)
        call(tmp_path / "f")
    error = caught.value
    assert type(error).__module__.startswith("ftsim."), repr(error)
    assert words in str(error) and "\n" not in str(error).strip(), str(error)
    written = {"manifest.json", "runs.parquet", "summary.csv", "timeline.csv", "scenario.yaml"}
    assert not [p for p in tmp_path.rglob("*") if p.name in written]


# -- running the cases ----------------------------------------------------------------------


def digest(folder: Path) -> str:
    """SHA-256 over the relative path, kind and bytes of everything under ``folder``."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"<dir>")
    return h.hexdigest()


def _ftsim(args: list[str], cwd: Path, **options) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [*FTSIM, *args], capture_output=True, text=True, cwd=cwd, timeout=HANG_S, **options
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, "hang", "", f"no answer within {HANG_S} s")


def _lock(folder: Path) -> bool:
    """Make ``folder`` read-only, even for root (chattr +i); False if that is impossible."""
    folder.chmod(0o555)
    if not os.access(folder, os.W_OK):
        return True
    locked = subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
    return locked and not _writable(folder)


def _writable(folder: Path) -> bool:
    try:
        (folder / ".probe").touch()
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


def _unlock(folder: Path) -> None:
    subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    folder.chmod(0o755)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A real run folder, and a way to lock folders that is undone at the end."""
    root = tmp_path_factory.mktemp("shared")
    made = _ftsim(["run", str(SMOKE), "--no-trainer", "--reps", "1", "-q", "-o", "run"], root)
    assert made.returncode == 0, made.stderr
    locked: list[Path] = []

    def lock(folder: Path) -> bool:
        locked.append(folder)
        return _lock(folder)

    yield {"run": root / "run", "lock": lock}
    for folder in locked:
        _unlock(folder)


@pytest.fixture(scope="module")
def outcomes(shared, tmp_path_factory):
    """(argv, result, digest before, digest after) per case id; None for a skipped case."""
    root = tmp_path_factory.mktemp("cases")
    jobs = {}
    for name, make, _ in CASES:
        folder = root / re.sub(r"\W+", "_", name)
        folder.mkdir()
        try:
            args = make(folder, shared)
        except _NoReadOnly:
            args = None
        jobs[name] = (folder, args, digest(folder) if args else None)

    def execute(item):
        name, (folder, args, before) = item
        if args is None:
            return name, None
        result = _ftsim(args, folder)
        return name, (args, result, before, digest(folder))

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(execute, jobs.items()))


def test_there_are_at_least_160_cases():
    assert len(CASES) + len(API_CASES) >= 160
    assert len({name for name, _, _ in [*CASES, *API_CASES]}) == len(CASES) + len(API_CASES)


@pytest.mark.parametrize(("name", "make", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_located_line_per_problem_and_changes_nothing(outcomes, name, make, words):
    if outcomes[name] is None:
        pytest.skip("cannot make a read-only folder here")
    args, result, before, after = outcomes[name]
    assert result.returncode == 2, (args, result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines, args
    located = ("ftsim: ", str(SCENARIOS), "/tmp", "/dev/")
    assert all(line.startswith(located) for line in lines), lines
    assert words in result.stderr, lines
    assert after == before, "the command changed files in its folder"


# -- killed, interrupted and piped commands --------------------------------------------------


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(condition: Callable[[], object], timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


LONG_SWEEP = [*FTSIM, "sweep", str(SMOKE), "--no-trainer", "--reps", "5000", "--jobs", "2", "-q"]


def _shards(folder: Path) -> list[Path]:
    """The rows shards of finished tasks (written after their timeline shard: a task with
    its timeline shard only is not finished yet)."""
    found = (folder / "shards").glob("p*.csv") if (folder / "shards").is_dir() else []
    return [p for p in found if not p.name.endswith(".timeline.csv")]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_pool_workers_exit_when_the_sweep_is_killed(tmp_path):
    sweep = subprocess.Popen(
        [*LONG_SWEEP, "-o", str(tmp_path / "s")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: set[int] = set()
    try:
        _wait_for(lambda: _shards(tmp_path / "s"), 60, "the first shard")
        workers = _wait_for(lambda: _children(sweep.pid), 10, "the pool workers")
        sweep.kill()  # SIGKILL to the sweep only: it cannot stop its workers
        sweep.wait()
        deadline = time.monotonic() + 5
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if _alive(pid)]
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_ctrl_c_in_a_sweep_says_what_was_saved_and_how_to_resume(tmp_path):
    out = tmp_path / "s"
    sweep = subprocess.Popen(
        [*LONG_SWEEP, "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=terminal_signals,
    )
    _wait_for(lambda: _shards(out), 60, "the first shard")
    os.killpg(sweep.pid, signal.SIGINT)  # as a terminal does: the whole process group
    _, err = sweep.communicate(timeout=30)
    assert sweep.returncode == 130, err
    assert "Traceback" not in err
    saved = re.search(r"(\d+) of 1500 tasks \((\d+) of 15000 replications\) are saved in", err)
    assert saved and int(saved.group(2)) == 10 * int(saved.group(1)) > 0, err
    command = err.strip().splitlines()[-1]
    assert command.endswith(f"--resume {out}") and " -o " not in command, command


def test_ctrl_c_in_a_run_is_one_line_and_leaves_no_folder(tmp_path):
    out = tmp_path / "r"
    args = ["run", str(SMOKE), "--no-trainer", "--reps", "100000", "-q", "-o", str(out)]
    process = subprocess.Popen(
        [*FTSIM, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=terminal_signals,
    )
    _wait_for(out.exists, 60, "the run folder")
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert err == f"ftsim: interrupted; nothing was written to {out}\n"
    assert not out.exists()


def test_resume_recomputes_a_truncated_shard_and_never_reuses_it(tmp_path):
    out = tmp_path / "s"
    args = ["sweep", str(SMOKE), "--no-trainer", "--reps", "4", "--batch", "2", "-q"]
    first = _ftsim([*args, "--jobs", "64", "-o", str(out)], tmp_path)
    assert first.returncode == 0, first.stderr
    assert "computed 12, reused 0" in first.stdout
    assert "--jobs 64: using" in first.stderr  # capped at the CPUs or the 6 tasks
    merged = (out / "runs.csv").read_bytes()
    shard = sorted(p for p in _shards(out) if not p.name.endswith("timeline.csv"))[1]
    shard.write_bytes(shard.read_bytes()[:40])
    resumed = _ftsim([*args, "--jobs", "1", "--resume", str(out)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "computed 2, reused 10" in resumed.stdout
    assert "fail their checksum" in resumed.stderr and "Traceback" not in resumed.stderr
    assert (out / "runs.csv").read_bytes() == merged


@pytest.mark.parametrize("what", ["show reference", "show config", "plot"])
def test_output_into_a_closed_pipe_ends_quietly(shared, what):
    args = {
        "show reference": ["show", "reference"],
        "show config": ["show", "config", str(SMOKE)],
        "plot": ["plot", str(shared["run"])],
    }[what]
    process = subprocess.Popen([*FTSIM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before anything is written (like `| head`)
    err = process.stderr.read().decode()
    process.wait(timeout=HANG_S)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert process.returncode == 141


# -- doubtful but valid input: a warning or a note, and the work done ---------------------------


def test_trace_into_a_folder_uses_the_default_name_there(shared, tmp_path):
    folder = run_copy(tmp_path, shared)
    (tmp_path / "traces").mkdir()
    made = _ftsim(["trace", str(folder), "-o", str(tmp_path / "traces")], tmp_path)
    assert made.returncode == 0, made.stderr
    assert [p.name for p in (tmp_path / "traces").iterdir()] == ["trace_rep0.json"]
    assert f"trace: {tmp_path / 'traces' / 'trace_rep0.json'} (" in made.stdout


def test_trace_of_an_edited_run_folder_says_the_scenario_was_edited(shared, tmp_path):
    folder = run_copy(tmp_path, shared)
    text = (folder / "scenario.yaml").read_text()
    (folder / "scenario.yaml").write_text(text.replace("job_mtbf: 1 h", "job_mtbf: 30 min"))
    made = _ftsim(["trace", str(folder)], tmp_path)
    assert made.returncode == 0, made.stderr
    assert "scenario.yaml was edited after the run (its config hash is" in made.stderr
    assert "another version of ftsim" not in made.stderr


def test_a_tiny_target_halfwidth_stops_at_max_reps_and_says_so(tmp_path):
    """(t·s/h)² overflowed a float for a tiny target h: now the cap is reached and said."""
    args = ["sweep", str(SMOKE), "--no-trainer", "--reps", "2", "--batch", "2", "--jobs", "1"]
    args += ["--policy", "full", "--target-halfwidth", "1e-300", "--max-reps", "4", "-q"]
    made = _ftsim([*args, "-o", str(tmp_path / "s")], tmp_path)
    assert made.returncode == 0, made.stderr
    assert "Traceback" not in made.stderr
    assert "ftsim: warning: full at point 0: --max-reps 4 reached with a 95% CI half-width of" in (
        made.stderr
    )
    assert "computed 4, reused 0" in made.stdout
    summary = pd.read_csv(tmp_path / "s" / "summary.csv")
    assert summary["stopped_at_max_reps"].tolist() == [True]


def test_the_cap_of_replications_is_a_notice_from_python(tmp_path):
    """It went to standard error alone: a notebook could neither catch nor silence it."""
    import ftsim
    from ftsim.notices import MaxRepsReached

    grid = {"policies.0.interval": ["10 min"]}
    with pytest.warns(MaxRepsReached, match="full at point 0: max_reps=4 reached"):
        done = ftsim.sweep(SMOKE, grid, reps=2, trainer=False, target_halfwidth=1e-300,
                           max_reps=4, policies=["full"], out=tmp_path / "s")  # fmt: skip
    assert done.summary["stopped_at_max_reps"].all()


def test_warnings_are_located_lines_and_the_run_goes_on(tmp_path):
    (tmp_path / "t.csv").write_text("time_h,node\n1,emb_ps0\n9,emb_ps1\n")
    path = scenario(
        tmp_path,
        {
            "failures": [{"kind": "trace", "file": "t.csv"}],
            "policies": [{"kind": "checknrun", "quantization": "uniform"}],
        },
    )
    made = _ftsim(["run", str(path), "--reps", "1", "-q", "-o", str(tmp_path / "out")], tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stderr.splitlines() == [
        f"{path}: failures.0.file: warning: t.csv line 3, at 9 h, is after the failure-free "
        "training time (4 h): a failure after it strikes only if earlier ones delay the job "
        "that long",
        f"{path}: policies.0.quantization: warning: has no effect: quantize_bits is null (no "
        "quantization)",
    ]


def test_a_sweep_over_windows_of_a_log_runs_the_quiet_ones(tmp_path):
    (tmp_path / "log.csv").write_text(
        "nodenum,Prob Started,Down Time\n3,6/21/2005 10:54,5\n5,6/21/2005 13:00,5\n"
    )
    path = scenario(tmp_path, {"failures": [{"kind": "failure_log", "path": "log.csv"}]})
    windows = "failures.0.start=6/21/2005 10:00,6/21/2005 12:00,6/23/2005 0:00"
    args = ["sweep", str(path), "--grid", windows, "--reps", "1", "--jobs", "1", "-q"]
    made = _ftsim([*args, "--policy", "full", "-o", str(tmp_path / "s")], tmp_path)
    assert made.returncode == 0, made.stderr
    runs = (tmp_path / "s" / "runs.csv").read_text().splitlines()
    header = runs[0].split(",")
    failures = [int(float(r.split(",")[header.index("n_failures")])) for r in runs[1:]]
    assert failures == [2, 1, 0]
