"""Run tables drawn from a model at known parameters (recovery tests, calibration, documentation)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scalinfer.models import Model, get_model
from scalinfer.runs.schema import RunTable, validate

__all__ = ["simulate"]


def simulate(model: str | Model = "chinchilla", design: pd.DataFrame | None = None, params: dict | None = None,
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


def write_simulated(runs: RunTable, path, model: str) -> Path:
    """Write a simulated table as CSV with a manifest beside it (model, version, seed, true parameters,
    scalinfer version), both atomically. The table is labelled simulated in its `dataset` column."""
    import json

    from scalinfer import __version__
    from scalinfer._io import atomic_write_text

    m = get_model(model)
    path = Path(path)
    df = runs.df.drop(columns=[c for c in ("N_total", "N_active") if c in runs.df and (runs.df[c] == runs.df["N"]).all()])
    df = df.assign(dataset=f"simulated:{m.name}")
    atomic_write_text(path, df.to_csv(index=False))
    manifest = {"simulated": True, "model": m.name, "model_version": m.version, "seed": runs.meta.get("seed"),
                "true_params": runs.meta.get("true_params"), "n_runs": len(runs), "scalinfer_version": __version__,
                "command": f"scalinfer simulate {m.name} --seed {runs.meta.get('seed')} -o {path.name}"}
    atomic_write_text(Path(f"{path}.manifest.json"), json.dumps(manifest, indent=2) + "\n")
    return path
