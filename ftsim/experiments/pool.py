"""Local process pools whose workers never outlive the command that started them.

Used by ``sweep`` (tasks of points × policies × replications), by ``run --jobs`` (trained
replications) and by ``advise``. Workers ignore Ctrl-C and SIGHUP (a terminal sends them to
the whole process group; the parent handles them, see :mod:`ftsim.experiments.interrupts`)
and die of SIGTERM (not the parent's handler, which a forked worker would inherit), exit on
their own if the parent is killed (:func:`_watch_parent`), and run BLAS on one thread (as
:func:`ftsim.cosim.replay.cosimulate` does for the trainer), so that they share the cores
instead of oversubscribing them.

The workers are forked (:data:`START_METHOD`), all of them as soon as the pool is made
(:meth:`_Pool.start`), so that they are ready by the time the caller has its tasks.

BLAS runs on one thread in the workers because it does in the parent while it forks them
and as long as the pool lives (:func:`~ftsim.trainer.blas.one_blas_thread`), not by a
limit each worker sets: OpenBLAS starts its thread server again to set it (its threads
are stopped at a fork), and the new thread spins waiting for work for some 0.1 s before
it sleeps (100 ms of CPU per worker, measured with ``/proc/<pid>/task/*/schedstat``,
taken from the workers' tasks on a busy machine), while a child forked from a parent
limited to one thread starts none.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager

from ftsim.experiments import interrupts

WATCHDOG_PERIOD_S = 0.5
"""How often a pool worker checks that the process that started it is still alive."""
MANAGER_CHECK_S = 1.0
"""How often a wait for a pool's results checks that its manager thread still runs."""
WAIT_FOR_WORKERS_S = 5.0
"""How long to wait for the workers to end, at most, when the pool stops early."""

START_METHOD = "fork"
"""How workers start, chosen here rather than left to Python's default (``forkserver`` from
Python 3.14 on Linux).

``fork``: a worker is a copy of the parent made when the pool starts, once the study is
planned, so it starts with every module the parent imported (the scenario schema, the
simulator, numpy: about 0.3 s of imports) and nothing to do but its tasks: on the 600-run
sweep of ``benchmarks/sweep_speed.py`` its first task begins some 20 ms after the fork
(its set-up, :func:`_init_worker`). The parent's objects are frozen out of the cyclic
garbage collector while it forks (:func:`gc.freeze`, undone in the parent right after):
the workers' collections then never walk the parent's objects, which would copy every
memory page holding one into each worker (on that sweep with two workers: 0.15-0.2 s
less CPU in all, the first task of a worker 1,300 page faults instead of 3,900).

Forking a process that runs other threads is unsafe in general: a lock one of them holds
at the fork stays held in the child. ftsim starts its own threads (a progress bar's
monitor, the store's syncing thread, the Parquet writer) only once the workers are forked,
and OpenBLAS, whose threads exist from numpy's import on, stops them around a fork (its
own ``pthread_atfork`` handlers); a program that embeds ftsim and runs threads of its own
when it starts a pool takes that risk, as with any ``multiprocessing`` pool on Python
before 3.14.

The alternatives, measured on that sweep with two workers (medians of 7 alternating runs,
load average 0.7 to 1.2 on 2 CPUs): these forked workers 1.08 s; ``forkserver`` (a server
started as the command starts imports ftsim beside the parent's planning, then forks the
workers: safe with threads) 1.23 s, with the server and its resource tracker two more
processes; a fork pool started as the command starts, its workers importing ftsim
themselves beside the parent, 1.33 s (and 0.6 s more CPU: three processes import the same
modules on two processors). ``spawn`` (a new interpreter per worker) imports ftsim in each
worker after the pool starts."""


_in_worker = False
"""Whether this process is a worker of a pool made here (set by :func:`_init_worker`)."""


FEWER_WORKERS = "fewer workers need less memory"
"""The remedy a worker's death by memory suggests (``--jobs``, ``jobs``)."""
DASK_WORKERS_DIED = (
    "of the Dask cluster died running a task, and so did every worker the scheduler tried it "
    "on next (distributed's KilledWorker; running out of memory does so: fewer workers per "
    "machine, or more memory each)"
)
"""How a Dask cluster's workers died (its scheduler gave up on a task: ``KilledWorker``)."""


class WorkerDied(Exception):
    """A worker process of a local pool ended while tasks were pending: killed by a signal
    (the kernel's out-of-memory killer sends SIGKILL) or exited. The pool cannot go on (its
    other workers are stopped); what the study kept is said by its caller. Printed as is,
    exit status 2: a fault of the machine, not a bug of ftsim's."""

    def __init__(self, cause: str, note: str = ""):
        super().__init__(f"a worker process {cause}{'; ' if note else ''}{note}")
        self.cause = cause


