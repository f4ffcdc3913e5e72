"""Local process pools: workers forked at once with the parent's objects frozen out of the
collector, and never left behind, whether the study ends, fails in a worker, or cannot use
its folder."""

import gc
import multiprocessing
import os
import signal
import time
from multiprocessing.util import Finalize
from pathlib import Path

import pytest

from ftsim.experiments import study, sweep
from ftsim.experiments.folders import FolderError
from ftsim.experiments.pool import _init_worker, process_pool
from tests.conftest import SCENARIOS

SMOKE = SCENARIOS / "smoke.yaml"


def _plan():
    """A timing sweep of 2 points x 3 policies x 2 replications: 6 tasks of batch 2."""
    return study.plan(SMOKE, ["run.replications=2"], ["policies.*.interval=10 min,30 min"])


def _frozen_objects() -> int:
    return gc.get_freeze_count()


def test_workers_start_with_the_parents_objects_frozen_and_the_parent_is_unfrozen_after():
    assert gc.get_freeze_count() == 0
    with process_pool(2) as pool:
        assert len(pool.workers) == 2 and all(w.is_alive() for w in pool.workers)
        frozen = [pool.submit(_frozen_objects).result() for _ in range(4)]
        assert gc.get_freeze_count() == 0  # the parent collects its objects as before
    assert min(frozen) > 1000  # every object the parent had when it forked
    assert not multiprocessing.active_children()


def test_a_callers_own_frozen_objects_stay_frozen():
    gc.freeze()  # as a program that manages its own frozen objects may have done
    try:
        frozen = gc.get_freeze_count()
        with process_pool(2) as pool:
            pool.submit(abs, 1).result()
        assert gc.get_freeze_count() > 0.9 * frozen  # some may have been freed since
    finally:
        gc.unfreeze()


def _linger_at_exit() -> None:
    """Make this worker take 0.5 s to exit once it is let go."""
    Finalize(None, time.sleep, args=(0.5,), exitpriority=0)


def test_workers_let_go_early_are_waited_for_when_the_pool_block_ends():
    with process_pool(2) as pool:
        pool.submit(_linger_at_exit).result()
        pool.shutdown(wait=False)  # as a study does after its last task
    assert not [worker for worker in pool.workers if worker.is_alive()]


def test_a_study_leaves_no_worker_behind(tmp_path):
    outcome = study.execute(_plan(), tmp_path / "s", jobs=2, batch=2, say=None)
    assert outcome.computed == 12
    assert not multiprocessing.active_children()  # joined, though let go before the merge


def test_workers_compute_the_first_tasks_while_the_folder_is_prepared(tmp_path, monkeypatch):
    started = tmp_path / "a task started"
    simulate, manifest = sweep.simulate_policies, sweep.manifest

    def simulate_policies(*args, **kwargs):
        started.touch()
        return simulate(*args, **kwargs)

    def manifest_once_a_task_started(*args, **kwargs):
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline, "no task started before the folder's manifest"
            time.sleep(0.01)
        return manifest(*args, **kwargs)

    monkeypatch.setattr(sweep, "simulate_policies", simulate_policies)
    monkeypatch.setattr(sweep, "manifest", manifest_once_a_task_started)
    outcome = study.execute(_plan(), tmp_path / "s", jobs=2, batch=2, say=None)
    assert outcome.computed == 12


def test_a_failing_task_in_a_worker_stops_the_study_and_its_workers(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("injected failure in a worker")

    monkeypatch.setattr(sweep, "simulate_policies", broken)  # the forked workers inherit it
    with pytest.raises(RuntimeError, match="injected failure in a worker"):
        study.execute(_plan(), tmp_path / "s", jobs=2, batch=2, say=None)
    assert not multiprocessing.active_children()
    assert not list((tmp_path / "s" / "shards").iterdir())


def test_a_folder_that_cannot_be_used_stops_the_workers_started_for_it(tmp_path):
    """The workers start, and compute the first tasks, before the folder is prepared: a
    folder refused then (another study's files, without --force) ends them."""
    out = tmp_path / "s"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FolderError):
        study.execute(_plan(), out, jobs=2, batch=2, say=None)
    assert not multiprocessing.active_children()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def _collector_in_a_worker() -> tuple[int, int, int]:
    """(times the frozen objects were counted, frozen before, frozen after) of one loop of
    replications' collector set-up in this process."""
    from ftsim.experiments.runner import replication_gc

    counted = []
    count = gc.get_freeze_count
    gc.get_freeze_count = lambda: counted.append(1) or count()
    try:
        before = count()
        with replication_gc():
            pass
        return len(counted), before, count()
    finally:
        gc.get_freeze_count = count


def test_a_worker_keeps_its_frozen_objects_without_counting_them_for_each_task():
    # counting walks every frozen object (~5 ms for a worker's): it made every task slower
    with process_pool(2) as pool:
        counted, before, after = pool.submit(_collector_in_a_worker).result()
    assert counted == 0
    assert before > 1000 and after > 0.9 * before  # left frozen, as the parent made them


