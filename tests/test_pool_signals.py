"""Signals and a study's threads: no call into the pool of workers, nor the store's wait
for its syncing thread, runs where a signal's handler may raise (a Python-level lock taken
when the exception is raised stays taken: the command hung at exit, found by the fault
fuzzer, a run signalled as it submitted its tasks), and a signal still stops the wait for
the tasks at once."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor

import pytest

from ftsim.experiments import advise, interrupts, study, sweep
from ftsim.experiments import pool as pool_module
from ftsim.experiments.pool import finished, process_pool, submit_all
from tests.conftest import SCENARIOS

WATCHED = {
    ProcessPoolExecutor: ("submit", "shutdown"),
    Future: ("add_done_callback", "result"),
}
"""The calls into a pool and its futures that a study makes from its main thread."""


def _calls_into_the_pool(monkeypatch, tmp_path, command: str) -> list[tuple[str, bool]]:
    """(call, whether signals were deferred) of each watched call that ``command`` (a sweep,
    or advice) with two workers makes from the main thread, under the command's handlers."""
    calls = []
    main = threading.main_thread()

    def watched(name, real):
        def call(*args, **kwargs):
            if threading.current_thread() is main:
                calls.append((name, interrupts._deferring > 0))
            return real(*args, **kwargs)

        return call

    for cls, names in WATCHED.items():
        for name in names:
            monkeypatch.setattr(cls, name, watched(f"{cls.__name__}.{name}", getattr(cls, name)))
    smoke = SCENARIOS / "smoke.yaml"
    with interrupts.handled():
        if command == "sweep":
            grid = ["policies.*.interval=10 min,30 min"]
            plan = study.plan(smoke, ["run.replications=2"], grid)
            study.execute(plan, tmp_path / "s", jobs=2, batch=2, say=None)
        else:
            advise.advise(smoke, reps=2, rounds=0, jobs=2)
    return calls


EVERY_CALL = {f"{cls.__name__}.{name}" for cls, names in WATCHED.items() for name in names}


@pytest.mark.parametrize("command", ["sweep", "advise"])
def test_every_call_into_the_pool_runs_with_signals_deferred(monkeypatch, tmp_path, command):
    calls = _calls_into_the_pool(monkeypatch, tmp_path, command)
    assert {name for name, _ in calls} == EVERY_CALL
    assert [name for name, deferred in calls if not deferred] == []


class _Undeferred:
    """The interrupts module as the pool saw it before: nothing deferred."""

    deferred = shielded = contextlib.nullcontext


def test_the_deferral_check_fails_when_the_pool_is_called_as_it_was(monkeypatch, tmp_path):
    """Teeth: without the deferral of the calls into the pool (submitting, collecting,
    the shutdowns), the check sees each of them."""
    monkeypatch.setattr(pool_module, "interrupts", _Undeferred)
    calls = _calls_into_the_pool(monkeypatch, tmp_path, "sweep")
    assert {name for name, deferred in calls if not deferred} == EVERY_CALL


def _long_task() -> None:
    time.sleep(20)


def test_a_signal_stops_the_wait_for_the_tasks_at_once():
    """The wait between calls is not deferred: a Ctrl-C there is raised while the tasks run
    (they take 20 s: a wait the signal did not stop would end with their results), and the
    pool's workers and manager thread end."""
    with interrupts.handled(), pytest.raises(interrupts.Interrupted), process_pool(2) as pool:
        futures = {pool.submit(_long_task): [i] for i in range(2)}
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        next(sweep._finished(futures, pool))
    pool.manager.join(timeout=30)
    assert not pool.manager.is_alive()
    assert not [worker for worker in pool.workers if worker.is_alive()]


