"""Progress of a command's stages on standard error.

On a terminal each stage gets a tqdm bar. When standard error is not a terminal (redirected
to a file, a CI log) a bar's carriage returns would leave a mess of partial lines, so a
plain line is printed instead as each stage finishes — and, for a stage whose steps are slow
(a trained replication takes seconds to minutes), after each step.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass
class Stage:
    """``total`` steps of work, counted in ``unit``; ``each`` prints a line per step."""

    name: str
    total: int
    unit: str
    each: bool = False
    done: int = 0


class Progress:
    """Callable as ``progress(stage_name, steps)`` to report finished steps of a stage."""

    def __init__(self, stages: list[Stage], quiet: bool = False, stream=None):
        self.stages = {s.name: s for s in stages if s.total > 0}
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self._bars = {}

    def __call__(self, name: str, steps: int = 1) -> None:
        """Count ``steps`` more finished steps of stage ``name``. Steps beyond the total (a
        sweep adding replications for a target precision) are counted but not shown."""
        stage = self.stages[name]
        before, stage.done = stage.done, stage.done + steps
        if self.quiet or before >= stage.total:
            return
        finished = stage.done >= stage.total
        if self.tty:
            self._bar(stage).update(min(steps, stage.total - before))
            if finished:
                self._bars.pop(name).close()
        elif stage.each or finished:
            done = min(stage.done, stage.total)
            print(f"{name}: {done}/{stage.total} {stage.unit}", file=self.stream, flush=True)

    def close(self) -> None:
        """Close the bars of unfinished stages (after an error or an interruption)."""
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()

    def _bar(self, stage: Stage):
        if stage.name not in self._bars:
            from tqdm import tqdm

            self._bars[stage.name] = tqdm(
                total=stage.total, desc=stage.name, unit=stage.unit, leave=False, file=self.stream
            )
        return self._bars[stage.name]
