"""muP coordinate check (docs/laws.md section 6): activation scales stay O(1) across widths under muP and
grow with width under standard parametrization."""

from __future__ import annotations

import numpy as np
import pytest

from scalinfer.train.config import ModelConfig
from scalinfer.train.coord_check import coord_check

BASE = ModelConfig(d_model=32, n_layers=2, n_heads=2, d_ff=32, n_experts=4, top_k=2, seq_len=32)
WIDTHS = (32, 64, 128)


def _spread(values):
    """Largest over smallest, per column: 1 means equal across widths."""
    values = np.asarray(values)
    return values.max(axis=0) / values.min(axis=0)


@pytest.mark.slow
def test_coordinate_check_mup_vs_standard():
    mup = coord_check(BASE, WIDTHS, mup=True, steps=5, lr=1e-2)
    sp = coord_check(BASE, WIDTHS, mup=False, steps=5, lr=1e-2)
    assert mup["rms_final"].shape == (3, 2)
    # At init both parametrizations keep the residual stream O(1) at every width.
    for r in (mup, sp):
        assert np.all(_spread(r["rms_init"]) < 1.3) and np.all((0.5 < r["rms_init"]) & (r["rms_init"] < 3))
    # After a few Adam steps: constant across widths with muP ...
    assert np.all(_spread(mup["rms_final"]) < 1.3), mup["rms_final"]
    assert _spread(mup["logits_final"]) < 1.3, mup["logits_final"]
    # ... growing with width without it (roughly with sqrt(width) to width).
    for layer in range(2):
        col = sp["rms_final"][:, layer]
        assert np.all(np.diff(col) > 0) and col[-1] / col[0] > 1.8, sp["rms_final"]
    assert np.all(np.diff(sp["logits_final"]) > 0) and sp["logits_final"][-1] / sp["logits_final"][0] > 2
    # training moved the activations (the check is not vacuous)
    assert np.all(mup["rms_final"] > 1.2 * mup["rms_init"])
