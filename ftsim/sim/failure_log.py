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
two-digit year, or be ISO 8601 (``2005-06-21 10:54``). ISO times may carry a time zone
(``2005-06-21T10:54+02:00``, ``...Z``): they are converted to UTC; a log mixing times with
and without a zone is refused, since their order is unknown. A node id of decimal digits
(in any script) is an integer; any other id (``n17``, ``²``) is text. Rows may be in any
order; a log with a header and no rows is valid (no outages). Every error names the file,
line and column.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ftsim.scenario.files import TextFileError, read_text

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
    """An invalid failure log; the message names the file, and the line and column (number
    and header name) of the value at fault."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One node outage of a failure log."""

    line: int
    system: str
    node: str
    """The log's node id (integers without leading zeros)."""
    started: datetime
    """When the failure started: naive, in UTC when the log's times have a time zone."""
    repair_s: float
    """Seconds from the failure to the repair (Prob Fixed − Prob Started, or Down Time)."""
    zoned: bool = False
    """Whether the log's times have a time zone (then ``started`` is in UTC)."""


def _key(header: str) -> str:
    """A header name for matching: lower case, single spaces, no parenthesised suffix."""
    header = re.sub(r"\(.*?\)", " ", header.replace("\ufeff", ""))
    return " ".join(header.lower().split())


def is_integer_id(text: str) -> bool:
    """Whether a node id is an integer: decimal digits of any script (``17``, ``١٧``, ``１７``);
    a digit that is not decimal (``²``, ``①``) makes it a text id."""
    return text.isdecimal()


def node_id(text: str) -> str:
    """A log node id as compared: stripped; an integer in ASCII digits without leading zeros."""
    text = str(text).strip()
    return str(int(text)) if is_integer_id(text) else text


def id_order(node: str) -> tuple:
    """Sort key of node ids: integers numerically, before any other text."""
    return (0, int(node), "") if is_integer_id(node) else (1, 0, node)


def parse_time(text: str) -> datetime:
    """A LANL time (``6/21/2005 10:54``) or ISO 8601, with or without a time zone
    (``2005-06-21T10:54+02:00``); ValueError if neither."""
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


def as_utc(time: datetime) -> datetime:
    """A zone-aware time as the naive time in UTC; a naive time unchanged."""
    if time.tzinfo is None:
        return time
    return time.astimezone(UTC).replace(tzinfo=None)


def read_failure_log(path: Path) -> list[LogEntry]:
    """The outages of a failure log, sorted by start (then line); LogError naming the file,
    line and column of the first problem.

    Times with a time zone (``2005-06-21T10:54+02:00``) are converted to UTC; a log that
    mixes times with and without a zone is refused (their order is unknown). A log with a
    header and no rows has no outages.
    """
    name = path.name
    try:
        text = read_text(path)
    except TextFileError as exc:
        raise LogError(f"{name}: {exc}") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise LogError(f"{name} line 1: the file is empty (expected a header line)")
        found = {_key(h): i for i, h in reversed(list(enumerate(header)))}
        where = {k: found.get(_key(v)) for k, v in COLUMNS.items()}
        missing = [COLUMNS[k] for k in ("node", "started") if where[k] is None]
        if where["fixed"] is None and where["down"] is None:
            missing.append(f"{COLUMNS['fixed']} (or {COLUMNS['down']})")
        if missing:
            got = ", ".join(h.strip() for h in header if h.strip()) or "nothing"
            raise LogError(
                f"{name} line 1: missing column {', '.join(missing)} (LANL failure-data format: "
                f"nodenum, Prob Started, Prob Fixed or Down Time, optional System; got {got})"
            )
        row = _Row(name, header, where)
        entries = []
        line = reader.line_num + 1
        for cells in reader:
            entry = row.entry(line, cells)
            if entry is not None:
                entries.append(entry)
            line = reader.line_num + 1
    except csv.Error as exc:
        raise LogError(f"{name} line {reader.line_num}: not a readable CSV file ({exc})") from None
    entries.sort(key=lambda e: (e.started, e.line))
    return entries


class _Row:
    """Reads the rows of one log: the cells that matter, located by line and column."""

    def __init__(self, name: str, header: list[str], where: dict[str, int | None]):
        self.name = name
        self.header = header
        self.where = where
        self.zone: tuple[bool, str] | None = None
        """Whether the log's first time has a time zone, and where it is."""

    def at(self, line: int, key: str) -> str:
        """``log.csv line 3, column 17 (Prob Started)``."""
        index = self.where[key]
        return f"{self.name} line {line}, column {index + 1} ({self.header[index].strip()})"

    def time(self, line: int, key: str, text: str) -> datetime:
        """The time ``text`` of column ``key`` (naive; UTC if zoned); LogError if unreadable
        or if it has a time zone and the log's first time has none, or the reverse."""
        try:
            time = parse_time(text)
        except ValueError as exc:
            raise LogError(f"{self.at(line, key)}: {exc} (got {text!r})") from None
        zoned = time.tzinfo is not None
        if self.zone is None:
            self.zone = (zoned, f"line {line}, column {self.where[key] + 1}")
        elif self.zone[0] != zoned:
            has, first = ("a", "none") if zoned else ("no", "one")
            raise LogError(
                f"{self.at(line, key)}: {text!r} has {has} time zone but the log's first time "
                f"({self.zone[1]}) has {first}: give every time with a zone or none"
            )
        return as_utc(time)

    def entry(self, line: int, row: list[str]) -> LogEntry | None:
        """The outage of one row (None for a blank row)."""

        def cell(key: str) -> str:
            index = self.where[key]
            return row[index].strip() if index is not None and index < len(row) else ""

        if not any(value.strip() for value in row):
            return None
        extra = [value for value in row[len(self.header) :] if value.strip()]
        if extra:
            raise LogError(
                f"{self.name} line {line}: {len(row)} fields, but the header has "
                f"{len(self.header)} (an unquoted comma shifts the columns; got {extra[0]!r} "
                "past the last)"
            )
        node = cell("node")
        if not node:
            raise LogError(f"{self.at(line, 'node')}: nodenum is empty")
        started_text = cell("started")
        if not started_text:
            raise LogError(f"{self.at(line, 'started')}: Prob Started is empty")
        started = self.time(line, "started", started_text)
        fixed_text = cell("fixed")
        if fixed_text:
            fixed = self.time(line, "fixed", fixed_text)
            if fixed < started:
                raise LogError(
                    f"{self.at(line, 'fixed')}: Prob Fixed ({fixed_text}) is before "
                    f"Prob Started ({started_text})"
                )
            repair_s = (fixed - started).total_seconds()
        else:
            down_text = cell("down")
            if not down_text:
                key = "fixed" if self.where["down"] is None else "down"
                raise LogError(
                    f"{self.at(line, key)}: no repair time (Prob Fixed and Down Time are empty)"
                )
            try:
                minutes = float(down_text)
            except ValueError:
                minutes = math.nan
            if not math.isfinite(minutes) or minutes < 0:
                raise LogError(
                    f"{self.at(line, 'down')}: Down Time must be a number of minutes >= 0 "
                    f"(got {down_text!r})"
                )
            repair_s = minutes * 60.0
        zoned = bool(self.zone and self.zone[0])
        return LogEntry(line, cell("system"), node_id(node), started, repair_s, zoned)
