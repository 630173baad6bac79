"""Run tables drawn from a model at known parameters (recovery tests, calibration, documentation)."""

from __future__ import annotations

import pandas as pd

from scalinfer.models import get_model
from scalinfer.runs.schema import RunTable, validate

__all__ = ["simulate"]


def simulate(model: str = "chinchilla", design: pd.DataFrame | None = None, params: dict | None = None,
             seed: int = 0) -> RunTable:
    """Draw a run table from `model` at `params` (default: the model's `true_params`) over the `design`
    rows (default: the model's `default_design`). The truth is kept in ``RunTable.meta["true_params"]``."""
    m = get_model(model)
    params = dict(m.true_params() if params is None else params)
    if design is None:
        design = m.default_design(seed=seed)
    df = m.simulate(params, design, seed=seed)
    return validate(df, source=f"simulate({m.name!r}, seed={seed})", kind=m.table_kind,
                    meta={"simulated": True, "seed": seed, "true_params": params})