def in_worker() -> bool:
    """Whether this process is a pool worker: it holds its parent's objects frozen out of the
    collector (see :data:`START_METHOD`), known without counting them
    (``gc.get_freeze_count()`` walks every frozen object: some 5 ms for a worker's 10^5)."""
    return _in_worker


def capacity(pool: Executor | None) -> int | None:
    """How many tasks ``pool`` runs at once: a local pool's workers, a Dask cluster's
    worker threads (as it has them now); None for this process (no pool) or when unknown."""
    if pool is None:
        return None
    if isinstance(pool, ProcessPoolExecutor):
        return pool._max_workers
    client = getattr(pool, "_client", None)  # a Dask client's executor
    try:
        return sum(client.nthreads().values()) if client is not None else None
    except (AttributeError, OSError, TimeoutError):
        return None


def default_jobs() -> int:
    """CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@contextmanager
def process_pool(jobs: int):
    """A local pool of ``jobs`` worker processes, started at once (:meth:`_Pool.start`).

    When the block ends, the workers are waited for (the block may have let them go on
    their way already: ``shutdown(wait=False)``). If the parent stops early for any reason
    (an error, Ctrl-C), tasks in flight are abandoned and the workers killed at once
    instead of being waited for.

    Killed (SIGKILL), not terminated: a SIGTERM that reaches a worker forked a moment before,
    which has not run since, is dropped. The worker inherited the parent's Python handler
    (:mod:`ftsim.experiments.interrupts`), whose C half only flags the signal, and the
    interpreter clears pending flags in a child right after the fork (``PyOS_AfterFork_Child``,
    bpo-9535): 200 of 200 children forked on one CPU survived a SIGTERM sent at once. Such a
    worker outlived a command interrupted just after it started its pool, and when the other
    worker had died holding the pool's task-queue lock, it waited on that lock forever, and
    the command with it, at exit (``test_fault_fuzz``, 1 run in ~100 under load).
    """
    from ftsim.trainer.blas import one_blas_thread  # the trainer's, not a timing run's

    pool = _Pool(
        max_workers=jobs,
        mp_context=multiprocessing.get_context(START_METHOD),
        initializer=_init_worker,
        initargs=(os.getpid(),),
    )
    # inherited by the workers; restored once they have exited (OpenBLAS restarts its
    # threads then, one of which spins for a while: on the cores the workers need, were
    # they still running)
    with one_blas_thread():
        try:
            pool.start()
            yield pool
        except BaseException:
            with interrupts.shielded():  # (see the interrupts module: the pool's locks)
                pool.shutdown(wait=False, cancel_futures=True)  # (by its manager thread)
                for worker in pool.workers:
                    worker.kill()
                pool.join(timeout=WAIT_FOR_WORKERS_S)
            raise
        pool.shutdown()
        with interrupts.deferred():
            pool.join()


def submit_all(pool: Executor, fn: Callable, calls: Iterable[tuple]) -> list[Future]:
    """``pool.submit(fn, *args)`` for each ``args`` of ``calls``, with signals deferred (see
    :func:`finished`)."""
    with interrupts.deferred():
        return [pool.submit(fn, *args) for args in calls]


def finished(
    futures: Iterable[Future], pool: Executor | None = None
) -> Iterator[tuple[Future, object]]:
    """(future, result) of each of ``futures`` as they finish; those not yet started are
    cancelled if the caller stops asking (closes the generator). A worker of the local
    ``pool`` that died (a ``BrokenProcessPool``) or ran out of memory (its ``MemoryError``)
    is :class:`WorkerDied`, saying how it ended (:func:`how_it_ended`), and so are the
    workers of a Dask cluster that died running a task (``KilledWorker``). On an error or a
    signal,
    the futures are left to the pool's owner, which stops the pool: a local pool cancels
    them in its manager thread and kills its workers, and the manager fails the others
    (one cancelled here, from another thread, could still be among those: Python 3.11 then
    sets its exception, ``InvalidStateError``, and the manager died with a traceback on
    standard error, found by the fault fuzzer); a Dask client closes and releases them.

    Every call into the futures runs with signals deferred, and the wait between is a
    queue implemented in C, filled by the futures' callbacks, which a signal interrupts
    with no lock taken: a Ctrl-C raised inside the futures' own locking (as
    ``as_completed`` and ``Future.result`` take it) could leave a future's lock taken, and
    the pool's manager thread, which sets the results, waiting for it forever (see
    :mod:`ftsim.experiments.interrupts`)."""
    futures = list(futures)
    done: queue.SimpleQueue = queue.SimpleQueue()
    with interrupts.deferred():
        for future in futures:
            future.add_done_callback(done.put)
    try:
        for _ in futures:
            future = _next_done(done, getattr(pool, "manager", None))
            try:
                with interrupts.deferred():
                    result = future.result()
            except BrokenProcessPool:
                raise WorkerDied(how_it_ended(pool)) from None
            except MemoryError:  # raised in a worker, whose process lives on
                if pool is None:
                    raise
                raise WorkerDied(f"ran out of memory (MemoryError; {FEWER_WORKERS})") from None
            except Exception as exc:
                if type(exc).__name__ != "KilledWorker":  # distributed's, not imported for it
                    raise
                raise WorkerDied(DASK_WORKERS_DIED) from None
            yield future, result
    except GeneratorExit:
        with interrupts.deferred():
            for future in futures:
                future.cancel()
        raise


def _next_done(done: queue.SimpleQueue, manager: threading.Thread | None) -> Future:
    """The next future put in ``done``. While none comes, the pool's ``manager`` thread (which
    sets the futures' results) is checked every :data:`MANAGER_CHECK_S`: if it has ended
    (an error in it, which Python prints), no future will ever come, and this says so
    instead of waiting forever."""
    if manager is None:
        return done.get()
    while True:
        try:
            return done.get(timeout=MANAGER_CHECK_S)
        except queue.Empty:
            if not manager.is_alive() and done.empty():
                raise RuntimeError(
                    "the process pool's manager thread ended with tasks pending"
                ) from None


def how_it_ended(pool: Executor | None) -> str:
    """How the worker of ``pool`` that died ended, e.g. "was killed by SIGKILL (as the
    kernel's out-of-memory killer does: fewer workers need less memory)". The pool's
    manager stops the others with SIGTERM once one has died, and ends; it and they are
    waited for (a moment), then the one that ended otherwise is the one (a worker sent
    SIGTERM from outside cannot be told apart from them: "ended abruptly")."""
    if not isinstance(pool, _Pool):
        return "ended abruptly"
    pool.join(timeout=WAIT_FOR_WORKERS_S)
    for worker in pool.workers:
        code = worker.exitcode
        if code is None or code == -signal.SIGTERM:
            continue
        if code >= 0:
            return f"exited with status {code}"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGKILL:
            return (
                f"was killed by {name} (as the kernel's out-of-memory killer does: {FEWER_WORKERS})"
            )
        return f"was killed by {name}"
    return "ended abruptly"


class _Pool(ProcessPoolExecutor):
    """A process pool that forks all its workers when :meth:`start` is called."""

    workers: tuple = ()
    """The worker processes (kept here: a shut-down pool forgets them)."""
    manager: threading.Thread | None = None
    """The pool's manager thread, which reaps the workers once the pool is shut down."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Shut the pool down (:meth:`ProcessPoolExecutor.shutdown`) with signals deferred,
        as every call into the pool (see :func:`finished`), whoever calls it."""
        with interrupts.deferred():
            super().shutdown(wait, cancel_futures=cancel_futures)

    def join(self, timeout: float | None = None) -> None:
        """Wait until every worker has exited, also after ``shutdown(wait=False)``: for the
        manager thread first, which reaps them, then for each (two threads waiting for one
        process race: the loser's wait returns at once, the process not yet reaped); for at
        most ``timeout`` seconds in all, if given."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        if self.manager is not None:
            self.manager.join(left())
        for worker in self.workers:
            worker.join(left())

    def start(self) -> None:
        """Fork the workers now (a fork pool otherwise forks them at its first ``submit``)
        by submitting a task that does nothing, with the parent's objects frozen out of the
        garbage collector meanwhile (see :data:`START_METHOD`; unless the caller has frozen
        objects itself: its freeze is left as it is).

        No signal cuts the forks: the parent's handler raising inside the interpreter's
        fork hooks (logging's lock release) printed "Exception ignored ... Traceback"
        instead of interrupting the command. A signal received meanwhile is raised as the
        workers are started."""
        mine = not gc.get_freeze_count()  # else the caller manages the frozen objects
        if mine:
            gc.freeze()
        try:
            with interrupts.deferred():
                self.submit(_nothing)
        finally:
            if mine:
                gc.unfreeze()
            self.workers = tuple((self._processes or {}).values())  # no public API (< 3.14)
            self.manager = self._executor_manager_thread


def _nothing() -> None:
    """The task that starts a pool's workers."""


def _init_worker(parent_pid: int) -> None:
    """Pool worker set-up: ignore SIGINT and SIGHUP, die of SIGTERM, exit when the parent
    process is gone (its one BLAS thread is the parent's limit, inherited: see the module
    docstring). The signals come first: until then the worker has the parent's handlers,
    which act as a worker's (:func:`ftsim.experiments.interrupts._handler`)."""
    global _in_worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _in_worker = True
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    """Exit this process as soon as its parent is no longer ``parent_pid``: a parent killed
    with SIGKILL cannot stop its workers, and they would otherwise wait forever."""
    while os.getppid() == parent_pid:
        time.sleep(WATCHDOG_PERIOD_S)
    os._exit(1)
