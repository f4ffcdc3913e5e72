"""The program's quick exit (:func:`ftsim.cli.exit_quickly`): without the interpreter's
tear-down, but with its exit status, the exit handlers, the standard streams flushed, and
the ordinary exit while a thread the interpreter would wait for is still running."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT, RUN_FILES, SCENARIOS

SMOKE = SCENARIOS / "smoke.yaml"


def _python(program: str, *args: str) -> subprocess.CompletedProcess:
    """``program`` in a fresh interpreter whose standard streams are block-buffered pipes."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_the_exit_status_and_buffered_output_are_kept():
    done = _python(
        "import sys\n"
        "from ftsim.cli import exit_quickly\n"
        "sys.stdout.write('x' * 100_000 + 'end')\n"
        "sys.stderr.write('said')\n"
        "exit_quickly(4)\n"
    )
    assert done.returncode == 4
    assert done.stdout == "x" * 100_000 + "end" and done.stderr == "said"


def test_exit_handlers_run():
    done = _python(
        "import atexit, sys\n"
        "from ftsim.cli import exit_quickly\n"
        "atexit.register(print, 'handler ran')\n"
        "exit_quickly(0)\n"
    )
    assert done.returncode == 0 and done.stdout == "handler ran\n"


def test_a_running_thread_is_waited_for():
    done = _python(
        "import threading, time\n"
        "from ftsim.cli import exit_quickly\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
        "exit_quickly(5)\n"
    )
    assert done.returncode == 5 and done.stdout == "thread done\n"


def test_a_profiler_gets_its_results(tmp_path):
    stats = tmp_path / "profile"
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(stats), "-m", "ftsim", "show", "presets"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0 and stats.stat().st_size > 0


def test_the_command_line_keeps_its_statuses_and_messages(tmp_path):
    def ftsim(*args: str) -> subprocess.CompletedProcess:
        program = "import runpy; runpy.run_module('ftsim', run_name='__main__')"
        return _python(f"import sys; sys.argv[1:] = {list(args)!r}; {program}")

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\njob: 3\n")
    done = ftsim("run", str(bad), "--no-trainer")
    assert done.returncode == 2
    assert done.stderr.startswith(f"{bad}: job: ") and "Traceback" not in done.stderr
    out = tmp_path / "run"
    done = ftsim("run", str(SMOKE), "--no-trainer", "--reps", "2", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(f"results: {out}\n")
    assert tuple(sorted(p.name for p in out.iterdir())) == RUN_FILES


def test_ctrl_c_while_the_command_starts_up_is_said():
    """Ctrl-C while ftsim's modules load ended with status 130 and nothing on standard
    error; it now says "interrupted", as a Ctrl-C later does."""
    program = (
        "import builtins, runpy\n"
        "real = builtins.__import__\n"
        "def stop(name, *args, **kwargs):\n"
        "    if name == 'ftsim.cli':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = stop\n"
        "runpy.run_module('ftsim', run_name='__main__')\n"
    )
    done = _python(program)
    assert (done.returncode, done.stderr) == (130, "ftsim: interrupted\n")
