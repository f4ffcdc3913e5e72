"""Where the wall time of the 600-run sweep goes: a timeline of each process.

Runs the sweep of ``sweep_speed.py`` (prod50h, six variants of ``full`` × 10 intervals × 10
replications, ``--no-trainer``) end to end in a subprocess, traced: the subprocess wraps a
few of ftsim's functions (planning, the pool's start, each task, each shard written, the
merge, the manifest) to log when each starts and ends, with its process's CPU time and its
main thread's, then runs ``python -m ftsim sweep`` as usual. For each process it prints the
phases (ms from the command's launch) and the CPU spent before the first task, while tasks
run and after the last; then what one processor did alone (the serial start and end) and
an estimate of the quiet-machine wall from CPU times, which a busy machine inflates less
than the wall itself:

    estimate = serial start (main-thread CPU) + max(CPU while tasks run / workers, the
               busiest worker's CPU) + serial end (wall: the merge waits for the disk too)

    python benchmarks/sweep_timeline.py [--jobs 1 2] [--rounds 3] [--compare DIR] [--quick]

``--compare DIR``: another checkout, traced alternately (its ``.venv`` if it has one). The
wrapped functions are internals: one a checkout lacks is simply not logged. Bytecode is
compiled by an untimed run first (as ``sweep_speed.py --cached-bytecode``). ``--quick``:
2 intervals × 2 replications, one round.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sweep_speed  # noqa: E402 (the sweep it traces)

ROOT = sweep_speed.ROOT
WRAPPED = [
    ("ftsim.experiments.sweep", None, ["plan_sweep", "run_task", "compute", "finish", "manifest"]),
    ("ftsim.experiments.study", None, ["_finish_folder"]),
    ("ftsim.experiments.pool", None, ["_init_worker"]),
    ("ftsim.experiments.pool", "_Pool", ["start"]),
    ("ftsim.experiments.store", "RunStore", ["write_shard"]),
]
"""The functions the traced command logs (those that exist): module, class, names."""


def child(log: str, argv: list[str]) -> None:
    """The traced command: ``ftsim`` with ``argv``, each event a line of ``log``."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def event(name: str) -> None:
        line = f"{os.getpid()} {name} {time.monotonic():.6f} "
        os.write(fd, f"{line}{time.process_time():.6f} {time.thread_time():.6f}\n".encode())

    event("main_start")
    import importlib

    import ftsim.cli as cli

    for module, cls, names in WRAPPED:
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        for name in names:
            if hasattr(owner, name):
                setattr(owner, name, _logged(getattr(owner, name), name, event))
    sys.argv = ["ftsim", *argv]
    status = cli.main()
    event("exit")
    cli.exit_quickly(status)


def _logged(function, name: str, event):
    @functools.wraps(function)
    def logged(*args, **kwargs):
        event(name + ">")
        try:
            return function(*args, **kwargs)
        finally:
            event(name + "<")

    return logged