def _blas_threads() -> int:
    """The thread count BLAS uses in this process (the highest of its libraries')."""
    from threadpoolctl import threadpool_info

    return max(info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas")


def _native_threads() -> int:
    """Threads of this process that Python did not start (BLAS's, for one)."""
    import threading

    return len(os.listdir("/proc/self/task")) - threading.active_count()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_workers_run_blas_on_one_thread_without_starting_blas_threads_of_their_own():
    # a worker that set the limit itself would restart OpenBLAS's threads: one spins for
    # some 0.1 s (CPU taken from the tasks); inherited from the parent, none is started
    before = _blas_threads()
    if before < 2:
        pytest.skip("BLAS runs on one thread here anyway")
    with process_pool(2) as pool:
        assert _blas_threads() == 1  # in the parent while the workers live
        workers = [pool.submit(_blas_threads).result() for _ in range(2)]
        native = [pool.submit(_native_threads).result() for _ in range(2)]
    assert workers == [1, 1]
    assert native == [0, 0]
    assert _blas_threads() == before  # restored in the parent once the workers exited


def test_the_parent_prepares_the_merge_while_the_workers_compute(tmp_path, monkeypatch):
    """pyarrow is imported and initialised (its first parse's set-up) once the tasks are
    submitted, before the first result is stored, not in the merge after the last."""
    from ftsim.experiments import output
    from ftsim.experiments.store import RunStore

    events = []
    prepare, write_shard = output.prepare_tables, RunStore.write_shard
    monkeypatch.setattr(output, "prepare_tables", lambda: events.append("prepare") or prepare())
    monkeypatch.setattr(
        RunStore, "write_shard", lambda *args: events.append("shard") or write_shard(*args)
    )
    study.execute(_plan(), tmp_path / "pool", jobs=2, batch=2, say=None)
    assert events[0] == "prepare" and events.count("prepare") == 1 and "shard" in events
    events.clear()
    study.execute(_plan(), tmp_path / "serial", jobs=1, batch=2, say=None)
    assert "prepare" not in events  # in one process, nothing to overlap with


def test_preparing_the_merge_without_pyarrow_is_left_to_the_merge(monkeypatch):
    import sys

    from ftsim.experiments.output import prepare_tables

    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if not installed
    prepare_tables()  # no error: the merge reports it


def test_a_sigterm_right_after_a_fork_is_dropped_by_a_child_with_a_python_handler():
    """Why a failed pool block kills its workers rather than terminating them: a child forked
    with the parent's Python handler for SIGTERM (the command's, see
    :mod:`ftsim.experiments.interrupts`) and signalled before it has run loses the signal
    (the interpreter clears pending signals after a fork). On one CPU, so that the parent
    signals before the child runs (a scheduler that runs the child first shows nothing:
    skipped). If a Python release stops dropping it, this skips too: the reason for SIGKILL
    may be gone then (SIGTERM would do)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import os, signal, time
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(143))
        survived = 0
        for _ in range(10):
            pid = os.fork()
            if pid == 0:
                time.sleep(0.2)  # the handler would have ended this child by now
                os._exit(0)
            os.kill(pid, signal.SIGTERM)
            survived += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        print(survived)
        """
    )
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("pins the processes to one CPU")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if int(done.stdout) == 0:  # a scheduler that runs the child first: nothing to show here
        pytest.skip("every child ran before its signal came: the drop cannot be shown here")


def _deaf_to_sigterm(parent_pid: int) -> None:
    """A worker's set-up, then SIGTERM ignored: as a worker whose SIGTERM was dropped."""
    _init_worker(parent_pid)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _stuck(started: Path) -> None:
    """A task that never ends by itself (as a worker waiting on a lock a dead one held)."""
    started.touch()
    time.sleep(600)


def _outlives(worker, wait_s: float = 2.0) -> bool:
    """Whether ``worker`` is still running ``wait_s`` after the block (its exit status, once
    one of the threads waiting for it has it: the pool's manager thread reaps workers too)."""
    deadline = time.monotonic() + wait_s
    while worker.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return worker.exitcode is None


def _failed_block_of_stuck_deaf_workers(monkeypatch, tmp_path: Path) -> list:
    """A pool block of two workers that ignore SIGTERM, failed while both are stuck in a
    task; returns the workers that are alive when the block has ended."""
    from ftsim.experiments import pool as pool_module

    monkeypatch.setattr(pool_module, "_init_worker", _deaf_to_sigterm)
    with pytest.raises(RuntimeError, match="stop"), process_pool(2) as pool:
        for i in range(2):
            pool.submit(_stuck, tmp_path / str(i))
        deadline = time.monotonic() + 30
        while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        raise RuntimeError("stop")
    alive = [worker for worker in pool.workers if _outlives(worker)]
    for worker in alive:  # a planted bug's survivors: not left to the next tests
        os.kill(worker.pid, signal.SIGKILL)  # (Process.kill is the one planted)
        worker.join()
    return alive


def test_a_failed_pool_block_stops_workers_that_a_sigterm_would_not_stop(monkeypatch, tmp_path):
    """A worker forked a moment before the parent stops (Ctrl-C as the run starts) may have
    dropped its SIGTERM (see above): it must not outlive the block. One did, waiting forever
    for the task queue's lock, which the other worker held when it died, and the command
    with it at exit (found by ``test_fault_fuzz``)."""
    assert _failed_block_of_stuck_deaf_workers(monkeypatch, tmp_path) == []


def test_the_deaf_workers_check_fails_when_the_block_terminates_its_workers(monkeypatch, tmp_path):
    """Teeth: with SIGTERM sent instead of SIGKILL (as before), both workers outlive the
    block (each waited for 5 s)."""
    process = multiprocessing.process.BaseProcess  # a forked worker's class derives from it
    monkeypatch.setattr(process, "kill", process.terminate)
    assert len(_failed_block_of_stuck_deaf_workers(monkeypatch, tmp_path)) == 2
