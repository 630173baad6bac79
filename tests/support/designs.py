"""Simulated designs of the ``surface`` model: Step-Law-shaped grids of settings (N, D) x LRs x batch sizes.

Used by the surface tests and by ``benchmarks/calibration_lr.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["SURFACE_DESIGNS", "surface_design", "true_law"]

SURFACE_DESIGNS = {
    # 3 model sizes x 3 token budgets, 9 LRs x 5 batches = 405 runs (CI-sized: each fit takes seconds)
    "small": {"N": (1.5e8, 3e8, 6e8), "tokens_per_param": (20.0, 50.0, 100.0),
              "log2_lr": np.arange(-25, -16) / 2, "log2_batch": np.arange(16, 21)},
    # Step-Law-like: 4 sizes x 3 budgets, 13 LRs x 7 batches = 1,092 runs
    "steplaw": {"N": (2.1e8, 2.7e8, 4.3e8, 5.4e8), "tokens_per_param": (20.0, 50.0, 100.0),
                "log2_lr": np.arange(-26, -13) / 2, "log2_batch": np.arange(16, 23)},
    # the smoke test's: 2 sizes x 2 budgets, 6 LRs x 4 batches = 96 runs
    "tiny": {"N": (2e8, 6e8), "tokens_per_param": (20.0, 80.0),
             "log2_lr": np.arange(-24, -18) / 2, "log2_batch": np.arange(16, 20)},
}


def surface_design(name: str) -> pd.DataFrame:
    """The full grid of design ``name`` as a table with columns N, D (= N x tokens per parameter), lr and
    batch_tokens (powers of 2, LRs by sqrt 2)."""
    d = SURFACE_DESIGNS[name]
    rows = [(n, n * t, 2.0 ** a, 2.0 ** b) for n in d["N"] for t in d["tokens_per_param"]
            for a in d["log2_lr"] for b in d["log2_batch"]]
    return pd.DataFrame(rows, columns=["N", "D", "lr", "batch_tokens"])


def true_law(params: dict, name: str, N: float, D: float) -> float:
    """The surface model's law ``name`` (``lr_opt``, ``batch_opt``, ``loss_opt``) at (N, D) from its natural-scale
    parameters (``{name}_log_coef``, ``{name}_exp_N``, ``{name}_exp_D``), as `Surface.true_params` gives them."""
    return float(np.exp(params[f"{name}_log_coef"] + params[f"{name}_exp_N"] * np.log(N)
                        + params[f"{name}_exp_D"] * np.log(D)))
