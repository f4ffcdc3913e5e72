"""A worker process that dies (the out-of-memory killer's SIGKILL, a crash) is one located
line saying how it ended and what was kept, exit status 2: a sweep keeps its finished tasks
and is continued to the rows of an uninterrupted one; a run writes nothing. Before, the
pool's ``BrokenProcessPool`` reached the user as a 30-line traceback that said neither."""

import faulthandler
import json
import multiprocessing
import os
import signal
import threading
from concurrent.futures.process import _ExecutorManagerThread

import pytest

import ftsim
from ftsim import cli
from ftsim.experiments import sweep
from ftsim.experiments.pool import WorkerDied, capacity, finished, process_pool, submit_all
from tests.conftest import SCENARIOS

SMOKE = str(SCENARIOS / "smoke.yaml")
GRID = ["--grid", "policies.*.interval=10 min,30 min", "--reps", "20", "--batch", "2"]
REPS_TO_DIE_ON = 10
"""The task of these replications (any point, any policy) kills its worker."""


@pytest.fixture
def dying_worker(monkeypatch):
    """Workers forked from now on kill themselves, as the out-of-memory killer would, when
    given the replications from :data:`REPS_TO_DIE_ON` on (a task of every point and
    policy: whatever the order, the study cannot finish)."""
    simulate = sweep.simulate_policies

    def simulate_policies(policies, reps, *args):
        reps = list(reps)
        if reps[0] >= REPS_TO_DIE_ON and multiprocessing.parent_process() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return simulate(policies, reps, *args)

    monkeypatch.setattr(sweep, "simulate_policies", simulate_policies)
    return monkeypatch


OOM = (
    "ftsim: a worker process was killed by SIGKILL (as the kernel's out-of-memory killer "
    "does: fewer workers need less memory)"
)


def test_a_sweep_whose_worker_is_killed_says_so_in_a_line_and_resumes_to_the_whole_rows(
    dying_worker, tmp_path, capsys
):
    out = tmp_path / "killed"
    status = cli.main(["sweep", SMOKE, *GRID, "--jobs", "2", "-q", "-o", str(out)])
    err = capsys.readouterr().err
    assert status == cli.EXIT_USAGE
    assert err == f"{OOM}; the finished tasks are kept: continue with --resume {out}\n"
    assert not multiprocessing.active_children()
    # the tasks stored before the death (as many as the pool returned: timing) are kept
    [session] = json.loads((out / "manifest.json").read_text())["sessions"]
    assert session["ended"] == "a worker died" and session["reused_reps"] == 0

    dying_worker.undo()
    assert cli.main(["sweep", SMOKE, *GRID, "--jobs", "2", "-q", "--resume", str(out)]) == 0
    whole = tmp_path / "whole"
    assert cli.main(["sweep", SMOKE, *GRID, "--jobs", "1", "-q", "-o", str(whole)]) == 0
    assert (out / "runs.csv").read_bytes() == (whole / "runs.csv").read_bytes()


def test_a_run_whose_worker_is_killed_writes_nothing(dying_worker, tmp_path, capsys):
    out = tmp_path / "run"
    status = cli.main(["run", SMOKE, "--reps", "20", "--no-trainer", "--jobs", "2", "-o", str(out)])
    assert status == cli.EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[-1] == f"{OOM}; nothing was written to {out}"
    assert not out.exists()
    assert not multiprocessing.active_children()


def test_from_python_the_note_names_the_argument_to_resume_with(dying_worker, tmp_path):
    out = tmp_path / "killed"
    grid = {"policies.*.interval": ["10 min", "30 min"]}
    with pytest.raises(WorkerDied, match=f"continue with resume='{out}'$") as raised:
        ftsim.sweep(SMOKE, grid, reps=20, batch=2, jobs=2, trainer=False, out=out)
    assert raised.value.cause.startswith("was killed by SIGKILL")


def _exit_with_3() -> None:
    os._exit(3)


def _crash() -> None:
    faulthandler.disable()  # pytest's, inherited: it would print the crash's stack
    os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.parametrize(
    ("task", "cause"),
    [(_exit_with_3, "exited with status 3"), (_crash, "was killed by SIGSEGV")],
)
def test_how_the_worker_ended_is_said(task, cause):
    with pytest.raises(WorkerDied) as raised, process_pool(2) as pool:
        assert capacity(pool) == 2 and capacity(None) is None
        list(finished(submit_all(pool, task, [()]), pool))
    assert str(raised.value) == f"a worker process {cause}"
    assert not multiprocessing.active_children()


def test_a_pool_whose_manager_thread_dies_is_an_error_not_a_wait_forever(monkeypatch):
    """The thread that sets the futures' results dying (an error of its own) left the study
    waiting for them forever; now the wait checks it every second."""

    def dies(self, result_item):
        raise RuntimeError("injected error in the manager thread")

    monkeypatch.setattr(_ExecutorManagerThread, "process_result_item", dies)
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # (Python prints it)
    pending = pytest.raises(RuntimeError, match="manager thread ended with tasks pending")
    with pending, process_pool(2) as pool:
        list(finished(submit_all(pool, abs, [(-1,), (-2,)]), pool))
    assert not multiprocessing.active_children()


def test_a_worker_out_of_memory_is_said_likewise_and_its_sweep_resumes(tmp_path, capsys):
    """Python's MemoryError in a worker (its process lives on) was a traceback."""
    simulate = sweep.simulate_policies

    def short_of_memory(policies, reps, *args):
        reps = list(reps)
        if reps[0] >= REPS_TO_DIE_ON and multiprocessing.parent_process() is not None:
            raise MemoryError
        return simulate(policies, reps, *args)

    out = tmp_path / "sweep"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep, "simulate_policies", short_of_memory)
        status = cli.main(["sweep", SMOKE, *GRID, "--jobs", "2", "-q", "-o", str(out)])
    assert status == cli.EXIT_USAGE
    assert capsys.readouterr().err == (
        "ftsim: a worker process ran out of memory (MemoryError; fewer workers need less "
        f"memory); the finished tasks are kept: continue with --resume {out}\n"
    )
    assert not multiprocessing.active_children()
    assert cli.main(["sweep", SMOKE, *GRID, "--jobs", "2", "-q", "--resume", str(out)]) == 0


def test_a_dask_cluster_whose_workers_die_is_said_likewise():
    """distributed's KilledWorker (the scheduler gave up on a task whose workers died) was a
    traceback; the task here ends its worker's process as the out-of-memory killer would."""
    distributed = pytest.importorskip("distributed")
    import dask

    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),  # give up at once
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, dashboard_address=None, silence_logs=50
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        executor = client.get_executor(pure=False)
        assert capacity(executor) == 1
        with pytest.raises(WorkerDied, match="of the Dask cluster died running a task"):
            list(finished([executor.submit(os._exit, 1)], executor))
        assert list(finished([executor.submit(abs, -1)], executor))[0][1] == 1  # it goes on
