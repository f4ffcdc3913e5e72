"""Time accounting: the categories every wall-clock second of a run is charged to.

A replication's wall time splits exactly into the failure-free training time (``ideal``)
and these categories, so ``wall = ideal + Σ categories`` holds for every result row. This
module is a leaf (no imports) so that plots and statistics can name the categories without
importing the simulator.
"""

CATEGORIES = ("save", "load", "lost", "reschedule", "degraded", "other")
"""Breakdown of wall time beyond the failure-free training time."""

PART_CATEGORIES = ("save", "load", "lost", "degraded", "other")
"""Categories also summed per part of a composed policy (result columns
``<part>/<category>_h``); rescheduling belongs to the job: failed nodes are replaced once for
all parts."""

OTHER = "other (background work: parity, logs, persists, row tracking)"
"""What ``other`` is, for legends: compute slowed by background work (ECRM's parity
updates, SWIFT's update-log writes, CheckFreq's checkpoint persists, CPR-MFU's and
CPR-SSU's row tracking: docs/model.md)."""

LOAD = "load (state read back, logs replayed)"
"""What ``load`` is, for legends: restoring state while training waits, which for SWIFT
includes replaying its update log (docs/model.md, the time categories): "load" alone
named a replay a read."""

OTHER_NOTE = (
    "other_h: training slowed by background work "
    "(ECRM parity updates, SWIFT update logs, CheckFreq persists, CPR-MFU/SSU row tracking)"
)
"""Footnote of the tables that print an ``other_h`` column."""
