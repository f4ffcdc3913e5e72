"""Notices: what the tool decided for the user, or accepted while deprecated.

A notice is a :class:`Warning` subclass, so the Python API raises it through :mod:`warnings`
(shown once per distinct message, filterable by category) and the command line prints it
on standard error as ``ftsim: warning: ...``. The objects carry
their facts as attributes, for a caller that wants more than the text.
"""

from __future__ import annotations

import warnings


class Notice(UserWarning):
    """Base of every notice: a decision taken for the user or a deprecated input."""

    def at(self, where: str) -> Notice:
        """The same notice, said of ``where`` (a sweep point)."""
        return type(self)(f"{where}: {self}")


class UnfinishedReplications(Notice):
    """Replications of a policy (at a sweep point) did not finish within
    ``run.max_wall_factor`` × the failure-free time: its statistics are over the others
    (``n_unfinished`` in the summary)."""


class TargetPlsMissed(Notice):
    """A policy's ``pls_model`` lies above its ``target_pls`` beyond doubt (its 95% CI): the
    interval planned on the job's MTBF lost more than the target (cluster operations'
    waits, say)."""


class MaxRepsReached(Notice):
    """A sweep with ``--target-halfwidth`` stopped adding replications to a (point, policy)
    at ``--max-reps`` with its interval still wider than the target
    (``stopped_at_max_reps`` in the summary)."""


class RenamedField(Notice, FutureWarning):
    """A field given by its old name (accepted for now)."""


class CprFallback(Notice):
    """CPR ran full recovery at Daly's interval instead of partial recovery at the interval
    asked for, because its model predicts full recovery cheaper (``fallback: true``).

    ``policy``: its label (with the sweep point's values when in a sweep); ``asked``: what
    the scenario asked for, in words (``interval 15 min``, ``target_pls 0.1 (10 h)``);
    ``asked_s`` / ``used_s``: the interval asked for and the one run, compute seconds;
    ``predicted``: the predicted overhead fractions, ``{"full": …, "partial": …}``, and of
    partial recovery's, ``"rollbacks"``: trainer failures rolling every node back.
    """

    def __init__(self, policy: str, asked: str, asked_s: float, used_s: float, predicted: dict):
        self.policy, self.asked, self.asked_s, self.used_s = policy, asked, asked_s, used_s
        self.predicted = predicted
        super().__init__(self._text())

    def _text(self) -> str:
        full, partial = 100 * self.predicted["full"], 100 * self.predicted["partial"]
        rollbacks = 100 * self.predicted.get("rollbacks", 0.0)
        why = ""
        if rollbacks > partial / 2:  # what made partial recovery dear, when it is that
            why = (
                f", {rollbacks:.2f}% of it trainer failures rolling every node back "
                "(trainer_failure: replica copies a failed trainer from a replica)"
            )
        return (
            f"{self.policy}: asked for {self.asked}, ran full recovery every "
            f"{short_duration(self.used_s)} (Daly's interval) instead: its model predicts it "
            f"cheaper ({full:.2f}% vs {partial:.2f}% overhead for partial recovery{why}); rows "
            "say cpr_decision=full (fallback: false forces partial recovery)"
        )

    def at(self, where: str) -> CprFallback:
        """The same notice, its policy named with ``where`` (a sweep point)."""
        return CprFallback(
            f"{self.policy} at {where}", self.asked, self.asked_s, self.used_s, self.predicted
        )


def counted(n: int, noun: str) -> str:
    """``1 replication``, ``3 replications``: a count with its noun, plural but for one."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def short_duration(seconds: float) -> str:
    """A duration to three significant digits in h (from 1 h), min or s: ``45.8 min``."""
    for unit, size in (("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def warn_renamed(old: str, new: str) -> None:
    """Say that the field ``old`` (a dotted location) is deprecated in favour of ``new``."""
    warnings.warn(f"{old} is deprecated: call it {new}", RenamedField, stacklevel=3)