def test_a_signal_during_a_shielded_clean_up_is_counted_not_raised():
    """The pool's clean-up after an error or a signal (``shielded``) is not cut by another
    signal, nor does that signal replace the exception under way; the exit status is its."""
    with interrupts.handled():
        with interrupts.shielded():
            os.kill(os.getpid(), signal.SIGTERM)
        assert interrupts.exit_status() == 128 + signal.SIGTERM
        with pytest.raises(interrupts.Interrupted), interrupts.deferred():
            os.kill(os.getpid(), signal.SIGHUP)  # deferred, by contrast: raised at the end


class _WatchedEvent(threading.Event):
    """An Event that records whether signals were deferred at each set and clear."""

    calls: list[bool] = []

    def set(self):
        self.calls.append(interrupts._deferring > 0)
        super().set()

    def clear(self):
        self.calls.append(interrupts._deferring > 0)
        super().clear()


def _hurries_of_a_sweep(monkeypatch, tmp_path) -> list[bool]:
    """Whether signals were deferred at each set and clear of the store's "hurry" event (the
    sync waiting for the syncing thread) in a sweep of two workers."""
    from ftsim.experiments import store
    from ftsim.experiments.store import RunStore

    init = RunStore.__init__

    def watched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._hurry = _WatchedEvent()

    monkeypatch.setattr(RunStore, "__init__", watched)
    monkeypatch.setattr(_WatchedEvent, "calls", [])
    monkeypatch.setattr(store, "SYNC_GAP_S", 60.0)  # the syncing thread still waits at the end
    plan = study.plan(
        SCENARIOS / "smoke.yaml", ["run.replications=2"], ["policies.*.interval=10 min,30 min"]
    )
    with interrupts.handled():
        study.execute(plan, tmp_path / "s", jobs=2, batch=2, say=None)
    return _WatchedEvent.calls


def test_the_store_waits_for_its_syncing_thread_with_signals_deferred(monkeypatch, tmp_path):
    calls = _hurries_of_a_sweep(monkeypatch, tmp_path)
    assert calls and all(calls)


def test_the_store_check_fails_when_the_hurry_is_not_deferred(monkeypatch, tmp_path):
    """Teeth: with the store's deferral gone, the check sees a set or clear made while
    signals were not deferred (not every one: the syncing thread's may coincide with the
    main thread's own deferral while it makes a file, as ``atomic_write_bytes`` does)."""
    from ftsim.experiments import store

    monkeypatch.setattr(store, "interrupts", _Undeferred)
    calls = _hurries_of_a_sweep(monkeypatch, tmp_path)
    assert calls and not all(calls)


def _handler_at_the_pool_calls(monkeypatch, tmp_path, command: str = "sweep") -> set[bool]:
    """Whether ftsim's handler took SIGINT at the calls into the pool of a sweep (or advice)
    run from Python (no command line: Python's default handler before and after)."""
    seen = set()
    submit = ProcessPoolExecutor.submit

    def watched(self, *args, **kwargs):
        seen.add(signal.getsignal(signal.SIGINT) is interrupts._handler)
        return submit(self, *args, **kwargs)

    monkeypatch.setattr(ProcessPoolExecutor, "submit", watched)
    if command == "advise":
        advise.advise(SCENARIOS / "smoke.yaml", reps=2, rounds=0, jobs=2)
        return seen
    grid = ["policies.*.interval=10 min,30 min"]
    plan = study.plan(SCENARIOS / "smoke.yaml", ["run.replications=2"], grid)
    study.execute(plan, tmp_path / "s", jobs=2, batch=2, say=None)
    return seen


@pytest.mark.parametrize("command", ["sweep", "advise"])
def test_from_python_ctrl_c_goes_through_ftsims_handler_while_a_study_runs(
    monkeypatch, tmp_path, command
):
    """A notebook's Ctrl-C, deferred as the command line's is (Python's own handler raises
    anywhere): ftsim's handler for SIGINT while the study runs, Python's again after."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("the test runner has a SIGINT handler of its own")
    assert _handler_at_the_pool_calls(monkeypatch, tmp_path, command) == {True}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_ctrl_c_check_fails_without_the_handler(monkeypatch, tmp_path):
    """Teeth: with no handler installed for the study (``handled`` doing nothing), the check
    sees Python's default handler at the calls."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("the test runner has a SIGINT handler of its own")
    monkeypatch.setattr(interrupts, "handled", lambda signals: contextlib.nullcontext())
    assert _handler_at_the_pool_calls(monkeypatch, tmp_path) == {False}


