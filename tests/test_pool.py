"""Local process pools: workers forked at once with the parent's objects frozen out of the
collector, and never left behind, whether the study ends, fails in a worker, or cannot use
its folder."""

import gc
import multiprocessing
import time
from multiprocessing.util import Finalize
from pathlib import Path

import pytest

from ftsim.experiments import study, sweep
from ftsim.experiments.folders import FolderError
from ftsim.experiments.pool import process_pool
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
    simulate, manifest = sweep.simulate_reps, sweep.manifest

    def simulate_reps(*args, **kwargs):
        started.touch()
        return simulate(*args, **kwargs)

    def manifest_once_a_task_started(*args, **kwargs):
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline, "no task started before the folder's manifest"
            time.sleep(0.01)
        return manifest(*args, **kwargs)

    monkeypatch.setattr(sweep, "simulate_reps", simulate_reps)
    monkeypatch.setattr(sweep, "manifest", manifest_once_a_task_started)
    outcome = study.execute(_plan(), tmp_path / "s", jobs=2, batch=2, say=None)
    assert outcome.computed == 12


def test_a_failing_task_in_a_worker_stops_the_study_and_its_workers(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("injected failure in a worker")

    monkeypatch.setattr(sweep, "simulate_reps", broken)  # the forked workers inherit it
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
    import os
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
