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
from scalinfer.runtime import configure

SD = np.array([1e-3, 1.0, 30.0])


def gauss(sd):
    numpyro.sample("x", dist.Normal(0.0, sd))


def _run(**kw):
    configure(2)
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

    configure(2)
    draws, stats = run_nuts(gauss_in_float32, {"sd": SD}, {"x": np.zeros((2, 3))}, chains=2, warmup=200,
                            samples=1000, seed=0, chain_method="sequential", potential_dtype="float32",
                            mean=np.zeros(3), scale=SD)
    x = draws["x"].reshape(-1, 3)
    assert x.dtype == np.float64 and not stats["diverging"].any()
    # 2,000 draws at bulk ESS >= 1,050 (measured, of x and of x^2): the sample sd's relative se is <= 2.5%;
    # 10% is 4 se
    np.testing.assert_allclose(x.std(0), SD, rtol=0.10)
    np.testing.assert_allclose(x.mean(0) / SD, 0.0, atol=0.15)  # mean's se ~0.03 sd; 0.15 is 5 se


def test_shrunk_covariance_is_positive_definite_with_fewer_draws_than_dimensions():
    from scalinfer.inference.nuts import shrunk_covariance

    x = np.random.default_rng(0).normal(size=(25, 40)) * np.linspace(0.5, 2.0, 40)
    mask = np.ones(25, bool)
    cov, n = (np.asarray(v) for v in shrunk_covariance(x, mask))
    assert n == 25
    np.testing.assert_allclose(np.diag(cov), x.var(0, ddof=1), rtol=1e-10)  # variances kept
    assert np.linalg.eigvalsh(cov).min() > 0  # the sample covariance is singular here
    # independent coordinates: the sample correlations (|r| ~ 0.2) are noise, and are shrunk almost away
    corr = cov / np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    sample = np.corrcoef(x.T)
    off = ~np.eye(40, dtype=bool)
    assert np.abs(corr[off]).max() < 0.25 * np.abs(sample[off]).max()


def test_shrunk_covariance_keeps_strong_correlations_and_uses_only_the_masked_rows():
    from scalinfer.inference.nuts import shrunk_covariance

    rng = np.random.default_rng(1)
    sigma = np.array([[1.0, 0.99, 0.0], [0.99, 1.0, 0.0], [0.0, 0.0, 4.0]])
    x = rng.multivariate_normal(np.zeros(3), sigma, size=400)
    x[300:] = 1e6  # rows outside the mask must not count
    mask = np.arange(400) < 300
    cov, n = (np.asarray(v) for v in shrunk_covariance(x, mask))
    assert n == 300
    sample = np.cov(x[:300].T)
    np.testing.assert_allclose(np.diag(cov), np.diag(sample), rtol=1e-10)
    # 300 draws of 3 coordinates: lambda = (sum of the 6 correlations' variances ~ 6 / 300) / (sum of their
    # squares ~ 2 * 0.98), about 0.01 (the 0.99 is shrunk by ~1%, which is why `_window_shrinkage` leaves
    # long windows alone: that 1% makes the pair's smallest variance, 0.01, about 2x too large)
    lam = 1 - cov[0, 1] / sample[0, 1]
    assert 0 < lam < 0.03
    np.testing.assert_allclose(cov[2, :2], (1 - lam) * sample[2, :2], rtol=1e-10)


def test_shrunk_covariance_of_a_stuck_coordinate_is_finite():
    from scalinfer.inference.nuts import shrunk_covariance

    x = np.random.default_rng(2).normal(size=(30, 4))
    x[:, 1] = 0.7  # never moved
    cov, _ = (np.asarray(v) for v in shrunk_covariance(x, np.ones(30, bool)))
    assert np.all(np.isfinite(cov)) and np.abs(cov[1]).max() < 1e-20 and np.abs(cov[:, 1]).max() < 1e-20
    cov, _ = (np.asarray(v) for v in shrunk_covariance(np.ones((30, 4)), np.ones(30, bool)))  # all stuck
    assert np.all(np.isfinite(cov)) and np.abs(cov).max() < 1e-20


def test_only_windows_shorter_than_twice_the_dimension_are_shrunk():
    from scalinfer.inference.nuts import _window_shrinkage

    # 1,000 warmup: NumPyro's middle windows are 75-99, 100-149, 150-249, 250-449 and 450-949
    rows, _ = _window_shrinkage(1000, 78)  # Step Law's surface: the 25-, 50- and 100-draw windows
    assert rows == 250
    rows, _ = _window_shrinkage(1000, 101)  # 200 < 202: the 200-draw window too
    assert rows == 450
    assert _window_shrinkage(1000, 5) is None  # a 5-parameter model keeps NumPyro's estimates


def corr_gauss(d):
    idx = np.arange(d)
    cov = 0.5 ** np.abs(idx[:, None] - idx[None, :])
    numpyro.sample("x", dist.MultivariateNormal(np.zeros(d), covariance_matrix=cov))


def test_dense_adaptation_in_short_windows_recovers_a_correlated_target():
    # 40 dimensions, 300 warmup: every adaptation window (25, 50, 100 draws... see `_window_shrinkage`) is
    # shorter than 80, so every dense mass matrix is a shrunk one; the draws must still be the target's
    configure(2)
    d = 40
    draws, stats = run_nuts(corr_gauss, {"d": d}, {"x": np.zeros((2, d))}, chains=2, warmup=300, samples=500,
                            seed=0, chain_method="sequential", adapt="dense")
    x = draws["x"].reshape(-1, d)
    # ~1,000 draws: se of a variance ~ sqrt(2 / 1000) = 0.045 (more with autocorrelation); 0.25 is > 5 se
    np.testing.assert_allclose(x.var(0), 1.0, atol=0.25)
    np.testing.assert_allclose(np.mean(x[:, :-1] * x[:, 1:], 0).mean(), 0.5, atol=0.1)  # neighbours' corr
    # warmup's cost: 14-15 leapfrog steps per iteration (seeds 0-2); with NumPyro's estimates of these
    # windows (singular for 25 draws, poorly conditioned for 50 and 100) it was 120-136
    assert stats["warmup_num_steps"].mean() < 40
    assert stats["num_steps"].mean() < 31
