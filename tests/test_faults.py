"""Faults during work, by class: the disk fills up, two processes write one folder, a run
folder of another configuration is in the way, the terminal cannot show a character.

Each command ends in one located line and exit status 2 (never a traceback), leaves no
half-written folder, and damages nothing that was there before. A full disk is a
size-limited tmpfs, mounted at sizes that make each command fail at a different write
(root only: skipped elsewhere). Signals at random moments are in
``tests/test_fault_fuzz.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import ftsim
import ftsim.plots as plots
import ftsim.validation.suite as suite
from ftsim import console
from ftsim.cli import main
from ftsim.experiments import output
from ftsim.experiments.lock import LOCK, locked_folder
from tests.conftest import SCENARIOS

SMOKE = SCENARIOS / "smoke.yaml"
FTSIM = [sys.executable, "-m", "ftsim"]
RUN = ["run", str(SMOKE), "--no-trainer", "--reps", "2", "-q"]
SWEEP = ["sweep", str(SMOKE), "--no-trainer", "--reps", "2", "--batch", "1", "--jobs", "1", "-q"]
RESULTS = ("runs.csv", "runs.parquet", "timeline.csv", "summary.csv", "scenario.yaml")


def digest(folder: Path) -> dict[str, str]:
    """Relative path → SHA-256 (or ``<dir>``) of everything under ``folder``."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "<dir>"
        for p in sorted(Path(folder).rglob("*"))
    }


def names_within(line: str, folder: Path) -> bool:
    """Whether ``line`` ends by naming ``folder`` or a file the command was writing in it (a
    staged file is named as the file it was to become: ``writing OUT/runs.csv``)."""
    return re.search(rf"writing {re.escape(str(folder))}(/[\w.-]+)*$", line) is not None


def one_located_line(err: str, start: str = "ftsim: no space left on device writing ") -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), err
    assert "Traceback" not in err
    return lines[0]


# -- a full disk ----------------------------------------------------------------------------


@pytest.fixture
def disk(tmp_path):
    """``mount(size)``: a fresh tmpfs of ``size`` bytes; ``resize(size)`` grows it."""
    if os.geteuid() != 0:
        pytest.skip("a size-limited tmpfs needs root")
    point = tmp_path / "disk"
    point.mkdir()
    mounted = []

    def mount(size: int) -> Path:
        if mounted:
            subprocess.run(["umount", str(point)], check=True)
            mounted.clear()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
            capture_output=True,
        )
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
        mounted.append(point)
        return point

    def resize(size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(point)], check=True)

    yield mount, resize
    if mounted:
        subprocess.run(["umount", "-l", str(point)], check=True)


def fill(folder: Path, leave: int) -> None:
    """Fill ``folder``'s file system until about ``leave`` bytes are free."""
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    (folder / "ballast").write_bytes(b"\0" * max(free - leave, 0))


SIZES = [4096 * n for n in (1, 2, 3, 5, 8, 10, 12)]
"""tmpfs sizes (bytes) at which a run of smoke (2 reps, ~50 KB) fails at different writes."""


@pytest.mark.parametrize("size", SIZES)
def test_run_on_a_full_disk_leaves_no_folder(disk, size, capsys):
    mount, _ = disk
    root = mount(size)
    assert main([*RUN, "-o", str(root / "r")]) == 2
    line = one_located_line(capsys.readouterr().err)
    assert names_within(line, root / "r"), line
    assert list(root.iterdir()) == []


def made_then_filled(disk, size: int, args: list[str], leave: int) -> tuple[Path, Path, dict]:
    """A tmpfs of ``size`` bytes holding the output of ``ftsim ARGS -o ROOT/earlier``, then
    filled until ``leave`` bytes are free: (root, the output folder, its digest)."""
    mount, _ = disk
    root = mount(size)
    out = root / "earlier"
    assert main([*args, "-o", str(out)]) == 0
    before = digest(out)
    fill(root, leave)
    return root, out, before


@pytest.mark.parametrize("leave", [0, 8192, 32768])
def test_rerunning_into_a_run_folder_on_a_full_disk_keeps_the_earlier_results(disk, leave, capsys):
    _, out, before = made_then_filled(disk, 256 * 1024, RUN, leave)
    assert main([*RUN, "-o", str(out)]) == 2
    one_located_line(capsys.readouterr().err)
    assert digest(out) == before


def test_without_staging_a_full_disk_damages_the_earlier_run(disk, capsys, monkeypatch):
    """The injected bug: results written straight into the folder (no staging folder)."""
    mount, _ = disk
    root = mount(256 * 1024)
    out = root / "r"
    assert main([*RUN, "-o", str(out)]) == 0
    before = digest(out)
    (out / "runs.csv").write_text("")  # smaller, so that the rewrite of runs.csv fits
    before = digest(out)
    fill(root, 8192)
    monkeypatch.setattr(output, "StagedFolder", Unstaged)
    assert main([*RUN, "-o", str(out)]) == 2
    assert digest(out) != before


