"""Progress of a study (``run``, ``sweep``, the Python API) on standard error.

On a terminal a tqdm bar counts replications. When standard error is not a terminal (a
batch job, ``nohup``, a CI log, a notebook) a bar's carriage returns would leave a mess of
partial lines, so a plain line is printed each time another 5% of the tasks is done, and
after a task that trained the model (those take seconds to minutes each) if the last line
is :data:`TRAINED_GAP_S` old, with the time elapsed and an estimate of the time left::

    sweep: 12/240 tasks (5%), 120/2400 replications, 0:00:31 elapsed, ETA 0:09:49

The estimate assumes the remaining replications take as long on average as the computed
ones of their kind (replications found in a resumed folder are counted as done but not
timed). While replications that train the model remain, it counts those alone: each takes
seconds to minutes where a timing replication takes milliseconds (counting both alike, a
run of prod50h estimated 2 minutes left of a 27 s run, 44 s when 1 s was left). Once they
are done, it counts the timing replications finished since the last trained one.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

STEP = 0.05
"""Fraction of the tasks between two progress lines (when standard error is a log)."""

TRAINED_GAP_S = 10.0
"""Seconds since the last progress line after which a trained task prints one (a run of
many short trained tasks would otherwise fill a log with a line each)."""


class Progress:
    """Reports a study's tasks (see :class:`ftsim.experiments.sweep.Progress`)."""

    def __init__(
        self,
        name: str,
        quiet: bool = False,
        stream=None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.name = name
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.clock = clock
        self.started = self._said = clock()
        self.tasks = self.tasks_done = 0
        self.reps = self.reps_done = self.reps_reused = 0
        self.trained = self.trained_done = 0
        self._timing_from = self.started
        """When the timing replications the estimate counts began: the start, or the end
        of the last trained replication."""
        self._timing_before = 0
        """Timing replications computed before :attr:`_timing_from`."""
        self._bar = None

    def planned(self, tasks: int, reps: int, reused: int, trained: int = 0) -> None:
        """A round of ``tasks`` to compute (``reps`` replications, ``trained`` of which train
        the model; ``reused`` more were found stored). Later rounds (a target half-width) add
        to the totals."""
        self.tasks += tasks
        self.reps += reps + reused
        self.reps_done += reused
        self.reps_reused += reused
        self.trained += trained
        if self._bar is not None:
            self._bar.total = self.reps
            self._bar.update(reused)

    def finished(self, reps: int, trained: bool = False) -> None:
        """A task of ``reps`` replications finished; ``trained``: it trained the model."""
        before = self.tasks_done
        self.tasks_done += 1
        self.reps_done += reps
        if trained:
            self.trained_done += reps
            if self.trained_done >= self.trained:  # the timing replications' turn
                self._timing_from = self.clock()
                self._timing_before = self._timing_done()
        if self.quiet:
            return
        if self.tty:
            self._show_bar().update(reps)
        elif _steps(self.tasks_done, self.tasks) > _steps(before, self.tasks) or (
            trained and self.clock() - self._said >= TRAINED_GAP_S
        ):
            self._said = self.clock()
            print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        """The progress so far in one line."""
        share = self.tasks_done / self.tasks if self.tasks else 1.0
        now = self.clock()
        elapsed = now - self.started
        left = self.reps - self.reps_done
        trained_left = self.trained - self.trained_done
        if not left:
            eta = 0.0
        elif trained_left > 0:
            done = self.trained_done
            eta = elapsed / done * trained_left if done else math.nan
        else:
            timed = self._timing_done() - self._timing_before
            eta = (now - self._timing_from) / timed * left if timed else math.nan
        reused = f" ({self.reps_reused} reused)" if self.reps_reused else ""
        return (
            f"{self.name}: {self.tasks_done}/{self.tasks} tasks ({100 * share:.0f}%), "
            f"{self.reps_done}/{self.reps} replications{reused}, "
            f"{clock_time(elapsed)} elapsed, ETA {clock_time(eta)}"
        )

    def _timing_done(self) -> int:
        """Timing replications computed so far (not found stored, not trained)."""
        return self.reps_done - self.reps_reused - self.trained_done

    def close(self) -> None:
        """Close the bar (at the end, after an error or an interruption)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _show_bar(self):
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.reps,
                initial=self.reps_reused,
                desc=self.name,
                unit="replications",
                leave=False,
                file=self.stream,
            )
        return self._bar


def _steps(done: int, total: int) -> int:
    """How many whole :data:`STEP` fractions of ``total`` ``done`` tasks make."""
    return math.floor(done / total / STEP + 1e-9) if total else 0


def clock_time(seconds: float) -> str:
    """``h:mm:ss`` ('?' for an unknown duration)."""
    if not math.isfinite(seconds):
        return "?"
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
