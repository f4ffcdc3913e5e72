"""The ``failure_log`` source: a failure log in LANL's format replayed onto the cluster.

Every log here is synthesized in the layout of LANL's failure data (no real log is
committed): the full LANL header, rows in any order, times as ``m/d/yyyy h:mm``.
"""

import csv
import itertools

import pytest
import yaml

from ftsim.cli import main
from ftsim.experiments.runner import simulate
from ftsim.scenario.loader import ScenarioError, load_scenario, read_yaml
from ftsim.sim.failure_log import read_failure_log
from ftsim.sim.failures import failure_sequence, job_mtbf_s, source_notes
from ftsim.sim.rng import Purpose, stream
from tests.conftest import SCENARIOS

LANL_HEADER = [
    *("System", "machine type", "nodes", "procstot", "procsinnode", "nodenum", "nodenumz"),
    *("node install", "node prod", "node decom", "fru type", "mem", "cputype", "memtype"),
    *("num intercon", "purpose", "Prob Started", "Prob Fixed", "Down Time", "Facilities"),
    *("Hardware", "Human Error", "Network", "Undetermined", "Software", "Same Event"),
]


def lanl_log(path, rows, header=LANL_HEADER):
    """Write ``rows`` (dicts of the columns that matter) as a LANL-format CSV."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, header, restval="", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({"System": 20, "machine type": "cluster", "Same Event": "No", **row})


def outage(node, started, fixed=None, down=None, system=20):
    row = {"System": system, "nodenum": node, "nodenumz": node, "Prob Started": started}
    if fixed is not None:
        row["Prob Fixed"] = fixed
    if down is not None:
        row["Down Time"] = down
    return row


# smoke: 4 trainers (nodes 0-3) then 4 embedding PS (nodes 4-7)
ROWS = [
    outage(13, "6/21/2005 12:54", "6/21/2005 13:30", 36),  # 13 mod 8 = 5: emb_ps1
    outage(2, "6/21/2005 10:54", "6/21/2005 11:00", 6),  # the first failure: t = 0
    outage(7, "6/21/2005 11:40", "6/21/2005 12:10", 30),
    outage(13, "6/21/2005 13:50", down=20),  # no Prob Fixed: Down Time in minutes
]


def log_scenario(tmp_path, rows=ROWS, **source):
    lanl_log(tmp_path / "log.csv", rows)
    data = read_yaml(SCENARIOS / "smoke.yaml")
    data["failures"] = [{"kind": "failure_log", "path": "log.csv", **source}]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    return load_scenario(tmp_path / "s.yaml")


def draw(s, rep=0):
    streams = [stream(s.run.seed, rep, Purpose.FAILURES, i) for i in range(len(s.failures))]
    return list(itertools.islice(failure_sequence(s.failures, streams, s), 1000))


def test_the_log_is_replayed_in_time_order_from_its_first_failure(tmp_path):
    s = log_scenario(tmp_path)
    got = [(f.time_s, f.nodes, f.reschedule_s, f.source) for f in draw(s)]
    assert got == [
        (0.0, (2,), 360.0, "failure_log"),
        (2760.0, (7,), 1800.0, "failure_log"),
        (7200.0, (5,), 2160.0, "failure_log"),
        (10560.0, (5,), 1200.0, "failure_log"),
    ]
    assert draw(s, rep=3) == draw(s)  # a log is the same in every replication
    assert job_mtbf_s(s) == pytest.approx(s.job.work_s / 4)  # 4 failures in the 4 h run


def test_the_engine_replaces_a_node_after_its_logged_repair_time(tmp_path):
    logged = simulate(log_scenario(tmp_path), 0, 0)
    assert [f.reschedule_s for f in logged.failures_seen] == [360.0, 1800.0, 2160.0, 1200.0]
    first = [p for p in logged.timeline if p.category == "reschedule"][0]
    assert (first.start_s, first.end_s) == (0.0, 360.0)
    drawn = simulate(log_scenario(tmp_path, reschedule="cluster"), 0, 0)
    reschedule = drawn.scenario.cluster.reschedule  # exponential, mean 2 min
    rng = stream(drawn.scenario.run.seed, 0, Purpose.RESCHEDULE)
    expected = [reschedule.sample(rng) for _ in drawn.failures_seen]
    assert [f.reschedule_s for f in drawn.failures_seen] == expected


def test_start_offsets_the_log_and_skips_earlier_rows(tmp_path, capsys):
    s = log_scenario(tmp_path, start="6/21/2005 11:30")
    assert [(f.time_s, f.nodes) for f in draw(s)] == [(600.0, (7,)), (5040.0, (5,)), (8400.0, (5,))]
    assert source_notes(s) == [
        "failures.0: failure log log.csv: 4 rows, 3 replayed; skipped: 1 row before start; "
        "t = 0 is 2005-06-21 11:30"
    ]
    assert main(["show", "config", str(tmp_path / "s.yaml")]) == 0
    out, err = capsys.readouterr()
    assert "start: '2005-06-21T11:30:00'" in out and "1 row before start" in err


@pytest.mark.parametrize(
    ("source", "nodes", "skipped"),
    [
        ({}, [(2,), (7,), (5,), (5,)], ""),  # modulo 8 over every node
        ({"role": "emb_ps"}, [(6,), (7,), (5,), (5,)], ""),  # 2, 7, 13 mod 4 on PS 4-7
        ({"mapping": "first"}, [(2,), (7,)], "skipped: 2 rows of 1 log node mapped to no node"),
        ({"mapping": "first", "role": "trainer"}, [(2,)], "3 rows of 2 log nodes mapped"),
        ({"nodes": {13: "trainer0", "7": "emb_ps3"}}, [(7,), (0,), (0,)], "1 row of 1 log node"),
    ],
)
def test_log_nodes_map_onto_the_cluster_by_a_rule_or_an_explicit_map(
    tmp_path, source, nodes, skipped
):
    s = log_scenario(tmp_path, **source)
    assert [f.nodes for f in draw(s)] == nodes
    assert skipped in source_notes(s)[0]


def test_one_system_of_a_log_with_several(tmp_path):
    rows = [*ROWS, outage(1, "6/21/2005 09:00", "6/21/2005 10:00", system=3)]
    with pytest.raises(ScenarioError, match=r"failures\.0\.system: the log holds systems 3, 20"):
        log_scenario(tmp_path, rows=rows)
    s = log_scenario(tmp_path, rows=rows, system=20)
    assert len(draw(s)) == 4 and "1 row of other systems" in source_notes(s)[0]
    assert [f.nodes for f in draw(log_scenario(tmp_path, rows=rows, system=3))] == [(1,)]


def test_a_log_of_a_header_alone_is_not_said_to_lack_its_system_column(tmp_path):
    """A LANL header without rows, with ``system: 20``: the error said "no row of system 20
    (the log has no System column)", which it has; it is the log without rows, a warning."""
    from ftsim.scenario.notices import ScenarioWarning

    with pytest.warns(ScenarioWarning, match="the log has no rows"):
        log_scenario(tmp_path, rows=[], system=20)


