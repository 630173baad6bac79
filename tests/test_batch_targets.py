"""Tests of the curves -> steps-to-target conversion (scalinfer.models.batch.targets).

Expected values are computed here by hand from the curves' definitions; no fitting, fast.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from scalinfer.errors import ModelError
from scalinfer.models.batch import curves_to_table, default_target_losses, steps_to_target_from_curves
from scalinfer.runs.schema import validate


def _curve(run_id, steps, losses, N=1e8, batch=65536.0, group=None):
    d = pd.DataFrame({"run_id": run_id, "step": np.asarray(steps, float), "N": N,
                      "loss": np.asarray(losses, float), "batch_tokens": batch})
    d["D"] = d["step"] * batch
    if group is not None:
        d["group"] = group
    return d


def test_crossing_interpolates_linearly_in_log_steps():
    curves = _curve("r", [100, 200, 400, 800], [4.0, 3.5, 3.0, 2.8])
    out = steps_to_target_from_curves(curves, [3.2])
    # crossing between (200, 3.5) and (400, 3.0): fraction 0.6 of the way in log steps
    expected = math.exp(math.log(200) + 0.6 * (math.log(400) - math.log(200)))
    assert out["status"].tolist() == ["reached"]
    assert out["steps_to_target"].iloc[0] == pytest.approx(expected, rel=1e-12)
    assert out["tokens_to_target"].iloc[0] == pytest.approx(expected * 65536.0, rel=1e-12)
    assert out["steps"].iloc[0] == 800 and out["D"].iloc[0] == 800 * 65536.0
    assert out["run_id"].iloc[0] == "r@L3.2" and out["source_run"].iloc[0] == "r"


def test_crossing_without_interpolation_is_the_first_record_at_or_below():
    curves = _curve("r", [100, 200, 400, 800], [4.0, 3.5, 3.0, 2.8])
    out = steps_to_target_from_curves(curves, [3.0, 3.2], interpolate=False)
    assert out["steps_to_target"].tolist() == [400.0, 400.0]


def test_crossing_from_step_zero_interpolates_in_steps():
    curves = _curve("r", [0, 100], [10.0, 2.0])
    out = steps_to_target_from_curves(curves, [6.0])
    assert out["steps_to_target"].iloc[0] == pytest.approx(50.0)


def test_never_reached_is_censored_at_the_last_step_and_first_record_is_flagged():
    curves = pd.concat([_curve("slow", [10, 20, 40], [5.0, 4.5, 4.2]),
                        _curve("fast", [10, 20, 40], [3.0, 2.5, 2.2], batch=131072.0)])
    out = steps_to_target_from_curves(curves, [4.0]).set_index("source_run")
    assert out.loc["slow", "status"] == "censored" and np.isnan(out.loc["slow", "steps_to_target"])
    assert out.loc["slow", "steps"] == 40
    assert out.loc["fast", "status"] == "before_first_record"


def test_a_diverged_run_is_censored_at_its_last_finite_record():
    curves = _curve("div", [10, 20, 40, 80], [5.0, 4.5, np.nan, np.nan])
    out = steps_to_target_from_curves(curves, [4.0])
    assert out["status"].iloc[0] == "censored" and out["steps"].iloc[0] == 20


def test_unsorted_records_and_several_targets():
    curves = _curve("r", [400, 100, 800, 200], [3.0, 4.0, 2.8, 3.5])
    out = steps_to_target_from_curves(curves, [3.5, 2.9])
    assert out["steps_to_target"].iloc[0] == pytest.approx(200.0)  # exactly at a record
    assert 400 < out["steps_to_target"].iloc[1] < 800


def test_bad_curves_raise_a_clear_error():
    with pytest.raises(ModelError, match="batch_tokens"):
        steps_to_target_from_curves(_curve("r", [1, 2], [3, 2]).drop(columns="batch_tokens"), [2.5])
    bad = pd.concat([_curve("r", [1, 2], [3, 2]), _curve("r", [3], [1.9], batch=1024.0)])
    with pytest.raises(ModelError, match="changes N or batch_tokens"):
        steps_to_target_from_curves(bad, [2.5])
    with pytest.raises(ModelError, match="row 1 .*'N'"):
        steps_to_target_from_curves(_curve("r", [1, 2], [3, 2], N=[1e8, -1.0]), [2.5])
    with pytest.raises(ModelError, match="target losses"):
        steps_to_target_from_curves(_curve("r", [1, 2], [3, 2]), [-1.0])


def test_curves_to_table_keeps_censored_cells_and_excludes_unknown_ones_with_a_reason():
    curves = pd.concat([_curve("a", [10, 20, 40], [5.0, 4.0, 3.0]),
                        _curve("b", [10, 20, 40], [3.9, 3.5, 3.4], batch=131072.0),
                        _curve("c", [10, 20, 40], [6.0, 5.5, 5.0], batch=262144.0)])
    runs = validate(curves, "test curves", "curves", row_offset=None)
    table = curves_to_table(runs, [4.5, 3.85])
    assert table.kind == "steps_to_target"
    assert len(table) + len(table.excluded) == 6  # 3 runs x 2 targets, nothing dropped silently
    assert list(table.excluded["row"]) == ["b@L4.5"]
    assert "first record" in table.excluded["reason"].iloc[0]
    censored = table.df[table.df["steps_to_target"].isna()]
    assert set(censored["run_id"]) == {"c@L4.5", "c@L3.85"}
    assert (censored["steps"] == 40).all()


def test_default_targets_lie_between_what_every_run_and_the_best_run_reach():
    curves = pd.concat([_curve("a", [10, 20, 40], [5.0, 4.0, 3.0]),
                        _curve("b", [10, 20, 40], [4.5, 3.8, 3.6], batch=131072.0)])
    t = default_target_losses(curves, k=4)
    assert len(t) == 4 and np.all(np.diff(t) < 0)
    assert t[0] == pytest.approx(3.6)           # every run reaches the largest per-run minimum
    assert t[-1] == pytest.approx(3.0 + 0.1 * 0.6)  # the best run's minimum, less 10% of the range
