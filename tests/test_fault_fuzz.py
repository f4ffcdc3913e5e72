"""Fault fuzzing: SIGINT, SIGTERM or SIGHUP at a random moment of a real ``python -m ftsim
run``, ``sweep``, ``advise`` or ``plot`` (hypothesis chooses the signal, the event it waits
for, the delay after it, and whether the whole process group gets it, as from a terminal or a
scheduler).

Whatever the moment: no traceback; the exit status is 0 (finished first) or 128 + the
signal, with a line saying what was kept once a folder exists (or death by the signal while
Python starts or exits, where ftsim's handlers are not installed); the folder is either absent
or complete (a run, advice, figures) or resumable (a sweep), with none of ftsim's hidden lock
or staging entries left; and the same command (``--resume`` for a kept sweep) then ends with
results byte-identical to an uninterrupted run, which ``plot`` accepts.

CI runs a few examples per command; set ``FTSIM_FAULT_EXAMPLES`` for more locally.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftsim.cli import main
from ftsim.experiments.folders import check_results
from tests.conftest import SCENARIOS, terminal_signals

EXAMPLES = int(os.environ.get("FTSIM_FAULT_EXAMPLES", "3"))
SMOKE = SCENARIOS / "smoke.yaml"
COMMANDS = {
    "run": ["run", str(SMOKE), "--no-trainer", "--reps", "60", "-q"],
    "sweep": ["sweep", str(SMOKE), "--no-trainer", "--reps", "12", "--batch", "2", "--jobs", "2"],
    "advise": ["advise", str(SMOKE), "--reps", "4", "--jobs", "2", "-q"],
    "plot": ["plot", "RUN", "--format", "png", "-q"],  # RUN: the reference run
}
COMPARED = {
    "run": ("runs.csv", "runs.parquet", "timeline.csv", "summary.csv", "scenario.yaml"),
    "sweep": ("runs.csv", "runs.parquet", "timeline.csv", "summary.csv", "scenario.yaml"),
    "advise": ("candidates.csv", "frontier.png"),
    "plot": ("breakdown.csv", "breakdown.png", "timeline.csv", "timeline.png"),
}
"""The files of each command's folder compared with its uninterrupted run's."""
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TRIGGERS = ("started", "folder", "shard", "staging", "results")
"""What the signal waits for: the process started, its folder, the first sweep shard, a run's
staging folder (results being written), the merged runs.csv (being finished)."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted results of each command."""
    root = tmp_path_factory.mktemp("reference")
    for name in COMMANDS:
        assert main([*_args(name, root), "-q", "-o", str(root / name)]) in (0, 1, 3)
    return root


def _args(command: str, reference: Path) -> list[str]:
    """The command's arguments (``plot`` draws the reference run)."""
    return [str(reference / "run") if a == "RUN" else a for a in COMMANDS[command]]


def _seen(out: Path, trigger: str) -> bool:
    if trigger == "started":
        return True
    if not out.is_dir():
        return False
    names = os.listdir(out)
    if trigger == "shard":
        shards = out / "shards"
        return shards.is_dir() and any(n.endswith(".csv") for n in os.listdir(shards))
    if trigger == "staging":
        return any(n.startswith(".ftsim-staging-") for n in names)
    if trigger == "results":
        return "runs.csv" in names or any(n.startswith(".runs.csv.") for n in names)
    return True  # the folder