def test_a_notebooks_ctrl_c_stops_a_sweep_and_keeps_its_finished_tasks(monkeypatch, tmp_path):
    """From Python, as in a notebook: Ctrl-C while the tasks run (each made to take 1 s)
    ends the sweep with StudyInterrupted, its folder resumable, Python's handler back."""
    from ftsim import api

    real = sweep.simulate_policies

    def slow(*args, **kwargs):  # the forked workers inherit it
        time.sleep(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep, "simulate_policies", slow)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    grid = {"policies.*.interval": ["10 min", "30 min"]}
    with pytest.raises(study.StudyInterrupted) as stopped:
        api.sweep(SCENARIOS / "smoke.yaml", grid, reps=4, trainer=False, jobs=2, out=tmp_path / "s")
    assert stopped.value.folder == tmp_path / "s"
    assert (tmp_path / "s" / "manifest.json").exists()  # resumable
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _stopped_while_tasks_wait(monkeypatch, cancel: bool = False) -> list:
    """The exceptions of threads (the pool's manager) when a signal to the process group
    stops the wait for 20 long tasks on two workers, most not yet started: the workers die
    of it, before the parent stops the pool (``cancel``: the waiter cancels the futures on
    its way out first, as it did before)."""
    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_type))
    with interrupts.handled(), pytest.raises(interrupts.Interrupted), process_pool(2) as pool:
        futures = submit_all(pool, time.sleep, [(20,)] * 20)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            next(finished(futures))
        except interrupts.Interrupted:
            for future in futures if cancel else ():
                future.cancel()
            for worker in pool.workers:  # the group's signal, at the workers
                os.kill(worker.pid, signal.SIGKILL)
            pool.manager.join(timeout=30)  # it has seen them die
            raise
    return errors


def test_a_stopped_pool_fails_its_waiting_tasks_without_an_error_of_its_own(monkeypatch):
    """The futures of tasks not yet started are left to the pool, which cancels them in
    its manager thread (a Python 3.11 manager found one cancelled from the main thread among
    those it fails once the workers are killed, and died with InvalidStateError: a
    traceback on standard error, found by the fault fuzzer)."""
    assert _stopped_while_tasks_wait(monkeypatch) == []


def test_the_manager_check_fails_when_the_waiter_cancels_the_tasks(monkeypatch):
    """Teeth: cancelled by the waiter on its way out (as before), the manager thread dies
    with InvalidStateError (Python before 3.12 only: later releases ignore a cancelled
    future there)."""
    import sys
    from concurrent.futures import InvalidStateError

    if sys.version_info >= (3, 12):
        pytest.skip("Python 3.12 and later ignore a cancelled future when the pool breaks")
    assert _stopped_while_tasks_wait(monkeypatch, cancel=True) == [InvalidStateError]


def test_a_wait_closed_early_cancels_the_tasks_not_started():
    """A caller that stops asking (closes the generator) has the tasks not yet started
    cancelled, with signals deferred; the others end, and the pool with them."""
    with process_pool(2) as pool:
        futures = submit_all(pool, time.sleep, [(0.2,)] * 2 + [(1.0,)] * 10)
        waiting = finished(futures)
        next(waiting)
        waiting.close()
        cancelled = [future.cancelled() for future in futures]
    # beyond reach: the finished (1-2), the running (2) and the call queue's (workers + 1)
    assert not any(cancelled[:2]) and sum(cancelled) >= 12 - 7
