"""Reading public failure logs in the LANL failure-data format.

Los Alamos National Laboratory released the failure records of 22 of its HPC systems,
1996–2005 (about 23,000 node outages; B. Schroeder and G. Gibson, "A large-scale study of
failures in high-performance computing systems", DSN 2006; distributed by LANL and by the
USENIX Computer Failure Data Repository, CFDR). Each record is one node outage: the system
and node, when operations logged the problem and when the node was back in the job mix,
the downtime in minutes, the workload and the root cause. The CSV's header is::

    System,machine type,nodes,procstot,procsinnode,nodenum,nodenumz,node install,
    node prod,node decom,fru type,mem,cputype,memtype,num intercon,purpose,
    Prob Started,Prob Fixed,Down Time,Facilities,Hardware,Human Error,Network,
    Undetermined,Software,Same Event

with times as ``6/21/2005 10:54`` (month/day/year hour:minute). Only these columns are
read (others are ignored, so a log with just them is enough):

- ``nodenum``: the node (within its system), required;
- ``Prob Started``: when the failure started, required;
- ``Prob Fixed``: when the node was repaired; or, when it is absent or blank, ``Down Time``
  in minutes; one of the two is required;
- ``System``: the system, optional (a source can keep the rows of one system).

Header names are matched without regard to case, spacing or a parenthesised suffix
(``Prob Started (mm/dd/yy hh:mm)`` is ``Prob Started``). Times may also have seconds, a
two-digit year, or be ISO 8601 (``2005-06-21 10:54``). Rows may be in any order.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

TIME_FORMATS = ("%m/%d/%Y %H:%M", "%m/%d/%Y %H:%M:%S", "%m/%d/%y %H:%M", "%m/%d/%y %H:%M:%S")
"""LANL's month/day/year hour:minute, with optional seconds and two-digit years."""

COLUMNS = {
    "system": "System",
    "node": "nodenum",
    "started": "Prob Started",
    "fixed": "Prob Fixed",
    "down": "Down Time",
}
"""The columns read, by their LANL names."""


class LogError(ValueError):
    """An invalid failure log; the message names the file, and the line when it is one row."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One node outage of a failure log."""

    line: int
    system: str
    node: str
    """The log's node id (integers without leading zeros)."""
    started: datetime
    repair_s: float
    """Seconds from the failure to the repair (Prob Fixed − Prob Started, or Down Time)."""


def _key(header: str) -> str:
    """A header name for matching: lower case, single spaces, no parenthesised suffix."""
    header = re.sub(r"\(.*?\)", " ", header.replace("\ufeff", ""))
    return " ".join(header.lower().split())


def node_id(text: str) -> str:
    """A log node id as compared: stripped; an integer without leading zeros."""
    text = str(text).strip()
    return str(int(text)) if text.isdigit() else text


def id_order(node: str) -> tuple:
    """Sort key of node ids: integers numerically, before any other text."""
    return (0, int(node), "") if node.isdigit() else (1, 0, node)


def parse_time(text: str) -> datetime:
    """A LANL time (``6/21/2005 10:54``) or ISO 8601; ValueError if neither."""
    text = " ".join(str(text).split())
    for form in TIME_FORMATS:
        try:
            return datetime.strptime(text, form)
        except ValueError:
            pass
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            "expected a time such as '6/21/2005 10:54' (month/day/year hour:minute)"
        ) from None


def read_failure_log(path: Path) -> list[LogEntry]:
    """The outages of a failure log, sorted by start (then line); LogError naming the file
    (and line) on a missing column or a bad value."""
    name = path.name
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                raise LogError(f"{name}: the file is empty")
            found = {_key(h): i for i, h in reversed(list(enumerate(header)))}
            where = {k: found.get(_key(v)) for k, v in COLUMNS.items()}
            missing = [COLUMNS[k] for k in ("node", "started") if where[k] is None]
            if where["fixed"] is None and where["down"] is None:
                missing.append(f"{COLUMNS['fixed']} (or {COLUMNS['down']})")
            if missing:
                got = ", ".join(h.strip() for h in header if h.strip()) or "nothing"
                raise LogError(
                    f"{name}: missing column {', '.join(missing)} (LANL failure-data format: "
                    f"nodenum, Prob Started, Prob Fixed or Down Time, optional System; got {got})"
                )
            entries = [
                entry
                for line, row in enumerate(reader, start=2)
                if (entry := _entry(name, line, row, where)) is not None
            ]
    except UnicodeDecodeError:
        raise LogError(f"{name}: not a text (UTF-8) CSV file") from None
    except csv.Error as exc:
        raise LogError(f"{name}: not a readable CSV file ({exc})") from None
    entries.sort(key=lambda e: (e.started, e.line))
    return entries


def _entry(name: str, line: int, row: list[str], where: dict) -> LogEntry | None:
    def cell(key: str) -> str:
        index = where[key]
        return row[index].strip() if index is not None and index < len(row) else ""

    if not any(value.strip() for value in row):
        return None  # a blank row
    at = f"{name} line {line}"
    node = cell("node")
    if not node:
        raise LogError(f"{at}: nodenum is empty")
    started_text = cell("started")
    if not started_text:
        raise LogError(f"{at}: Prob Started is empty")
    try:
        started = parse_time(started_text)
    except ValueError as exc:
        raise LogError(f"{at}: Prob Started: {exc} (got {started_text!r})") from None
    fixed_text = cell("fixed")
    if fixed_text:
        try:
            fixed = parse_time(fixed_text)
        except ValueError as exc:
            raise LogError(f"{at}: Prob Fixed: {exc} (got {fixed_text!r})") from None
        if fixed < started:
            raise LogError(
                f"{at}: Prob Fixed ({fixed_text}) is before Prob Started ({started_text})"
            )
        repair_s = (fixed - started).total_seconds()
    else:
        down_text = cell("down")
        if not down_text:
            raise LogError(f"{at}: no repair time (Prob Fixed and Down Time are empty)")
        try:
            minutes = float(down_text)
        except ValueError:
            minutes = math.nan
        if not math.isfinite(minutes) or minutes < 0:
            raise LogError(f"{at}: Down Time must be a number of minutes >= 0 (got {down_text!r})")
        repair_s = minutes * 60.0
    return LogEntry(line, cell("system"), node_id(node), started, repair_s)