def test_reads_lanl_header_variants_and_only_the_columns_it_needs(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text(
        "nodenum,Prob Started (mm/dd/yy hh:mm),PROB  FIXED (mm/dd/yy hh:mm)\n"
        "004,6/21/05 10:54,6/21/05 11:04:30\n\n"
    )
    [entry] = read_failure_log(path)
    assert (entry.node, entry.repair_s, entry.system) == ("4", 630.0, "")
    path.write_text("nodenum,Prob Started,Down Time\n4,6/21/05 10:54,10.5,,\n")  # empty extras
    assert read_failure_log(path)[0].repair_s == 630.0


def _error(tmp_path, capsys, rows=None, text=None, **source):
    """Exit status and standard error of ``run`` on smoke with this failure log."""
    if text is not None:
        (tmp_path / "log.csv").write_text(text)
    else:
        lanl_log(tmp_path / "log.csv", rows)
    data = read_yaml(SCENARIOS / "smoke.yaml")
    data["failures"] = [{"kind": "failure_log", "path": "log.csv", **source}]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    status = main(["run", str(tmp_path / "s.yaml"), "-q", "-o", str(tmp_path / "out")])
    return status, capsys.readouterr().err


BAD_LOGS = [
    ("missing node column", {"text": "System,Prob Started,Prob Fixed\n20,1/1/2005 1:00,\n"},
     "path", "log.csv line 1: missing column nodenum (LANL failure-data format"),
    ("no repair column", {"text": "nodenum,Prob Started\n1,1/1/2005 1:00\n"},
     "path", "missing column Prob Fixed (or Down Time)"),
    ("empty file", {"text": ""}, "path", "log.csv line 1: the file is empty"),
    ("unparseable start", {"rows": [outage(1, "21.6.2005 10:54", down=5)]},
     "path", "log.csv line 2, column 17 (Prob Started): expected a time such as '6/21/2005"),
    ("unparseable fix", {"rows": [outage(1, "6/21/2005 10:54", "later")]},
     "path", "line 2, column 18 (Prob Fixed): expected a time"),
    ("NaN down time", {"rows": [outage(1, "6/21/2005 10:54", down="NaN")]},
     "path", "line 2, column 19 (Down Time): Down Time must be a number of minutes >= 0 (got"),
    ("negative down time", {"rows": [outage(1, "6/21/2005 10:54", down=-3)]},
     "path", "Down Time must be a number of minutes >= 0 (got '-3')"),
    ("no repair time", {"rows": [outage(1, "6/21/2005 10:54")]},
     "path", "line 2, column 19 (Down Time): no repair time (Prob Fixed and Down Time are"),
    ("fixed before started", {"rows": [*ROWS, outage(1, "6/21/2005 10:54", "6/21/2005 9:54")]},
     "path", "line 6, column 18 (Prob Fixed): Prob Fixed (6/21/2005 9:54) is before Prob"),
    ("ragged row", {"text": "nodenum,Prob Started,Down Time\n2,6/21/2005 10:54,6\n"
                            "3,Jun 21, 2005 11:00,5\n"},
     "path", "log.csv line 3: 4 fields, but the header has 3 (an unquoted comma shifts the "
     "columns; got '5' past the last)"),
    ("empty node", {"rows": [outage("", "6/21/2005 10:54", down=5)]},
     "path", "line 2, column 6 (nodenum): nodenum is empty"),
    ("bad start", {"rows": ROWS, "start": "soon"}, "start", "expected a time such as"),
    ("unknown system", {"rows": ROWS, "system": 7}, "system", "no row of system 7"),
    ("system of a log without systems",
     {"text": "nodenum,Prob Started,Down Time\n2,6/21/2005 10:54,6\n", "system": 5},
     "system", "no row of system 5 (the log has no System column)"),
    ("bad explicit node", {"rows": ROWS, "nodes": {2: "emb_ps9"}},
     "nodes.2", "'emb_ps9' does not exist"),
    ("bad mapping", {"rows": ROWS, "mapping": "random"}, "mapping", "'modulo' or 'first'"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "case", "where", "words"), BAD_LOGS, ids=[c[0] for c in BAD_LOGS])
def test_an_invalid_log_is_a_located_scenario_error(tmp_path, capsys, name, case, where, words):
    status, err = _error(tmp_path, capsys, **case)
    assert status == 2
    assert err.startswith(f"{tmp_path / 's.yaml'}: failures.0.{where}: "), err
    assert words in err and "Traceback" not in err


def test_a_missing_log_is_a_located_error(tmp_path, capsys):
    data = read_yaml(SCENARIOS / "smoke.yaml")
    data["failures"] = [{"kind": "failure_log", "path": "nope.csv"}]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    assert main(["run", str(tmp_path / "s.yaml"), "-q", "-o", str(tmp_path / "out")]) == 2
    assert "failures.0.path: failure log not found: " in capsys.readouterr().err


def test_a_window_without_failures_runs_with_a_warning(tmp_path, capsys):
    """A quiet window of a log is a valid scenario with zero failures (a sweep over windows
    of a real log must not stop at one)."""
    status, err = _error(tmp_path, capsys, rows=ROWS, start="1/1/2006 0:00")
    assert status == 0, err
    assert err == (
        f"{tmp_path / 's.yaml'}: failures.0.path: warning: no failure to replay: 4 rows, "
        "0 replayed; skipped: 4 rows before start\n"
        "failures.0: failure log log.csv: 4 rows, 0 replayed; skipped: 4 rows before start; "
        "t = 0 is 2006-01-01 00:00\n"
    )


def test_every_policy_recovers_from_a_failure_at_time_zero(tmp_path):
    """The first failure of a log is t = 0 by default: before any progress or checkpoint."""
    lanl_log(tmp_path / "log.csv", ROWS)
    data = read_yaml(SCENARIOS / "prod50h.yaml")
    data["failures"] = [{"kind": "failure_log", "path": "log.csv", "role": "emb_ps"}]
    data.pop("trainer")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    s = load_scenario(tmp_path / "p.yaml")
    for index in range(len(s.policies)):
        sim = simulate(s, index, 0)
        assert sim.completed and sim.failures_seen[0].time_s == 0.0
        assert len(sim.failures_seen) == 4


def test_a_log_edited_after_a_run_is_another_configuration_and_named_as_the_cause(tmp_path, capsys):
    """A new user appended a row to the log a run replayed: the run folder's scenario.yaml
    ran to other results with nothing said, and trace blamed 'another version of ftsim'.
    The log's SHA-256 is now in the manifest and the config hash."""
    import json
    import shutil

    from ftsim.cli import main

    work = tmp_path / "study"
    shutil.copytree(SCENARIOS, work)
    scenario = work / "failure_log_example.yaml"
    log = work / "data" / "synthetic_lanl_failures.csv"
    out = tmp_path / "run"
    args = ["run", str(scenario), "--no-trainer", "--reps", "2", "-q", "-o", str(out)]
    assert main(args) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["inputs"]) == [str(log)]
    lines = log.read_text().splitlines()
    log.write_text("\n".join([*lines, lines[-1]]) + "\n")  # one more row
    capsys.readouterr()
    assert main(args) == 2  # another configuration: not replaced without --force
    assert "holds the results of another run" in capsys.readouterr().err
    assert main(["trace", str(out), "-o", str(tmp_path / "t.json")]) == 0
    err = capsys.readouterr().err
    assert f"{log} changed after the run (its SHA-256 is now " in err
    assert "another version of ftsim" not in err


