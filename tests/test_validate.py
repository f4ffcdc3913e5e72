"""``python -m ftsim validate``: the report, its figures and the exit status (quick mode)."""

import re

import pytest

import ftsim.validation.suite
from ftsim.cli import main
from ftsim.validation.suite import Check, check

PNG = b"\x89PNG\r\n\x1a\n"
EXACT = ("daly_example", "accounting_identity", "exact_recovery")
"""Checks with no sampling error: they may not fail even in quick mode."""


def _rows(text: str) -> dict[str, str]:
    """Table rows of the report by check name."""
    return {
        m.group(1): line for line in text.splitlines() if (m := re.match(r"^\| `([^`]+)` \|", line))
    }


def test_quick_run_writes_the_table_sections_and_figures(tmp_path, capsys):
    report = tmp_path / "docs" / "validation.md"
    status = main(["validate", "--quick", "-o", str(report)])
    text = report.read_text()
    rows = _rows(text)
    assert list(rows) == [
        "daly_example",
        "daly_wall_time",
        "daly_optimum",
        "kokolis_ettr.128",
        "kokolis_ettr.1024",
        "kokolis_ettr.4096",
        "kokolis_ettr.16384",
        "accounting_identity",
        "exact_recovery",
        "exact_recovery_ecrm_swift",
        "pls_prediction.1",
        "pls_prediction.3",
        "cpr_prod50h.full",
        "cpr_prod50h.cpr_mfu",
        "cpr_prod50h.cpr_ssu",
    ]
    # validation first, calibration apart, each with its own table
    validation, calibration = text.split("\n## Validation\n")[1].split("\n## Calibration\n")
    assert "`pls_prediction.3`" in validation and "`cpr_prod50h" not in validation
    assert "`cpr_prod50h.full`" in calibration.split("\n### ")[0]
    assert "window holds for storage bandwidth" in rows["cpr_prod50h.full"]
    assert all(r.endswith(("| PASS |", "| **FAIL** |")) for r in rows.values())
    for name in EXACT:
        assert rows[name].endswith("| PASS |"), rows[name]
    failed = [name for name, row in rows.items() if row.endswith("**FAIL** |")]
    assert status == (1 if failed else 0)
    assert "quick mode" in text and "ftsim 0." in text
    assert f"**{len(rows) - len(failed)} of {len(rows)} checks pass.**" in text
    # One section per check function, each figure linked relative to the report, PNG only.
    sections = re.findall(r"^### \d+\. .* \((validation|calibration)\)$", text, flags=re.M)
    assert len(sections) == len(ftsim.validation.suite.REGISTRY)
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert links == [f"validation/{name}.png" for name in (
        "daly_wall_time", "kokolis_ettr", "accounting_identity", "pls_prediction", "cpr_prod50h"
    )]  # fmt: skip
    for link in links:
        assert (report.parent / link).read_bytes()[:8] == PNG
    assert sorted(p.suffix for p in (report.parent / "validation").iterdir()) == [".png"] * 5
    out = capsys.readouterr().out
    assert "PASS  daly_example" in out and f"report: {report}" in out


def test_a_failing_or_crashing_check_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(ftsim.validation.suite, "REGISTRY", {})

    @check("always", "A check that passes")
    def always(ctx):
        return Check("always", "true", "1", "1", "0", True, "logic")

    @check("never", "A check that fails")
    def never(ctx):
        return [Check("never", "false", "0", "1", "0", False, "logic")]

    @check("crashes", "A check that raises")
    def crashes(ctx):
        raise RuntimeError("boom")

    with pytest.raises(ValueError, match="registered twice"):
        check("never", "again")(never)
    report = tmp_path / "v.md"
    assert main(["validate", "-o", str(report)]) == 1
    rows = _rows(report.read_text())
    assert rows["always"].endswith("| PASS |")
    assert rows["never"].endswith("| **FAIL** |")
    assert "error: RuntimeError: boom" in rows["crashes"] and rows["crashes"].endswith("FAIL** |")
    assert "**1 of 3 checks pass.**" in report.read_text()


def test_all_passing_checks_exit_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(ftsim.validation.suite, "REGISTRY", {})
    check("ok", "fine")(lambda ctx: Check("ok", "c", "m", "e", "t", True, "s"))
    assert main(["validate", "-o", str(tmp_path / "v.md")]) == 0


def _check_with_figure(ctx):
    """A passing check that writes a figure, as the real ones do."""
    ctx.figures.mkdir(parents=True, exist_ok=True)
    (ctx.figures / "fig.png").write_bytes(PNG)
    return Check("drawn", "c", "m", "e", "t", True, "s", figure=ctx.figures / "fig.png")


def _figure_links_resolve(report):
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", report.read_text())
    return links and all((report.parent / link).read_bytes() == PNG for link in links)


def test_the_report_goes_under_results_and_docs_change_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(ftsim.validation.suite, "REGISTRY", {})
    check("drawn", "A check with a figure")(_check_with_figure)
    docs = tmp_path / "checkout" / "docs"
    docs.mkdir(parents=True)
    monkeypatch.setattr(ftsim.validation.suite, "docs_report", lambda: docs / "validation.md")
    monkeypatch.chdir(tmp_path)
    assert main(["validate"]) == 0
    assert _figure_links_resolve(tmp_path / "results" / "validation" / "validation.md")
    assert not any(docs.iterdir())
    assert main(["validate", "--update-docs"]) == 0
    assert _figure_links_resolve(docs / "validation.md")


def test_an_existing_file_that_is_not_a_report_is_replaced_only_with_force(tmp_path, monkeypatch):
    monkeypatch.setattr(ftsim.validation.suite, "REGISTRY", {})
    check("ok", "fine")(lambda ctx: Check("ok", "c", "m", "e", "t", True, "s"))
    notes = tmp_path / "notes.md"
    notes.write_text("# My notes\n")
    assert main(["validate", "-o", str(notes)]) == 2
    assert notes.read_text() == "# My notes\n"
    assert main(["validate", "-o", str(notes), "--force"]) == 0
    assert notes.read_text().startswith("# Validation and calibration\n")
    assert main(["validate", "-o", str(notes)]) == 0  # an earlier report is replaced


def test_the_checks_runs_have_the_rows_of_plain_runs_and_record_nothing_else():
    """``finished_runs`` (what the Daly, Kokolis and PLS checks simulate) gives the rows of
    ``prepared.replicate(rep).run()``, replication by replication, without timelines or
    model events; an off-by-one in its replications would fail here (rows differ by rep)."""
    from ftsim.experiments.prepare import prepare
    from ftsim.scenario.loader import load_scenario
    from ftsim.validation import finished_runs
    from ftsim.validation.daly import DALY_SCENARIO

    prepared = prepare(load_scenario(DALY_SCENARIO), 0)
    runs = finished_runs(prepared, 4)
    plain = [prepared.replicate(rep).run() for rep in range(4)]
    assert [r.row() for r in runs] == [p.row() for p in plain]
    assert len({r.row()["wall_h"] for r in runs}) > 1
    assert all(r.timeline is None and r.model_events is None for r in runs)
