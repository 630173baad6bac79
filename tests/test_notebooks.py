"""Every notebook in notebooks/ runs clean from a fresh clone and shows at least one figure.

Notebooks are committed without outputs (readable diffs); this test executes each with nbclient in its own
folder, as a reader would, and fails on the first error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import DATASETS, ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_notebooks_are_committed_without_outputs():
    import nbformat

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
        assert not dirty, f"{path.name}: cells {dirty} have outputs; strip them before committing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if "../../shared/datasets" in "".join(c.source for c in nb.cells) and not DATASETS.exists():
        pytest.skip("the notebook reads published datasets that are not on this machine")
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                   ).execute()
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert images >= 1, f"{path.name} shows no figure"
