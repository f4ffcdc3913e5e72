"""A signal whose ``KeyboardInterrupt`` a library turned into its own error (pydantic's
serializer makes it a ``PydanticSerializationError``) ends the command as the interruption it
is: one line, 128 + the signal, no traceback; a run leaves no folder, a sweep says what it kept
(found by the fault fuzzer: a SIGTERM while ``run`` hashed its scenario)."""

from __future__ import annotations

import contextlib
import os
import signal
import weakref

import pytest
from pydantic import BaseModel, field_serializer
from pydantic_core import PydanticSerializationError

from ftsim.cli import main
from ftsim.experiments import interrupts, study
from ftsim.scenario import notices
from tests.conftest import SCENARIOS


class _SignalledWhileDumped(BaseModel):
    """A model whose serializer receives SIGTERM (as a scenario's may, at any moment)."""

    x: int = 1

    @field_serializer("x")
    def _x(self, x: int) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        return x


def _hash_receives_sigterm(monkeypatch) -> None:
    real = notices.resolved_data

    def resolved_data(scenario):
        _SignalledWhileDumped().model_dump()
        return real(scenario)

    monkeypatch.setattr(notices, "resolved_data", resolved_data)


def _run(out) -> int:
    return main(["run", str(SCENARIOS / "smoke.yaml"), "--no-trainer", "--reps", "2", "-q",
                 "-o", str(out)])  # fmt: skip


def test_pydantic_wraps_a_signal_raised_in_a_serializer():
    """The premise: inside the handlers, the signal's Interrupted reaches the caller as
    pydantic's error."""
    with pytest.raises(PydanticSerializationError, match="SIGTERM"), interrupts.handled():
        _SignalledWhileDumped().model_dump()


def test_a_signal_a_library_wrapped_ends_the_command_as_interrupted(tmp_path, monkeypatch, capsys):
    _hash_receives_sigterm(monkeypatch)
    out = tmp_path / "out"
    assert _run(out) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.strip() == "ftsim: interrupted"
    assert not out.exists()


def test_without_unwrapping_the_command_ends_in_a_traceback(tmp_path, monkeypatch):
    """The check above fails without :func:`interrupts.unwrapped` (the bug it catches)."""
    _hash_receives_sigterm(monkeypatch)
    monkeypatch.setattr(interrupts, "unwrapped", contextlib.nullcontext)
    with pytest.raises(PydanticSerializationError):
        _run(tmp_path / "out")


def _sweep_receives_sigterm_while_writing_its_scenario(monkeypatch) -> None:
    real = study.write_resolved

    def write_resolved(path, scenario):
        _SignalledWhileDumped().model_dump()
        real(path, scenario)

    monkeypatch.setattr(study, "write_resolved", write_resolved)


def _sweep(out, *more: str) -> int:
    return main(["sweep", str(SCENARIOS / "smoke.yaml"), "--no-trainer", "--reps", "2",
                 "--jobs", "1", "-q", *(more or ("-o", str(out)))])  # fmt: skip


def test_a_sweep_a_wrapped_signal_stops_says_what_it_kept(tmp_path, monkeypatch, capsys):
    _sweep_receives_sigterm_while_writing_its_scenario(monkeypatch)
    out = tmp_path / "out"
    assert _sweep(out) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert f"--resume {out}" in err and "Traceback" not in err
    monkeypatch.undo()
    assert _sweep(out, "--resume", str(out)) == 0
    assert (out / "runs.csv").exists()


def test_unwrapped_only_by_the_command_a_sweep_says_nothing_of_what_it_kept(
    tmp_path, monkeypatch, capsys
):
    """The sweep's own unwrapping is what lets it say so (removed here: the command line's
    alone turns the error into a bare interruption)."""
    _sweep_receives_sigterm_while_writing_its_scenario(monkeypatch)
    command_line = interrupts.unwrapped
    calls = []

    def only_the_first():  # the command line's; the sweep's is the second
        calls.append(None)
        return command_line() if len(calls) == 1 else contextlib.nullcontext()

    monkeypatch.setattr(interrupts, "unwrapped", only_the_first)
    assert _sweep(tmp_path / "out") == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.strip() == "ftsim: interrupted"


def test_an_error_without_a_signal_is_not_called_an_interruption(tmp_path, monkeypatch):
    def broken(scenario):
        raise RuntimeError("a bug")

    monkeypatch.setattr(notices, "resolved_data", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        _run(tmp_path / "out")


def test_outside_the_commands_handlers_an_error_stays_an_error(tmp_path, monkeypatch):
    """After an interrupted command, the Python API in the same process (no handlers
    installed) reports its own errors as they are, not as that old signal."""
    _hash_receives_sigterm(monkeypatch)
    assert _run(tmp_path / "out") == 128 + signal.SIGTERM
    with pytest.raises(RuntimeError, match="a bug"), interrupts.unwrapped():
        raise RuntimeError("a bug")


def _signalled() -> None:
    """A finalizer that receives SIGTERM (the collector runs one at any moment); its handler
    raises in here, where Python prints and drops the exception."""
    os.kill(os.getpid(), signal.SIGTERM)
    sum(range(100))  # bytecode after the signal


class _SignalledWhenFreed:
    def __init__(self) -> None:
        weakref.finalize(self, _signalled)


def _freed_under_the_handlers(capsys, then: str) -> tuple[int | None, str]:
    """(the signal raised after a finalizer got it, or None; standard error), ``then``: a
    section that defers signals follows, or the handled block ends."""
    try:
        with interrupts.handled():
            freed = _SignalledWhenFreed()
            del freed
            sum(range(1000))  # the code the collector interrupted goes on
            if then == "deferred":
                with interrupts.deferred():
                    pass
                return None, capsys.readouterr().err
    except interrupts.Interrupted as exc:
        return exc.signum, capsys.readouterr().err
    return None, capsys.readouterr().err


@pytest.mark.parametrize("then", ["deferred", "end"])
def test_a_signal_a_finalizer_got_stops_the_command_after_it(capsys, then):
    """Found by the fault fuzzer: a SIGTERM inside a pool worker's pipe finalizer as a run
    ended was printed ("Exception ignored" and a traceback) and lost; it is kept pending,
    raised as the next deferred section ends, or as the command does."""
    assert _freed_under_the_handlers(capsys, then) == (signal.SIGTERM, "")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_finalizer_check_fails_without_keeping_the_signal(capsys, monkeypatch):
    """Teeth: without the hook, the signal is lost (and, outside pytest, which takes the
    unraisable exceptions itself, its traceback printed)."""
    monkeypatch.setattr(interrupts, "_kept_pending", lambda hook: hook)
    assert _freed_under_the_handlers(capsys, "end")[0] is None


def test_a_signal_kept_from_an_earlier_block_is_not_raised_in_the_next(capsys):
    """A notebook's second study does not inherit a signal the first one kept pending (its
    block ended with an error before raising it)."""
    with pytest.raises(RuntimeError), interrupts.handled():
        freed = _SignalledWhenFreed()
        del freed  # kept pending
        raise RuntimeError("the block ends with an error first")
    with interrupts.handled(), interrupts.deferred():
        pass  # nothing raised here