def test_a_text_node_id_never_takes_an_integer_ids_number(tmp_path):
    """A new user's log had node ``1`` and ``login-a``: ranked among all the ids, login-a
    took number 1 and both failed trainer1. Text ids are numbered on from the largest
    integer id (here 13): login-a is 14 (14 mod 8 = 6), n2 15 (7)."""
    rows = [
        outage(1, "6/21/2005 10:00", "6/21/2005 10:30"),
        outage("login-a", "6/21/2005 11:00", "6/21/2005 11:30"),
        outage(13, "6/21/2005 12:00", "6/21/2005 12:30"),
        outage("n2", "6/21/2005 13:00", "6/21/2005 13:30"),
    ]
    assert [f.nodes for f in draw(log_scenario(tmp_path, rows))] == [(1,), (6,), (5,), (7,)]
    only_text = [outage("b", "6/21/2005 10:00", down=5), outage("a", "6/21/2005 11:00", down=5)]
    assert [f.nodes for f in draw(log_scenario(tmp_path, only_text))] == [(1,), (0,)]


def test_a_row_that_repeats_an_earlier_one_is_skipped_and_said(tmp_path):
    """The same outage recorded twice doubled a failure and shortened full checkpointing's
    Daly interval; so did the same node and start with another repair time (a node fails
    once at an instant): the first row is kept, the others are said."""
    rows = [*ROWS, ROWS[0], outage(13, "6/21/2005 12:54", "6/21/2005 13:40")]
    s = log_scenario(tmp_path, rows)
    assert [f.time_s for f in draw(s)] == [0.0, 2760.0, 7200.0, 10560.0]
    assert [f.reschedule_s for f in draw(s)][2] == 2160.0  # line 2's repair, the first
    assert (
        "skipped: 2 rows repeating an earlier row's node and start (line 6 repeats line 2, "
        "line 7 repeats line 2; the first is kept)" in source_notes(s)[0]
    )


def test_a_nodes_key_the_log_does_not_have_is_named(tmp_path):
    s = log_scenario(tmp_path, nodes={13: "trainer0", "n99": "emb_ps1", 98: "emb_ps2"})
    assert source_notes(s)[0].endswith(
        "skipped: 2 rows of 2 log nodes mapped to no node; nodes: the log has no nodes 98, n99; "
        "t = 0 is 2005-06-21 12:54"
    )
    other = [*ROWS, outage(4, "6/21/2005 09:00", "6/21/2005 10:00", system=3)]
    s = log_scenario(tmp_path, other, system=20, nodes={13: "trainer0", 4: "emb_ps2"})
    assert "; nodes: the log has no node 4 in system 20;" in source_notes(s)[0]  # only in 3
