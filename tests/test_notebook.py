"""docs/examples/study.ipynb runs from top to bottom (skipped without nbclient): the study of
issue 21 (own scenario, interval sweep of full/CPR/ECRM at three failure rates, the faceted
figures as written, the advice under a PLS limit)."""

import os

import pytest

from tests.conftest import ROOT

NOTEBOOK = ROOT / "docs" / "examples" / "study.ipynb"


def test_the_example_notebook_runs(monkeypatch, tmp_path):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebook's results folders go here
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert not [o for o in outputs if o.output_type == "error"]
    assert "sweep: 45/45 tasks (100%)" in text  # progress lines reach the notebook
    # CPR's fall-backs are notices the notebook can read
    assert "cpr at point 0 (policies.*.interval=15 min, failures.0.job_mtbf=4 h): ran full" in text
    assert "overhead_vs_interval: " in text and "breakdown: " in text
    assert "ftsim: warning" not in text  # e.g. overlapping labels on a figure
    assert "\nrecommendation: ecrm with interval " in text  # the advice, within the PLS limit
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 3  # the interval figure, the breakdown, the frontier: as written