def _interrupt(args, out, signum, trigger, delay, group) -> subprocess.CompletedProcess:
    process = subprocess.Popen(
        [sys.executable, "-m", "ftsim", *args, "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=terminal_signals,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not _seen(out, trigger) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(delay)
    if process.poll() is None:
        (os.killpg if group else os.kill)(process.pid, signum)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


STARTING = ("Python runtime state: core initialized", "Python runtime state: initialized")
"""The runtime states of CPython's fatal errors while it initialises (its core; then its
``site`` module)."""


def _while_python_starts(done: subprocess.CompletedProcess) -> bool:
    """Whether the interpreter stopped with its own fatal error while it initialised (a
    SIGINT during its start-up, before any of ftsim runs: CPython prints a traceback of its
    frozen imports, or of ``site``'s, and exits with status 1)."""
    first = done.stderr.split("\n", 2)[:2]
    return (
        done.returncode == 1
        and first[0].startswith("Fatal Python error: init_")
        and len(first) == 2
        and first[1] in STARTING
    )


def _check_and_resume(command, out, done, signum, reference, tmp_path):
    if _while_python_starts(done):
        assert signum == signal.SIGINT and not out.exists(), done.stderr
    else:
        assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1, 3, 128 + signum, -signum), (done.returncode, done.stderr)
    if done.returncode == 128 + signum and out.exists() and command in ("run", "sweep"):
        assert "interrupted" in done.stderr, done.stderr  # (quiet while starting up)
    if out.exists():
        assert not [n for n in os.listdir(out) if n.startswith(".ftsim")], os.listdir(out)
    args = [*_args(command, reference), "-q"]
    again = ["-o", str(out)]
    if command == "run" and out.exists():  # a run folder is complete or absent
        check_results(out)
    elif command == "sweep":
        kept = (out / "manifest.json").exists()
        again = ["--resume", str(out)] if kept else again
        if out.exists() and not kept:
            assert os.listdir(out) == [], os.listdir(out)
    elif out.exists():  # advice or figures: all of them, or none
        assert sorted(os.listdir(out)) == sorted(os.listdir(reference / command)), out
    resumed = subprocess.run(
        [sys.executable, "-m", "ftsim", *args, *again], capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode in (0, 1, 3), resumed.stderr
    for name in COMPARED[command]:
        assert (out / name).read_bytes() == (reference / command / name).read_bytes(), name
    if command in ("run", "sweep"):
        check_results(out)


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(
    command=st.sampled_from(sorted(COMMANDS)),
    signum=st.sampled_from(SIGNALS),
    trigger=st.sampled_from(TRIGGERS),
    delay=st.floats(0, 1.0),
    group=st.booleans(),
)
def test_a_signal_at_any_moment_then_the_same_command_gives_the_same_results(
    reference, tmp_path_factory, command, signum, trigger, delay, group
):
    if command != "sweep" and trigger == "shard":
        trigger = "folder"  # only a sweep has shards
    tmp_path = tmp_path_factory.mktemp("fuzz")
    out = tmp_path / "out"
    done = _interrupt(_args(command, reference), out, signum, trigger, delay, group)
    print(
        f"{command} {signal.Signals(signum).name} {trigger}+{delay:.3f}s group={group}: "
        f"exit {done.returncode}, kept {sorted(os.listdir(out)) if out.exists() else None}"
    )
    _check_and_resume(command, out, done, signum, reference, tmp_path)


WRITING = [
    *((command, signum) for command in ("run", "sweep") for signum in SIGNALS),
    ("advise", signal.SIGTERM),
    ("plot", signal.SIGTERM),
]


@pytest.mark.parametrize(("command", "signum"), WRITING)
def test_a_signal_while_results_are_written(reference, tmp_path, command, signum):
    """The moment the issue found: the results being written (a staging folder, a sweep's
    merged runs.csv)."""
    out = tmp_path / "out"
    trigger = "results" if command == "sweep" else "staging"
    done = _interrupt(_args(command, reference), out, signum, trigger, 0.0, False)
    _check_and_resume(command, out, done, signum, reference, tmp_path)


def test_an_ignored_hangup_stays_ignored(tmp_path):
    """``nohup ftsim run ...``: SIGHUP is ignored when ftsim starts, and stays so."""
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "ftsim", *COMMANDS["run"], "--reps", "10", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    while not out.exists() and process.poll() is None:
        time.sleep(0.01)
    process.send_signal(signal.SIGHUP)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    check_results(out)


def test_only_the_interpreters_own_start_up_error_is_excused():
    """The one traceback the checks excuse: CPython's fatal error when a SIGINT lands while
    it initialises (seen: a run and an advice signalled as they started, in the streams'
    set-up and in ``site``'s imports); not one of ftsim's, nor at exit."""
    startup = (
        "Fatal Python error: init_sys_streams: can't initialize sys standard streams\n"
        "Python runtime state: core initialized\n"
        "Traceback (most recent call last):\n"
        '  File "<frozen abc>", line 28, in <module>\nKeyboardInterrupt\n'
    )
    ftsims = "Traceback (most recent call last):\n  File ftsim/cli.py ...\nKeyboardInterrupt\n"
    at_exit = startup.replace("core initialized", "finalizing (tstate=0x1)")
    site = startup.replace(
        "init_sys_streams: can't initialize sys standard streams",
        "init_import_site: Failed to import the site module",
    ).replace("core initialized", "initialized")
    assert _while_python_starts(subprocess.CompletedProcess([], 1, "", startup))
    assert _while_python_starts(subprocess.CompletedProcess([], 1, "", site))
    assert not _while_python_starts(subprocess.CompletedProcess([], 1, "", ftsims))
    assert not _while_python_starts(subprocess.CompletedProcess([], 1, "", at_exit))
    assert not _while_python_starts(subprocess.CompletedProcess([], 130, "", startup))
