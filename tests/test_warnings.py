"""Fits that go wrong are reported, never hidden: divergences, R-hat, a posterior piled against a bound.

We take a healthy small fit and damage copies of its posterior in known ways; each damage must show up in
`Fit.warnings()`, in `scalinfer summary --json` and in `scalinfer predict --json`.
"""

from __future__ import annotations

import numpy as np
import pytest

import scalinfer
from conftest import run_cli


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    runs = scalinfer.simulate("chinchilla", seed=6)
    f = scalinfer.fit(runs, model="chinchilla", chains=2, warmup=300, samples=400, seed=6)
    # short chains may already be flagged for low ESS; each test checks that its own damage shows up where it
    # was absent before (no divergences, nothing piled against a bound, no R-hat flag on alpha)
    assert f.divergences == 0 and not any("piles" in w or ("R-hat" in w and "alpha:" in w)
                                          for w in f.warnings()), f.warnings()
    return f


def _copy(fit):
    return scalinfer.Fit(fit.tree.copy(deep=True))


def _both_outputs(fit, tmp_path):
    path = fit.save(tmp_path / "f.nc")
    s = run_cli("summary", path, "--json").json()["warnings"]
    p = run_cli("predict", path, "--N", "1e10", "--D", "1e11", "--json").json()["warnings"]
    return s, p


def test_divergences_reported(healthy, tmp_path):
    f = _copy(healthy)
    f.tree["sample_stats"]["diverging"].values[0, :7] = True
    assert any("7 divergent transitions" in w for w in f.warnings())
    s, p = _both_outputs(f, tmp_path)
    assert any("divergent" in w for w in s) and any("divergent" in w for w in p)


def test_chains_that_disagree_raise_rhat(healthy, tmp_path):
    f = _copy(healthy)
    alpha = f.tree["posterior"]["alpha"].values
    alpha[0] += 5 * alpha.std()  # chain 0 stuck in another mode
    ws = f.warnings()
    assert any("R-hat above 1.01" in w and "worst alpha:" in w for w in ws), ws
    s, p = _both_outputs(f, tmp_path)
    assert any("R-hat" in w for w in s) and any("R-hat" in w for w in p)


def test_posterior_piled_against_bound(healthy, tmp_path):
    f = _copy(healthy)
    sigma = f.tree["posterior"]["sigma"].values
    v = np.abs(np.random.default_rng(0).normal(0, 0.01, size=sigma.shape))
    v.ravel()[: v.size // 3] = 1e-9  # a third of the draws stuck at the edge of the support
    sigma[...] = v
    ws = f.warnings()
    assert any("sigma piles against its lower bound 0" in w for w in ws), ws
    s, _ = _both_outputs(f, tmp_path)
    assert any("piles against" in w for w in s)


def test_healthy_half_normal_not_flagged(healthy):
    # the detector must not fire on an ordinary posterior near zero: |N(0, s)| puts ~4% of draws within 2% of
    # its 99th percentile, below the 10% threshold
    f = _copy(healthy)
    sigma = f.tree["posterior"]["sigma"].values
    sigma[...] = np.abs(np.random.default_rng(1).normal(0, 0.01, size=sigma.shape))
    assert not any("piles against" in w for w in f.warnings())
