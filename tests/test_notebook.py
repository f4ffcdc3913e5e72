"""docs/examples/study.ipynb runs from top to bottom (skipped without nbclient)."""

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
    assert "cheapest interval swept:" in text
    assert "sweep: 5/5 tasks (100%)" in text  # progress lines reach the notebook
    assert "overhead_vs_interval:" in text
    assert not [o for o in outputs if o.output_type == "error"]
