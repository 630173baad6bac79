"""The batch-schedule study's summary and figure (#24 item 4) on its committed runs (data/batch_schedule/):
the script runs in CI on the committed data, and its two computed figures are checked against hand values."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

STUDY = Path(__file__).resolve().parent.parent / "data" / "batch_schedule"


@pytest.fixture(scope="module")
def summarize():
    spec = importlib.util.spec_from_file_location("batch_schedule_summarize", STUDY / "summarize.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_steps_to_reach_interpolates_in_log_steps(summarize):
    run = {"eval_steps": np.array([100.0, 400.0, 1600.0]), "eval_loss": np.array([3.0, 2.0, 1.0])}
    assert summarize.steps_to_reach(run, 2.0) == pytest.approx(400.0)
    assert summarize.steps_to_reach(run, 1.5) == pytest.approx(800.0)  # halfway in log between 400 and 1600
    assert summarize.steps_to_reach(run, 3.5) == 100.0  # reached at the first evaluation
    assert math.isnan(summarize.steps_to_reach(run, 0.5))  # never reached


def test_mean_interval_is_the_student_t_interval_of_three_seeds(summarize):
    mean, lo, hi = summarize.mean_interval([1.0, 2.0, 3.0])
    assert (mean, hi - mean) == pytest.approx((2.0, 2.919986 / math.sqrt(3)))
    assert lo == pytest.approx(2 * mean - hi)


def test_the_study_summarizes_its_committed_runs(summarize, tmp_path, capsys):
    """On a copy of the folder (the script writes summary.csv beside its data): 9 runs, each row's loss and steps
    those of runs.jsonl, the figure written, and the README's finding (each schedule saves at least 40% of the
    constant batch's steps at equal or lower loss, seed by seed)."""
    folder = tmp_path / "batch_schedule"
    folder.mkdir()
    for name in ("manifest.json", "runs.jsonl"):
        shutil.copy(STUDY / name, folder / name)
    (folder / "runs").symlink_to(STUDY / "runs")
    out = summarize.main(["--figure", str(tmp_path / "figure.png")], folder=folder)
    records = {r["run_id"]: r for r in map(json.loads, (STUDY / "runs.jsonl").read_text().splitlines())}
    rows = out["rows"]
    assert len(rows) == 9 and (folder / "summary.csv").read_text().count("\n") == 10
    for row in rows:
        assert (row["loss"], row["steps"]) == (records[row["run_id"]]["loss"], records[row["run_id"]]["steps"])
    assert (tmp_path / "figure.png").stat().st_size > 10_000
    for row in rows:
        if row["arm"] != "const":
            assert row["steps_saved"] >= 0.4, row
    assert "steps saved at equal loss" in capsys.readouterr().out
