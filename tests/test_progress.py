"""Progress on standard error: a bar on a terminal, a line per 5% of the tasks (and per
trained task, at most one per 10 s) with an ETA otherwise, nothing if quiet."""

import io

import pytest

from ftsim.cli import main
from ftsim.experiments.progress import Progress, clock_time
from tests.conftest import SCENARIOS


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    """A clock that advances 10 s per task (read once per progress line)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _report(stream, tasks=40, quiet=False, trained=(), seconds=10):
    clock = Clock()
    progress = Progress("sweep", quiet, stream, clock)
    progress.planned(tasks, 10 * tasks, 0)
    for task in range(tasks):
        clock.now += seconds
        progress.finished(10, task in trained)
    progress.close()
    return stream.getvalue()


def test_a_log_gets_a_line_per_5_percent_of_the_tasks_with_an_eta():
    lines = _report(io.StringIO()).splitlines()
    assert len(lines) == 20
    assert lines[0] == ("sweep: 2/40 tasks (5%), 20/400 replications, 0:00:20 elapsed, ETA 0:06:20")
    assert lines[-1] == (
        "sweep: 40/40 tasks (100%), 400/400 replications, 0:06:40 elapsed, ETA 0:00:00"
    )


def test_few_tasks_get_a_line_each_and_trained_tasks_always_get_one():
    assert len(_report(io.StringIO(), tasks=3).splitlines()) == 3
    lines = _report(io.StringIO(), tasks=400, trained={0, 1, 2}).splitlines()
    assert len(lines) == 20 + 3
    assert lines[0].startswith("sweep: 1/400 tasks (0%)")


def test_short_trained_tasks_get_a_line_per_ten_seconds_at_most():
    """120 trained tasks of 1 s each (a run of 120 short trained replications): a line per
    5% (24) plus one per 10 s between them, not 120."""
    lines = _report(io.StringIO(), tasks=120, trained=set(range(120)), seconds=1).splitlines()
    assert 20 <= len(lines) <= 20 + 12
    assert lines[-1].startswith("sweep: 120/120 tasks (100%)")


def test_reused_replications_count_as_done_but_not_in_the_eta():
    stream, clock = io.StringIO(), Clock()
    progress = Progress("sweep", False, stream, clock)
    progress.planned(2, 20, 80)  # 80 replications found in a resumed folder
    clock.now = 60
    progress.finished(10)
    assert stream.getvalue() == (
        "sweep: 1/2 tasks (50%), 90/100 replications (80 reused), 0:01:00 elapsed, ETA 0:01:00\n"
    )


def test_a_terminal_gets_a_bar_and_quiet_prints_nothing():
    text = _report(Terminal())
    assert "sweep:" in text and "\r" in text and "ETA" not in text
    assert _report(io.StringIO(), quiet=True) == ""
    assert _report(Terminal(), quiet=True) == ""


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00:00"), (3725.4, "1:02:05")])
def test_clock_time(seconds, text):
    assert clock_time(seconds) == text
    assert clock_time(float("nan")) == "?"


def test_sweep_prints_progress_lines_to_a_log_and_none_with_q(tmp_path, capsys):
    args = ["sweep", str(SCENARIOS / "smoke.yaml"), "--reps", "2", "--jobs", "1"]
    args += ["--grid", "policies.*.interval=10 min,1 h"]
    assert main([*args, "-o", str(tmp_path / "a")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "ETA" in line]
    assert len(lines) == 6  # 2 points × 3 policies, one task each
    assert lines[-1].startswith("sweep: 6/6 tasks (100%), 12/12 replications")
    assert main([*args, "-q", "-o", str(tmp_path / "b")]) == 0
    assert capsys.readouterr().err == ""


def test_the_eta_counts_trained_replications_alone_while_some_remain():
    """4 trained replications of 10 s each, then 100 timing ones of 0.02 s: counting every
    replication alike, the first line would say 10 s × 103 = 0:17:10 is left; counting the
    trained ones while they remain, 30 s; then the timing ones since the last trained one."""
    stream, clock = io.StringIO(), Clock()
    progress = Progress("run", False, stream, clock)
    progress.planned(14, 104, 0, trained=4)
    for _ in range(4):
        clock.now += 10
        progress.finished(1, trained=True)
    for _ in range(10):
        clock.now += 0.2
        progress.finished(10)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "run: 1/14 tasks (7%), 1/104 replications, 0:00:10 elapsed, ETA 0:00:30"
    assert lines[3].endswith("0:00:40 elapsed, ETA ?")  # no timing replication timed yet
    assert lines[4].endswith("ETA 0:00:02")  # 10 in 0.2 s, 90 left
    assert lines[-1].endswith("0:00:42 elapsed, ETA 0:00:00")
