"""Progress on standard error: bars on a terminal, plain lines otherwise, nothing if quiet."""

import io

from ftsim.experiments.progress import Progress, Stage


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _report(stream, quiet=False) -> str:
    stages = [Stage("timing", 3, "simulations"), Stage("co-simulation", 2, "replications", True)]
    progress = Progress(stages, quiet, stream)
    for _ in range(3):
        progress("timing")
    progress("timing", 5)  # beyond the total (a sweep adding replications): not shown
    progress("co-simulation")
    progress("co-simulation")
    progress.close()
    return stream.getvalue()


def test_a_log_gets_a_line_per_finished_stage_and_per_slow_step():
    assert _report(io.StringIO()).splitlines() == [
        "timing: 3/3 simulations",
        "co-simulation: 1/2 replications",
        "co-simulation: 2/2 replications",
    ]


def test_a_terminal_gets_a_bar_per_stage():
    text = _report(Terminal())
    assert "timing:" in text and "co-simulation:" in text and "\r" in text
    assert "3/3 simulations\n" not in text


def test_quiet_prints_nothing():
    assert _report(io.StringIO(), quiet=True) == ""
    assert _report(Terminal(), quiet=True) == ""


def test_stages_without_work_are_left_out():
    stream = io.StringIO()
    progress = Progress(
        [Stage("timing", 1, "simulations"), Stage("co-simulation", 0, "x")], False, stream
    )
    progress("timing")
    assert stream.getvalue() == "timing: 1/1 simulations\n"
    assert "co-simulation" not in progress.stages
