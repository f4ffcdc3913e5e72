"""Local process pools whose workers never outlive the command that started them.

Used by ``sweep`` (tasks of points × policies × replications) and by ``run --jobs`` (trained
replications). Workers ignore Ctrl-C and SIGHUP (a terminal sends them to the whole process
group; the parent handles them, see :mod:`ftsim.experiments.interrupts`) and die of SIGTERM
(not the parent's handler, which a forked worker would inherit), exit on their own if the
parent is killed (:func:`_watch_parent`), and run BLAS on one thread (as
:func:`ftsim.cosim.replay.cosimulate` does for the trainer), so that they share the cores
instead of oversubscribing them.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

from ftsim.experiments import interrupts

WATCHDOG_PERIOD_S = 0.5
"""How often a pool worker checks that the process that started it is still alive."""


def default_jobs() -> int:
    """CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@contextmanager
def process_pool(jobs: int):
    """A local pool of ``jobs`` worker processes.

    If the parent stops early for any reason (an error, Ctrl-C), tasks in flight are
    abandoned and the workers terminated at once instead of being waited for.
    """
    pool = _Pool(max_workers=jobs, initializer=_init_worker, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        workers = list((pool._processes or {}).values())  # no public API before Python 3.14
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join(timeout=5)
        raise
    pool.shutdown()


class _Pool(ProcessPoolExecutor):
    """A pool whose ``submit`` (which forks the workers) is never cut by a signal: the
    parent's handler raising inside the interpreter's fork hooks (logging's lock release)
    printed "Exception ignored ... Traceback" instead of interrupting the command. A
    signal received meanwhile is raised as the submit returns."""

    def submit(self, *args, **kwargs):
        with interrupts.deferred():
            return super().submit(*args, **kwargs)


def _init_worker(parent_pid: int) -> None:
    """Pool worker set-up: ignore SIGINT and SIGHUP, die of SIGTERM, exit when the parent
    process is gone, one BLAS thread for the worker's lifetime. The signals come first:
    until then the worker has the parent's handlers, which act as a worker's
    (:func:`ftsim.experiments.interrupts._handler`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from threadpoolctl import threadpool_limits

    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    threadpool_limits(limits=1, user_api="blas")


def _watch_parent(parent_pid: int) -> None:
    """Exit this process as soon as its parent is no longer ``parent_pid``: a parent killed
    with SIGKILL cannot stop its workers, and they would otherwise wait forever."""
    while os.getppid() == parent_pid:
        time.sleep(WATCHDOG_PERIOD_S)
    os._exit(1)