@pytest.mark.parametrize("size", [4096 * n for n in (2, 4, 6, 10)])
def test_a_sweep_on_a_full_disk_is_continued_to_the_same_results(disk, size, tmp_path, capsys):
    mount, resize = disk
    root = mount(size)
    out = root / "s"
    assert main([*SWEEP, "-o", str(out)]) == 2
    line = one_located_line(capsys.readouterr().err)
    if out.exists():  # something was kept: the line says how to continue
        assert line.endswith(f"continue with --resume {out}")
        resize(1024 * 1024)
        assert main([*SWEEP, "--resume", str(out)]) == 0
    else:
        resize(1024 * 1024)
        assert main([*SWEEP, "-o", str(out)]) == 0
    capsys.readouterr()
    reference = tmp_path / "reference"
    assert main([*SWEEP, "-o", str(reference)]) == 0
    for name in ("runs.csv", "timeline.csv", "summary.csv"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


@pytest.fixture
def run_on_disk(disk, capsys):
    """A run folder on a tmpfs with room for the run only, and the tmpfs resizer."""
    mount, resize = disk
    root = mount(512 * 1024)
    assert main([*RUN, "-o", str(root / "r")]) == 0
    capsys.readouterr()
    return root / "r", resize


@pytest.mark.parametrize("leave", [0, 16384, 65536])
def test_plot_on_a_full_disk_is_one_line_and_plots_after_room_is_made(run_on_disk, leave, capsys):
    out, resize = run_on_disk
    fill(out.parent, leave)
    before = {k: v for k, v in digest(out).items() if not k.startswith("plots")}
    assert main(["plot", str(out)]) == 2
    one_located_line(capsys.readouterr().err)
    assert {k: v for k, v in digest(out).items() if not k.startswith("plots")} == before
    assert not [p for p in out.rglob(".*.tmp")]  # no temporary file left
    assert not (out / "plots").exists()  # nothing half-written
    (out.parent / "ballast").unlink()
    resize(4 * 1024 * 1024)
    assert main(["plot", str(out)]) == 0  # the same command makes the plots folder


class Unstaged(output.StagedFolder):
    """The injected bug: files written straight into the folder (no staging folder)."""

    def __enter__(self):
        return self.folder

    def __exit__(self, *exc):
        self.committed = True


@pytest.mark.parametrize("leave", [0, 16384, 70000, 131072])
def test_plot_on_a_full_disk_leaves_the_earlier_figures_as_they_were(run_on_disk, leave, capsys):
    """Figures replacing earlier ones (in more formats) on a disk that fills up at some
    point of the writing: one line, and the earlier figures as they were, all of them."""
    out, resize = run_on_disk
    resize(1024 * 1024)
    assert main(["plot", str(out), "--format", "png"]) == 0
    before = digest(out)
    fill(out.parent, leave)
    capsys.readouterr()
    assert main(["plot", str(out), "--format", "pdf,png"]) == 2
    assert names_within(one_located_line(capsys.readouterr().err), out / "plots")
    assert digest(out) == before


def test_without_staging_a_plot_on_a_full_disk_mixes_figures(run_on_disk, capsys, monkeypatch):
    out, resize = run_on_disk
    resize(1024 * 1024)
    assert main(["plot", str(out), "--format", "png"]) == 0
    before = digest(out)
    fill(out.parent, 70000)  # room for a new PDF (18 kB), not for a PNG beside the old
    monkeypatch.setattr(plots, "StagedFolder", Unstaged)
    assert main(["plot", str(out), "--format", "pdf,png"]) == 2
    assert digest(out) != before


ADVISE = ["advise", str(SMOKE), "--reps", "2", "--jobs", "1", "-q"]


@pytest.mark.parametrize("leave", [0, 8192, 65536, 200_000])
def test_advise_on_a_full_disk_leaves_no_folder_or_the_earlier_advice(disk, leave, capsys):
    """The advice (candidates, frontier figure, manifest) is staged: a disk that fills up
    while it is written leaves no folder, or the earlier advice as it was."""
    root, earlier, before = made_then_filled(disk, 1024 * 1024, ADVISE, leave)
    capsys.readouterr()
    written = set()
    for out in (root / "new", earlier):
        status = main([*ADVISE, "-o", str(out), "--force"])
        if status == 2:  # nothing of this advice; a new folder only if an earlier call made it
            one_located_line(capsys.readouterr().err)
            assert digest(earlier) == before
            assert (root / "new").exists() == (root / "new" in written)
        else:  # room enough: the whole advice
            assert status == 0 and {p.name for p in out.iterdir()} == set(before)
            written.add(out)


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_trace_on_a_full_disk_writes_nothing(run_on_disk, name, capsys):
    out, _ = run_on_disk
    fill(out.parent, 0)
    before = digest(out)
    assert main(["trace", str(out), "-o", str(out / name)]) == 2
    line = one_located_line(capsys.readouterr().err.splitlines()[-1])  # after load warnings
    assert line.endswith(f"writing {out / name}")
    assert digest(out) == before


@pytest.mark.parametrize(
    "args", [["show", "config", str(SMOKE)], ["show", "policies"], [*RUN[:-1], "-o", "OUT"]]
)
def test_standard_output_to_a_full_disk_is_one_line(disk, args, tmp_path):
    mount, _ = disk
    root = mount(4096)
    fill(root, 0)
    args = [a.replace("OUT", str(tmp_path / "r")) for a in args]
    with open(root / "out.txt", "w") as stdout:
        done = subprocess.run([*FTSIM, *args], stdout=stdout, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2
    one_located_line(done.stderr.splitlines()[-1], "ftsim: no space left on device writing ")
    assert done.stderr.strip().endswith("writing standard output")


STDOUT_COMMANDS = {
    "show reference": ["show", "reference"],  # 38 kB
    "show policies": ["show", "policies"],  # 10 kB
    "show presets": ["show", "presets"],
    "show config": ["show", "config", str(SMOKE)],
    "run": [*RUN[:-1], "--reps", "1", "--jobs", "1", "--force", "-o", "OUT"],
}


def _stdout_into(path: Path, buffered: bool) -> io.TextIOWrapper:
    """A standard output into ``path`` as Python makes it (unbuffered: ``PYTHONUNBUFFERED``)."""
    raw = io.FileIO(path, "w")
    return io.TextIOWrapper(
        io.BufferedWriter(raw) if buffered else raw, encoding="utf-8", write_through=not buffered
    )


def _output_of(args: list[str], path: Path, buffered: bool, monkeypatch) -> int:
    stream = _stdout_into(path, buffered)
    monkeypatch.setattr(sys, "stdout", stream)
    try:
        return main(args)
    finally:
        monkeypatch.undo()
        with contextlib.suppress(OSError):
            stream.close()


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("command", sorted(STDOUT_COMMANDS))
def test_standard_output_cut_short_by_a_full_disk_is_never_a_success(
    disk, tmp_path, command, buffered, capsys, monkeypatch
):
    """Every command's standard output into a file on a disk with room for none, one or
    three blocks of it: the whole output and exit 0, or the located line and exit 2, never
    a truncated file and exit 0 (a cut-short write was dropped, unbuffered even when small)."""
    args = [a.replace("OUT", str(tmp_path / "r")) for a in STDOUT_COMMANDS[command]]
    assert _output_of(args, tmp_path / "whole.txt", buffered, monkeypatch) == 0
    whole = (tmp_path / "whole.txt").read_bytes()
    mount, _ = disk
    for room in (0, 4096, 3 * 4096):
        root = mount(16 * 4096)
        fill(root, room)
        capsys.readouterr()
        status = _output_of(args, root / "out.txt", buffered, monkeypatch)
        if status == 0:
            assert (root / "out.txt").read_bytes() == whole
        else:
            assert status == 2 and len(whole) > room
            err = capsys.readouterr().err.splitlines()
            assert err[-1] == "ftsim: no space left on device writing standard output", err


def test_without_whole_writes_an_unbuffered_output_is_cut_short_silently(disk, capsys, monkeypatch):
    """The injected bug: standard output as Python gives it."""
    monkeypatch.setattr(console, "whole_writes", contextlib.nullcontext)
    mount, _ = disk
    root = mount(4 * 4096)
    assert _output_of(["show", "reference"], root / "out.txt", False, monkeypatch) == 0
    assert (root / "out.txt").stat().st_size == 4 * 4096  # of 38 kB


def _probe_check(ctx):
    """A check that draws a figure and reports a number with the characters of a report."""
    import numpy as np

    def draw(plt):
        fig, ax = plt.subplots()
        ax.plot(np.arange(200), np.random.default_rng(0).random(200))
        return fig

    figure = suite._figure(ctx, "probe", draw)
    return suite.Check("probe", "probe", "1.0 ± 0.1 (n ≥ 3) × 2 …", "1", "±5%", True, "", figure)


@pytest.fixture
def quick_suite(monkeypatch):
    """The validation suite reduced to one real check and a check that draws a figure."""
    registry = {
        "daly_example": suite.REGISTRY["daly_example"],
        "probe": ("P", _probe_check, "validation"),
    }
    monkeypatch.setattr(suite, "REGISTRY", registry)


@pytest.mark.parametrize("leave", [0, 4096, 20000])
def test_validate_on_a_full_disk_is_one_line(disk, quick_suite, leave, capsys):
    mount, _ = disk
    root = mount(1024 * 1024)
    fill(root, leave)
    report = root / "v" / "validation.md"
    assert main(["validate", "--quick", "-o", str(report)]) == 2
    err = capsys.readouterr().err
    one_located_line(err)
    assert not report.exists()


# -- killed outright while moving the results into place -------------------------------------

LIGHT = [*RUN, "--reps", "1", "--policy", "full", "--jobs", "1"]
MOVES = ("rename", "replace", "unlink", "rmdir")
"""The calls of ``os`` that move a staged set of results into place (each one step)."""


def _killed_at_move(step: int, args: list[str]) -> int:
    """Run ``ftsim ARGS`` in a forked child that SIGKILLs itself before the ``step``-th
    move of its commit (counted from the rename of the staging folder to
    :data:`~ftsim.experiments.output.COMMIT`); the child's wait status."""
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        try:
            moves = [-1]

            def counted(name: str):
                original = getattr(os, name)

                def move(*a, **k):
                    if name == "rename" and Path(a[1]).name == output.COMMIT:
                        moves[0] = 0  # the commit starts
                    if moves[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    if moves[0] >= 0:
                        moves[0] += 1
                    return original(*a, **k)

                return move

            for name in MOVES:
                setattr(os, name, counted(name))
            sys.stdout = sys.stderr = io.StringIO()
            os._exit(main(args))
        finally:
            os._exit(99)
    return os.waitpid(pid, 0)[1]


def _complete_set(folder: Path) -> dict[str, str]:
    """The result files of ``folder`` with the manifest's config hash, if its manifest is
    there and records the checksums of its result files (else an AssertionError)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["files"] == output_checksums(folder), "a manifest of other files"
    found = {name: (folder / name).read_bytes().hex() for name in RESULTS}
    return {**found, "config_hash": manifest["config_hash"]}


def output_checksums(folder: Path) -> dict[str, str]:
    from ftsim.experiments.folders import result_checksums

    return result_checksums(folder)


def test_a_run_killed_at_each_step_of_its_moves_leaves_a_complete_set_or_one_it_completes(
    tmp_path, capsys
):
    """``run --force`` replacing a run folder of another seed, SIGKILLed before each of the
    moves that put its results in place: the folder holds the old complete set, the new
    complete set, or a commit folder that the next command holding it completes to the new
    set, saying so (the readers plot, trace and ftsim.load in turn, as well as the same
    command again)."""
    old, new = tmp_path / "old", tmp_path / "new"
    replace = [*LIGHT, "--seed", "8", "--force"]
    assert main([*LIGHT, "-o", str(old)]) == 0
    assert main([*replace, "-o", str(new)]) == 0
    sets = {"old": _complete_set(old), "new": _complete_set(new)}
    seen, completed_by = [], set()
    for step in range(20):
        out = tmp_path / f"killed_{step}"
        shutil.copytree(old, out)
        status = _killed_at_move(step, [*replace, "-o", str(out)])
        if os.WIFEXITED(status):  # past the last move: the run ended normally
            assert os.WEXITSTATUS(status) == 0 and step > 3
            assert _complete_set(out) == sets["new"]
            break
        assert os.WTERMSIG(status) == signal.SIGKILL
        capsys.readouterr()
        if (out / output.COMMIT).exists():
            left = list((out / output.COMMIT).iterdir())  # none: killed before its removal
            seen.append("completed" if left else "new")
            # a reader completes it (plot, trace, the API's load), as the same command does
            completer = len(seen) % 4
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if completer == 0:
                    assert main(["plot", str(out), "-q", "--format", "png"]) == 0
                elif completer == 1:
                    assert main(["trace", str(out), "-o", str(tmp_path / f"{step}.json")]) == 0
                elif completer == 2:
                    assert ftsim.load(out).runs.shape[0] == 1
                else:
                    assert main([*replace, "-o", str(out)]) == 0
            said = "they were moved now" in capsys.readouterr().err + "".join(
                str(w.message) for w in caught
            )
            completed_by.update([completer] if left else [])
            assert said == bool(left)
            assert not (out / output.COMMIT).exists()
            assert _complete_set(out) == sets["new"]
        else:
            state = _complete_set(out)
            seen.append(next(name for name, files in sets.items() if files == state))
    assert seen[0] == "old" and seen[-1] in ("completed", "new") and "completed" in seen, seen
    assert completed_by == {0, 1, 2, 3}  # each reader met moves left to complete


def test_without_completing_an_interrupted_commit_its_folder_is_refused(tmp_path, capsys):
    """The injected bug: the next holder does not complete the moves (the earlier
    behaviour): a run killed after its first moves leaves a folder without a manifest."""
    out = tmp_path / "r"
    assert main([*LIGHT, "-o", str(out)]) == 0
    assert os.WTERMSIG(_killed_at_move(3, [*LIGHT, "--seed", "8", "--force", "-o", str(out)]))
    (out / output.COMMIT).rename(out / "left")  # what the moves left, unknown to ftsim
    capsys.readouterr()
    assert main([*LIGHT, "--seed", "8", "-o", str(out)]) == 2
    assert (
        "holds no manifest.json of ftsim, not earlier output of 'ftsim run'"
        in capsys.readouterr().err
    )


def test_a_plot_killed_while_moving_its_figures_is_completed_by_the_next(tmp_path, capsys):
    """The figures of ``plot`` are a staged set too (the steps are those of a run's,
    above): killed after moving some of them, the next plot completes the set, saying so."""
    run = tmp_path / "r"
    assert main([*LIGHT, "-o", str(run)]) == 0
    assert main(["plot", str(run), "-q", "--format", "png"]) == 0
    args = ["plot", str(run), "-q", "--format", "png,pdf"]
    assert os.WTERMSIG(_killed_at_move(3, args)) == signal.SIGKILL
    assert len(list((run / "plots" / output.COMMIT).iterdir())) == 4  # of 6 files
    capsys.readouterr()
    assert main(["plot", str(run), "-q", "--format", "png"]) == 0
    assert "they were moved now" in capsys.readouterr().err
    assert sorted(p.name for p in (run / "plots").iterdir()) == [
        f"{name}.{kind}" for name in ("breakdown", "timeline") for kind in ("csv", "pdf", "png")
    ]


# -- two writers, one folder ----------------------------------------------------------------


def _ftsim(args: list[str], **options) -> subprocess.CompletedProcess:
    return subprocess.run([*FTSIM, *args], capture_output=True, text=True, timeout=120, **options)


WRITERS = {
    "run": lambda out: [*RUN, "-o", str(out)],
    "sweep": lambda out: [*SWEEP, "-o", str(out)],
    "sweep --resume": lambda out: [*SWEEP, "--resume", str(out)],
    "run --force": lambda out: [*RUN, "-o", str(out), "--force"],
}
HOLDERS = {
    "new folder": lambda f: f / "new",
    "a run folder": lambda f: _made(f, RUN),
    "a sweep folder": lambda f: _made(f, SWEEP),
}


def _made(folder: Path, command: list[str]) -> Path:
    out = folder / "made"
    assert main([*command, "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize("holder", sorted(HOLDERS))
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_second_writer_is_refused_naming_the_folder_and_the_holder(
    tmp_path, holder, writer, capsys
):
    out = HOLDERS[holder](tmp_path)
    capsys.readouterr()
    with locked_folder(out):
        before = digest(out)
        done = _ftsim(WRITERS[writer](out))
        assert digest(out) == before
    assert done.returncode == 2, done.stderr
    line = one_located_line(done.stderr, f"ftsim: {out}: in use by another ftsim process")
    assert f"(pid {os.getpid()})" in line
    assert not (out / LOCK).exists()  # the holder's lock goes with it


def _lock_holder(folder: Path) -> int | None:
    """The pid the lock of ``folder`` holds (None: no lock, or its pid not written yet)."""
    try:
        text = (folder / LOCK).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def test_a_run_and_a_sweep_started_together_never_mix(tmp_path):
    """Both orders: the first holds the folder to the end, the second is refused. The first
    is stopped (SIGSTOP) from the moment its lock holds its pid until the second has tried:
    its 900 replications take less time than the second's start-up on a fast machine."""
    for first, second in (("run", "sweep"), ("sweep", "run")):
        out = tmp_path / f"{first}_first"
        long = {"run": [*RUN, "--reps", "300"], "sweep": [*SWEEP, "--reps", "300", "--batch", "20"]}
        process = subprocess.Popen(
            [*FTSIM, *long[first], "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            while _lock_holder(out) != process.pid:  # the lock made and its pid written
                assert process.poll() is None
            process.send_signal(signal.SIGSTOP)
            try:
                refused = _ftsim([*{"run": RUN, "sweep": SWEEP}[second], "-o", str(out)])
            finally:
                process.send_signal(signal.SIGCONT)
        finally:
            process.wait(timeout=600)
        assert refused.returncode == 2 and f"(pid {process.pid})" in refused.stderr
        assert process.returncode == 0, process.stderr.read()
        manifest = (out / "manifest.json").read_text()
        assert f'"command": "{first}"' in manifest
        assert main(["plot", str(out)]) == 0


@pytest.mark.parametrize("moment", ["make_writable_folder", "_acquire"])
def test_a_signal_while_the_folder_is_made_and_locked_leaves_no_folder(
    tmp_path, moment, monkeypatch
):
    """SIGTERM right after the output folder is created, before or while it is locked (the
    fault fuzzer's advise left an empty folder): the folder is removed again."""
    from ftsim.experiments import interrupts, lock

    original = getattr(lock, moment)

    def signalled(folder):
        found = original(folder)
        os.kill(os.getpid(), signal.SIGTERM)
        return found

    monkeypatch.setattr(lock, moment, signalled)
    out = tmp_path / "out"
    with pytest.raises(interrupts.Interrupted), interrupts.handled(), locked_folder(out):
        pytest.fail("the signal came before the folder was held")
    assert not out.exists()


def test_a_signal_as_the_staging_folder_is_made_leaves_none(tmp_path, monkeypatch):
    """SIGTERM right after the staging folder is created, before its block starts (the fault
    fuzzer's run, one time in six, left ``.ftsim-staging-*`` beside "nothing was written"):
    the signal is raised, the staging folder is removed."""
    from ftsim.experiments import interrupts

    original = output.tempfile.mkdtemp

    def signalled(*args, **kwargs):
        made = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return made

    monkeypatch.setattr(output.tempfile, "mkdtemp", signalled)
    staged = output.StagedFolder(tmp_path)
    with pytest.raises(interrupts.Interrupted), interrupts.handled(), staged:
        pytest.fail("the signal came before the staging folder was held")
    assert os.listdir(tmp_path) == []


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path, capsys):
    out = tmp_path / "r"
    out.mkdir()
    (out / LOCK).write_text("999999999\n")  # its holder died: the kernel dropped its flock
    assert main([*RUN, "-o", str(out)]) == 0
    assert not (out / LOCK).exists()


# -- a run folder of another configuration --------------------------------------------------

OTHER = {
    "seed": ["--seed", "8"],
    "replications": ["--reps", "3"],
    "policies": ["--policy", "full"],
    "a field": ["--set", "cluster.trainers=8"],
    "trainer": ["--set", "trainer.steps=5"],  # and without RUN's --no-trainer
    "another scenario": ["--set", "name=other"],
}


@pytest.mark.parametrize("change", sorted(OTHER))
def test_a_run_folder_of_another_configuration_is_replaced_only_with_force(
    tmp_path, change, capsys
):
    out = tmp_path / "r"
    assert main([*RUN, "-o", str(out)]) == 0
    before = digest(out)
    base = [a for a in RUN if a != "--no-trainer"] if change == "trainer" else RUN
    other = [*base, *OTHER[change], "-o", str(out)]
    capsys.readouterr()
    assert main(other) == 2
    one_located_line(capsys.readouterr().err, f"ftsim: {out} holds the results of another run")
    assert digest(out) == before
    assert main([*other, "--force"]) == 0
    assert digest(out) != before
    assert main([*RUN, "-o", str(out)]) == 2  # and back: refused again


def test_the_same_run_again_replaces_its_folder(tmp_path, capsys):
    out = tmp_path / "r"
    assert main([*RUN, "-o", str(out)]) == 0
    before = {k: v for k, v in digest(out).items() if k != "manifest.json"}
    assert main([*RUN, "-o", str(out)]) == 0
    assert {k: v for k, v in digest(out).items() if k != "manifest.json"} == before


# -- locales ----------------------------------------------------------------------------------

ASCII_ENV = {"LC_ALL": "C", "PYTHONUTF8": "0"}
UTF8_ENV = {"LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"}


def _env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONIO"))}
    return {**env, **extra, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A run folder (with a trace to draw from) for the commands that read one."""
    root = tmp_path_factory.mktemp("locale")
    done = _ftsim([*RUN, "-o", str(root / "run")])
    assert done.returncode == 0, done.stderr
    return root


def _run_args(f, tag):
    return ["run", str(SMOKE), "--no-trainer", "--reps", "2", "-o", str(f / f"{tag}_run")]


COMMANDS = {
    "run": _run_args,
    "sweep": lambda f, tag: [*SWEEP[:-1], "--grid", "run.seed=1,2", "-o", str(f / tag)],
    "plot": lambda f, tag: ["plot", str(f / "run")],
    "trace": lambda f, tag: ["trace", str(f / "run"), "-o", str(f / f"{tag}.json")],
    "show config": lambda f, tag: ["show", "config", str(SMOKE)],
    "show policies": lambda f, tag: ["show", "policies"],
    "show reference": lambda f, tag: ["show", "reference"],
    "run unfinished": lambda f, tag: [
        *_run_args(f, tag),
        "--set",
        "run.max_wall_factor=1.01",
    ],
}


def _timeless(text: str) -> str:
    """``text`` without its clock times (progress lines say how long the work took)."""
    return re.sub(r"\d+:\d\d:\d\d", "H:MM:SS", text)


def _ascii(text: str) -> str:
    return "".join(c if c.isascii() else console.look_alike(c) for c in text)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_ascii_locale_gets_the_same_output_in_ascii(folders, command):
    outputs = {}
    for tag, env in (("ascii", ASCII_ENV), ("utf8", UTF8_ENV)):
        done = _ftsim(COMMANDS[command](folders, tag), env=_env(env))
        assert "Traceback" not in done.stderr, done.stderr
        outputs[tag] = done
    ascii_, utf8 = outputs["ascii"], outputs["utf8"]
    assert ascii_.returncode == utf8.returncode
    assert ascii_.stdout.isascii() and ascii_.stderr.isascii()
    assert ascii_.stdout.replace("ascii", "utf8") == _ascii(utf8.stdout), command
    assert _timeless(ascii_.stderr.replace("ascii", "utf8")) == _timeless(_ascii(utf8.stderr)), (
        command
    )


def test_validate_in_an_ascii_locale(tmp_path, quick_suite, monkeypatch):
    """In process (the suite is reduced to two checks): stdout as an ASCII terminal."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="strict")
    monkeypatch.setattr(sys, "stdout", stream)
    assert main(["validate", "--quick", "-o", str(tmp_path / "v.md")]) == 0
    stream.flush()
    text = raw.getvalue().decode("ascii")
    assert "1.0 +/- 0.1 (n >= 3) x 2 ..." in text
    assert stream.errors == "strict"  # given back as it was
    assert "1.0 ± 0.1 (n ≥ 3) × 2 …" in (tmp_path / "v.md").read_text(encoding="utf-8")


def test_fallbacks_are_ascii_and_leave_encodable_text_alone():
    assert all(v.isascii() for v in console.FALLBACKS.values())
    special = "".join(console.FALLBACKS)
    text = special + " a\udcffb é１١①∮"  # a byte of a file name (surrogateescape), others
    encoded = text.encode("ascii", errors=console.ERRORS)
    assert encoded == _ascii(special).encode() + b" a\xffb e111?"
    assert text.encode("utf-8", errors=console.ERRORS) == special.encode() + b" a\xffb " + (
        "é１١①∮".encode()
    )


def test_without_fallbacks_an_ascii_terminal_crashes(monkeypatch):
    """The injected bug: the streams keep strict errors (no fallback handler)."""
    monkeypatch.setattr(console, "ERRORS", "strict")
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii", errors="strict"))
    with pytest.raises(UnicodeEncodeError):
        main(["show", "policies"])


def test_every_non_ascii_character_of_the_sources_has_a_fallback():
    package = Path(console.__file__).parent
    used = {c for path in package.rglob("*.py") for c in path.read_text() if not c.isascii()}
    assert {c for c in used if console.look_alike(c) == "?"} == set()


# -- a pool worker between its fork and its set-up -------------------------------------------


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, None)])
def test_a_forked_worker_not_yet_set_up_acts_as_a_worker_on_a_signal(signum, status):
    """A process forked inside ``handled()`` (a pool worker before its initializer runs, when
    ``terminate()`` may already reach it) inherits the parent's handlers: they must end it
    quietly on SIGTERM and ignore SIGINT, never raise the parent's ``Interrupted`` (which
    printed a worker's traceback under a Ctrl-C'd run). The parent's own handling is
    unchanged."""
    from ftsim.experiments import interrupts

    read, write = os.pipe()
    with interrupts.handled():
        pid = os.fork()
        if pid == 0:  # the child: pure Python, so the inherited handler runs
            os.close(read)
            os.write(write, b"ready")
            try:
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline:
                    time.sleep(0.01)
                os._exit(0)
            except BaseException:
                os._exit(99)  # the parent's Interrupted raised in the worker
        os.close(write)
        assert os.read(read, 5) == b"ready"
        os.kill(pid, signum)
        _, wait_status = os.waitpid(pid, 0)
        os.close(read)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    code = os.waitstatus_to_exitcode(wait_status)
    assert code == (status if status is not None else 0)


def test_a_file_too_large_is_named_as_the_file_it_was_to_become(tmp_path):
    """With files capped at 20 kB (ulimit -f), runs.csv cannot be written: the message named
    the folder only; it names the file, as the user will look for it."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))

    out = tmp_path / "r"
    done = subprocess.run(
        [sys.executable, "-m", "ftsim", "run", str(SCENARIOS / "prod50h.yaml"), "--no-trainer"]
        + ["-q", "-o", str(out)],
        capture_output=True, text=True, preexec_fn=cap, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == f"ftsim: file too large writing {out / 'runs.csv'}\n"
    assert not out.exists()


def test_plotting_a_folder_still_being_written_names_its_writer(tmp_path):
    """plot on the folder of a run still computing said 'no runs.csv (not a run or sweep
    folder)'; it says that another process writes there, and which."""
    out = tmp_path / "running"
    with locked_folder(out):
        done = _ftsim(["plot", str(out)])
    assert done.returncode == 2, done.stderr
    line = one_located_line(done.stderr, f"ftsim: {out}: another ftsim process (pid ")
    assert line.endswith("is writing its results there: plot it once that ends")
    assert _ftsim(["plot", str(out)]).stderr.endswith(": no such folder\n")  # left empty


def test_a_signal_as_a_temporary_file_is_made_leaves_none(tmp_path):
    """SIGTERM a moment after ``manifest.json`` appeared left an empty ``.scenario.yaml.
    XXXX.tmp`` in 5 of 60 sweeps: raised inside ``mkstemp``, before its caller had the
    name to clean up. The signal now waits until the name is known, and the file is
    removed as the signal stops the write."""
    from ftsim.experiments import interrupts

    made = []
    real = output.tempfile.mkstemp

    def signalled(*args, **kwargs):
        made.append(real(*args, **kwargs))
        os.kill(os.getpid(), signal.SIGTERM)  # arrives before mkstemp's caller goes on
        return made[-1]

    target = tmp_path / "scenario.yaml"
    with (
        interrupts.handled(),
        pytest.raises(interrupts.Interrupted),
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(output.tempfile, "mkstemp", signalled)
        output.atomic_write_text(target, "name: x\n")
    assert made and not list(tmp_path.iterdir())  # no temporary file, no half-written one


def test_a_command_holding_a_folder_removes_temporary_files_left_by_a_killed_one(tmp_path):
    """A sweep killed while merging left a 679 KB ``.runs.csv.XXXX.tmp`` that ``--resume``
    kept, a trace its ``.trace_rep3.json.XXXX.tmp``: the next command holding the folder
    removes them (only names of atomic writes: a user's ``.notes.tmp`` stays)."""
    folder = tmp_path / "run"
    (folder / "plots").mkdir(parents=True)
    left = [folder / ".runs.csv.k2j4_x9q.tmp", folder / "plots" / ".breakdown.png.abcdefgh.tmp"]
    left += [folder / ".trace_rep3.json.z0z0z0z0.tmp"]
    for path in left:
        path.write_bytes(b"half")
    (folder / ".notes.tmp").write_text("mine")
    with locked_folder(folder):
        pass
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == [".notes.tmp"]


@pytest.mark.parametrize("closed", [1, 2])
def test_a_command_with_standard_output_or_error_closed_does_its_work(tmp_path, closed):
    """``ftsim run … >&-`` wrote its results, then failed on its last flush (exit 1, a
    traceback); ``2>&-`` failed before it began (the progress line asked the closed stream
    whether it is a terminal). Both now run, writing what they print nowhere."""
    out = tmp_path / "r"
    done = subprocess.run(
        [sys.executable, "-m", "ftsim", *RUN, "-o", str(out)],
        preexec_fn=lambda: os.close(closed),
        capture_output=False,
        stdout=None if closed == 1 else subprocess.DEVNULL,
        stderr=None if closed == 2 else subprocess.PIPE,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (out / "manifest.json").is_file()


def test_a_move_that_fails_while_committing_names_its_file(tmp_path, capsys, monkeypatch):
    """runs.csv immutable (chattr +i) when a run's results were moved into place: the error
    named the folder, not the file, and said nothing of the half-moved set, which the next
    command then called "stopped"."""
    out = tmp_path / "r"
    assert main([*RUN, "-o", str(out)]) == 0
    real = os.replace

    def refused(src, dst, *args, **kwargs):
        if Path(dst).name == "runs.csv" and output.COMMIT in str(src):
            raise PermissionError(1, "Operation not permitted")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(output.os, "replace", refused)
    capsys.readouterr()
    assert main([*RUN, "--seed", "9", "-o", str(out), "--force"]) == 2
    said = f"ftsim: operation not permitted writing {out / 'runs.csv'}; the next ftsim "
    assert capsys.readouterr().err == said + "command on the folder moves the rest into place\n"
    monkeypatch.setattr(output.os, "replace", real)
    with pytest.warns(output.CompletedCommit, match="stopped, or failed, while moving"):
        assert ftsim.load(out).manifest["seed"] == 9


def test_small_messages_of_the_robustness_audit(tmp_path, capsys):
    """Each said what is the case: a resume of a folder whose manifest is not JSON said "no
    sweep manifest"; trace of a folder being written said "no scenario.yaml (not a run
    folder)"; ``-o ''`` wrote into the current folder."""
    out = tmp_path / "s"
    assert main([*SWEEP, "--grid", "policies.*.interval=10 min,20 min", "-o", str(out)]) == 0
    (out / "manifest.json").write_text('{"command": "sweep", ')
    grid = ["--grid", "policies.*.interval=10 min,20 min"]
    capsys.readouterr()
    assert main([*SWEEP, *grid, "--resume", str(out)]) == 2
    assert f"{out / 'manifest.json'} is not valid JSON (" in capsys.readouterr().err
    being_written = tmp_path / "r"
    with locked_folder(being_written):
        assert main(["trace", str(being_written), "-o", str(tmp_path / "t.json")]) == 2
    assert f"{being_written}: another ftsim process (pid {os.getpid()}) is writing" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as stop:
        main(["plot", str(out), "-o", ""])
    assert stop.value.code == 2 and "an empty path" in capsys.readouterr().err


def test_a_second_ctrl_c_while_the_first_is_reported_keeps_the_report(
    tmp_path, capsys, monkeypatch
):
    """Three or four SIGINTs within 0.2 s: in 10 of 40 sweeps only "ftsim: interrupted"
    was said, not what was kept nor how to continue. A second signal while the first stop
    is reported is now counted, not raised."""
    from ftsim.experiments import study, sweep

    real, compute = study._interrupted, sweep.compute

    def again(*args):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while the first is handled
        return real(*args)

    def stopped(plan, store, *args, **kwargs):
        compute(plan, store, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # the first, once the tasks are stored

    monkeypatch.setattr(study, "_interrupted", again)
    monkeypatch.setattr(sweep, "compute", stopped)
    out = tmp_path / "s"
    grid = ["--grid", "policies.*.interval=10 min,20 min"]
    assert main([*SWEEP, *grid, "-o", str(out)]) == 130
    err = capsys.readouterr().err
    assert "are saved in" in err and "ftsim: continue with: " in err


def test_figures_are_not_written_among_a_sweeps_shards(tmp_path, capsys):
    """``plot SWEEP -o SWEEP`` is refused (results there), ``-o SWEEP/shards`` was not:
    figures among the tasks a --resume verifies."""
    out = tmp_path / "s"
    assert main([*SWEEP, "--grid", "policies.*.interval=10 min,20 min", "-o", str(out)]) == 0
    (out / "shards").mkdir(exist_ok=True)
    capsys.readouterr()
    assert main(["plot", str(out), "-o", str(out / "shards"), "-q"]) == 2
    assert "holds a sweep's shards" in capsys.readouterr().err
