"""The tutorial notebooks execute offline, top to bottom, without errors (nbclient)."""
from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_three_tutorials():
    names = [p.stem for p in NOTEBOOKS]
    assert names == ["a_private_training", "b_sanitize_with_vickrey", "c_evaluate_a_defense",
                     "d_redact_pii_from_your_records"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    shutil.copy(path, tmp_path / path.name)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert outputs, "the notebook printed nothing"
