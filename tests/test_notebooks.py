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


def _run_notebook(path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if "../../shared/datasets" in "".join(c.source for c in nb.cells) and not DATASETS.exists():
        pytest.skip("the notebook reads published datasets that are not on this machine")
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                   ).execute()
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert images >= 1, f"{path.name} shows no figure"


def _notebook_class(path: Path) -> type:
    """A test class per notebook: the README's ``--dist loadscope`` keeps each test file's functions on one
    worker (they share module-scoped fits) but schedules each class on its own, so the notebooks, which share
    nothing and take minutes each, run side by side instead of one after another."""

    @pytest.mark.slow
    def test_runs(self):
        _run_notebook(path)

    return type(f"TestNotebook_{path.stem}", (), {"test_runs": test_runs, "__doc__": f"notebooks/{path.name}"})


for _path in NOTEBOOKS:
    globals()[f"TestNotebook_{_path.stem}"] = _notebook_class(_path)
