"""The NUTS driver (`scalinfer.inference.nuts.run_nuts`): tree depth caps, the scaled coordinates, what it
records, and the errors for malformed arguments. A 3-dimensional Gaussian with very different scales is the
target: its answer is known exactly."""

from __future__ import annotations

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import scalinfer  # noqa: F401  (asks for CPU devices before JAX starts)
from scalinfer.inference.nuts import run_nuts
from scalinfer.inference.runtime import prepare_runtime

SD = np.array([1e-3, 1.0, 30.0])


def gauss(sd):
    numpyro.sample("x", dist.Normal(0.0, sd))


def _run(**kw):
    prepare_runtime(2)
    init = {"x": np.zeros((2, 3))}
    opts = dict(chains=2, warmup=200, samples=400, seed=0, chain_method="sequential")
    opts.update(kw)
    return run_nuts(gauss, {"sd": SD}, init, **opts)


def test_scaled_coordinates_recover_the_target_and_record_warmup():
    # scaled by the true sds, w is standard normal: identity mass is right and steps stay short
    draws, stats = _run(mean=np.zeros(3), scale=SD, adapt="none")
    x = draws["x"].reshape(-1, 3)
    # 800 near-independent draws: the sd estimate has relative se ~ 1/sqrt(2 * 800) = 2.5%; 15% is 6 se
    np.testing.assert_allclose(x.std(0), SD, rtol=0.15)
    assert np.all(np.abs(x.mean(0)) < 0.2 * SD)  # se of the mean ~ sd / sqrt(800) = 0.035 sd
    assert stats["warmup_num_steps"].shape == (2, 200) and stats["warmup_step_size"].shape == (2, 200)
    assert np.all(stats["warmup_step_size"] > 0)
    assert stats["num_steps"].mean() < 8  # a standard normal: a few leapfrog steps per draw


def test_warmup_tree_depth_caps_warmup_only():
    # unscaled, the 3e4 spread of scales makes warmup's first trees long; capped at depth 2 they take at
    # most 3 leapfrog steps, and sampling keeps its own cap
    _, stats = _run(warmup_tree_depth=2, max_tree_depth=10, adapt="diag")
    assert stats["warmup_num_steps"].max() <= 3
    assert stats["num_steps"].max() > 3


def test_no_warmup_records_no_warmup():
    draws, stats = _run(warmup=0, samples=20, mean=np.zeros(3), scale=SD, adapt="none")
    assert stats["warmup_num_steps"].shape == (2, 0) and draws["x"].shape == (2, 20, 3)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="adapt must be one of"):
        _run(adapt="full")
    with pytest.raises(ValueError, match="mean and scale must have shape"):
        _run(mean=np.zeros(2))
    with pytest.raises(ValueError, match="leading axis of size chains=3"):
        _run(chains=3)
    with pytest.raises(ValueError, match="reserved"):
        run_nuts(lambda _scale: None, {"_scale": 1.0}, {"x": np.zeros((1, 1))}, chains=1, warmup=1, samples=1)


def test_float32_potential_samples_the_same_target():
    """The potential in float32, the integrator in float64: the Gaussian's scales (1e-3 to 30, all O(1) in
    the scaled coordinates) are recovered as in float64."""
    def gauss_in_float32(sd):  # a density that is finite only where it is evaluated in float32
        x = numpyro.sample("x", dist.Normal(0.0, sd))
        numpyro.factor("float32_only", 0.0 if x.dtype == np.float32 else -np.inf)

    prepare_runtime(2)
    draws, stats = run_nuts(gauss_in_float32, {"sd": SD}, {"x": np.zeros((2, 3))}, chains=2, warmup=200,
                            samples=1000, seed=0, chain_method="sequential", potential_dtype="float32",
                            mean=np.zeros(3), scale=SD)
    x = draws["x"].reshape(-1, 3)
    assert x.dtype == np.float64 and not stats["diverging"].any()
    # 2,000 draws at bulk ESS >= 1,050 (measured, of x and of x^2): the sample sd's relative se is <= 2.5%;
    # 10% is 4 se
    np.testing.assert_allclose(x.std(0), SD, rtol=0.10)
    np.testing.assert_allclose(x.mean(0) / SD, 0.0, atol=0.15)  # mean's se ~0.03 sd; 0.15 is 5 se