def trace(root: Path, scenario: Path, out: Path, jobs: int, intervals: str, reps: int, env):
    """Run the traced sweep; its events per process (parent first) and its wall time."""
    log = out.with_suffix(".log")
    command = [
        sweep_speed._python(root), str(Path(__file__).resolve()), "--child", str(log),
        "sweep", str(scenario), "--grid", f"policies.*.interval={intervals}", "--reps",
        str(reps), "--jobs", str(jobs), "--no-trainer", "-q", "-o", str(out),
    ]  # fmt: skip
    launch = time.monotonic()
    subprocess.run(command, check=True, cwd=root, env=env, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - launch
    events: dict[str, list] = collections.defaultdict(list)
    for line in log.read_text().splitlines():
        pid, name, at, cpu, main = line.split()
        events[pid].append((name, 1e3 * (float(at) - launch), 1e3 * float(cpu), 1e3 * float(main)))
    return list(events.values()), wall


def phases(processes: list) -> dict:
    """The timeline's figures (ms): see the module docstring."""
    parent, workers = processes[0], processes[1:]
    runners = workers or [parent]
    starts = [at for p in runners for n, at, *_ in p if n == "run_task>"]
    ends = [at for p in runners for n, at, *_ in p if n == "run_task<"]
    first, last = min(starts), max(ends)
    exit_at = max(at for n, at, *_ in parent if n == "exit")
    before = [e for e in parent if e[1] <= first][-1]
    during = [e for e in parent if e[1] <= last][-1]
    # the main thread's CPU until the first task, and the wall before its first event
    serial_start = before[3] + parent[0][1] - parent[0][3]
    worker_cpu = [max(cpu for _, _, cpu, _ in p) for p in workers]
    parent_cpu = during[2] - before[2]
    if workers:
        parallel = max((sum(worker_cpu) + parent_cpu) / len(workers), max(worker_cpu))
    else:
        parallel = during[3] - before[3]
    serial_end = exit_at - last
    return {
        "first task": first,
        "last task": last,
        "exit": exit_at,
        "serial start": serial_start,
        "parallel": parallel,
        "serial end": serial_end,
        "parent CPU while tasks run": parent_cpu,
        "worker CPU": worker_cpu,
        "estimate": serial_start + parallel + serial_end,
    }


def show(name: str, jobs: int, processes: list, wall: float) -> None:
    """Print one traced run's timeline."""
    load = os.getloadavg()[0]
    print(f"{name} --jobs {jobs}: wall {1e3 * wall:.0f} ms, load {load:.1f}")
    for i, process in enumerate(processes):
        marks = {}
        for event, at, _, _ in process:
            if not event.startswith(("run_task", "write_shard")):
                marks.setdefault(event, at)
        tasks = [at for event, at, *_ in process if event == "run_task>"]
        shards = [at for event, at, *_ in process if event == "write_shard>"]
        label = "parent" if i == 0 else f"worker {i}"
        line = ", ".join(f"{event} {at:.0f}" for event, at in marks.items())
        print(f"  {label}: {line}")
        if tasks:
            print(f"    {len(tasks)} tasks from {tasks[0]:.0f} ms, CPU {process[-1][2]:.0f} ms")
        if shards:
            print(f"    {len(shards)} shards stored from {shards[0]:.0f} to {shards[-1]:.0f} ms")
    p = phases(processes)
    print(
        f"  one processor alone: {p['serial start']:.0f} ms before the first task (main-thread "
        f"CPU), {p['serial end']:.0f} ms after the last; parent CPU while tasks run "
        f"{p['parent CPU while tasks run']:.0f} ms; estimate {p['estimate']:.0f} ms"
    )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=1, help="rounds (medians of estimates)")
    parser.add_argument("--compare", type=Path, help="another checkout, traced alternately")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 intervals x 2 reps")
    args = parser.parse_args()
    intervals, reps = ("30 min,1 h", 2) if args.quick else (sweep_speed.INTERVALS, 10)
    rounds = 1 if args.quick else args.rounds
    trees = {"new": ROOT} | ({"old": args.compare.resolve()} if args.compare else {})
    estimates = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scenario = sweep_speed.scenario_file(tmp)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        for name, root in trees.items():
            trace(root, scenario, tmp / f"warm-{name}", 2, "1 h", 1, env)
        for round_ in range(rounds):
            for name, root in trees.items():
                for jobs in args.jobs:
                    out = tmp / f"{name}-{jobs}-{round_}"
                    processes, wall = trace(root, scenario, out, jobs, intervals, reps, env)
                    show(name, jobs, processes, wall)
                    estimates[name, jobs].append(phases(processes)["estimate"])
    print(f"estimates, medians of {rounds} round(s):")
    for name in trees:
        figures = {jobs: statistics.median(estimates[name, jobs]) for jobs in args.jobs}
        cells = [f"--jobs {jobs} {ms:.0f} ms" for jobs, ms in figures.items()]
        if len(args.jobs) > 1:
            first = figures[args.jobs[0]]
            cells += [f"{first / figures[jobs]:.2f}x at --jobs {jobs}" for jobs in args.jobs[1:]]
        print(f"{name}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
