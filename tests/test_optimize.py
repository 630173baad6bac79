"""The posterior mode and the Laplace approximation (`scalinfer.inference.optimize`): Newton reaches the mode
of a posterior known in closed form, the Hessian by differences of the gradient matches JAX's exact one, and
the Laplace draws have the posterior's covariance."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import potential_energy

import scalinfer
from scalinfer.errors import ModelError
from scalinfer.inference.optimize import find_map, laplace_draws
from scalinfer.runtime import configure
from scalinfer.models import get_model


def regression(x, y=None):
    """Linear regression with known noise: the posterior of (a, b) is Gaussian, in closed form."""
    a = numpyro.sample("a", dist.Normal(0.0, 10.0))
    b = numpyro.sample("b", dist.Normal(0.0, 10.0))
    numpyro.sample("y", dist.Normal(a + b * x, 0.5), obs=y)


def _exact(x, y):
    X = np.column_stack([np.ones_like(x), x])
    precision = X.T @ X / 0.5**2 + np.eye(2) / 10.0**2
    mean = np.linalg.solve(precision, X.T @ y / 0.5**2)
    return mean, precision


def test_mode_hessian_and_laplace_of_a_gaussian_posterior():
    configure()
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 50)
    y = 1.0 + 2.0 * x + 0.5 * rng.normal(size=50)
    mean, precision = _exact(x, y)
    # a start 1,000 posterior sds away: Newton's step on a quadratic is exact
    point = find_map(regression, {"x": x, "y": y}, {"a": -30.0, "b": 40.0})
    assert point.converged
    np.testing.assert_allclose(point.flat, mean, rtol=1e-8, atol=1e-10)
    # central differences: error ~eps^(2/3) relative; 1e-6 leaves a wide margin
    np.testing.assert_allclose(point.hessian(), precision, rtol=1e-6)
    draws, flat = laplace_draws(point, 20_000, seed=1)
    # whitened by the exact precision the draws are standard normal: each entry of their sample covariance
    # has se <= sqrt(2 / 20,000) = 0.01, so 0.04 is 4 se
    white = (flat - mean) @ np.linalg.cholesky(precision)
    np.testing.assert_allclose(np.cov(white.T), np.eye(2), atol=0.04)
    np.testing.assert_allclose(draws["b"], flat[:, 1])


def test_hessian_by_differences_matches_jax_on_a_student_t_scaling_law():
    """Chinchilla on a simulated table: 7 unconstrained parameters with curvatures over 4 orders of magnitude."""
    configure()
    m = get_model("chinchilla")
    runs = scalinfer.load_runs(m.simulate(m.true_params(), m.default_design(), seed=106))
    data, c = m.prepare(runs)
    kw = m.model_kwargs(data, c)
    point = find_map(m.model, kw, m.init_values(data, c))
    # this table's Newton path needs steps shorter than 2^-7: more halvings than one batch (8 rows) holds
    assert point.converged
    flat, unravel = ravel_pytree({k: jnp.asarray(v) for k, v in point.z.items()})
    exact = jax.hessian(lambda v: potential_energy(m.model, (), kw, unravel(v)))(flat)
    err = np.max(np.abs(point.hessian() - np.asarray(exact))) / np.max(np.abs(exact))
    assert err < 1e-6, err


def test_no_finite_start_is_a_model_error():
    configure()

    def impossible(y=None):
        s = numpyro.sample("s", dist.HalfNormal(1.0))
        numpyro.sample("y", dist.Uniform(0.0, s), obs=y)  # every y = -1 is outside (0, s)

    with pytest.raises(ModelError, match="not finite"):
        find_map(impossible, {"y": -np.ones(3)})


def one_run_per_group(y=None):
    """Each group's mean seen through one observation: the joint density grows without bound as sigma -> 0 with
    every mu_g on its y_g (no maximum), though the posterior is proper."""
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("group", y.shape[0]):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


def test_a_held_site_gives_the_mode_given_it_where_the_joint_has_none():
    configure()
    y = np.array([-1.2, -0.3, 0.4, 0.9, 1.7, 2.2])
    free = find_map(one_run_per_group, {"y": y}, {"sigma": 0.5, "mu": np.zeros(6)})
    assert not free.converged and float(free.params["sigma"]) < 0.05  # walks into the spike at sigma = 0
    held = find_map(one_run_per_group, {"y": y}, {"sigma": 0.5, "mu": np.zeros(6)}, hold=("sigma",))
    assert held.converged and held.held == ("sigma",)
    assert float(held.params["sigma"]) == pytest.approx(0.5, rel=1e-12)  # kept at its start
    # given sigma, mu_g's posterior is N(y_g / (1 + sigma^2), ...): its mode in closed form
    np.testing.assert_allclose(held.params["mu"], y / (1 + 0.5 ** 2), rtol=1e-8)
    with pytest.raises(ModelError, match="cannot hold tau"):
        find_map(one_run_per_group, {"y": y}, {"sigma": 0.5}, hold=("tau",))


def test_the_search_gives_up_where_the_density_rises_without_bound():
    """Where the joint density has no maximum the search stops on its own, not at `max_iter`: its full Newton steps
    stop shrinking the gradient (`UNBOUNDED_ITER` of them), and it says it did not converge. Without that rule it
    ran all 200 iterations here (and with a larger `max_iter`, further towards sigma = 0)."""
    configure()
    y = np.array([-1.2, -0.3, 0.4, 0.9, 1.7, 2.2])
    start = {"sigma": 0.5, "mu": np.zeros(6)}
    default = find_map(one_run_per_group, {"y": y}, start)
    longer = find_map(one_run_per_group, {"y": y}, start, max_iter=10_000)
    assert not default.converged and not longer.converged
    assert longer.potential == default.potential  # the same stop: neither reached its max_iter


class _RoundedQuadratic:
    """U(x) = x' A x / 2 + 1e4 with A = diag(`curvatures`), whose gradient carries an error of `floor` in every
    component (alternating in sign from call to call), as the gradient of a sum over many runs carries its
    rounding: below `floor` it cannot go. The `Objective` interface `_newton` uses."""

    rows = 8

    def __init__(self, curvatures, floor):
        self.a, self.floor, self.calls = np.asarray(curvatures, float), floor, 0

    def __call__(self, flat):
        flat = np.atleast_2d(flat)
        self.calls += 1
        noise = self.floor * (-1.0) ** self.calls
        return 0.5 * (flat**2 * self.a).sum(1) + 1e4, flat * self.a + noise

    def hessian(self, x, g=None):
        return np.diag(self.a)


def _start(objective, x):
    """`_newton`'s start: the point `x` and the potential and its gradient there (as `find_map` passes them)."""
    x = np.asarray(x, float)
    (f,), (g,) = objective(x[None])
    return x, float(f), g


def test_newton_stops_at_the_rounding_of_the_gradient_but_not_before_it_has_converged():
    from scalinfer.inference.optimize import CONVERGED_GRAD, _newton

    # the gradient stalls at 3e-6 > gtol 1e-6 (Step Law's 1,911 runs stall at 3.6e-6): the decrement, ~1e-11
    # against 1e-14 |U| = 1e-10, stops the search in a few iterations, not at max_iter
    obj = _RoundedQuadratic([1.0, 4.0], floor=3e-6)
    x, fx, gmax = _newton(obj, *_start(obj, [3.0, -2.0]), gtol=1e-6, max_iter=200)
    assert gmax < CONVERGED_GRAD and obj.calls < 20
    # a stiff direction: at |g| 3e-3 along curvature 1e6 the step expects a fall of only 4.5e-12, under the
    # decrement's line, yet the search is not done until |g| < CONVERGED_GRAD: it takes that step
    stiff = _RoundedQuadratic([1e6, 1.0], floor=0.0)
    x, fx, gmax = _newton(stiff, *_start(stiff, [3e-9, 0.0]), gtol=1e-6, max_iter=200)
    assert gmax < 1e-6


def _blocks_pattern(shared: int, vectors: int, length: int) -> np.ndarray:
    """The surface model's Hessian pattern in small: `shared` parameters that meet every other, and `vectors`
    vectors of `length` entries (one per setting) whose entries meet those of the same setting only."""
    n = shared + vectors * length
    p = np.zeros((n, n), bool)
    p[:shared, :] = p[:, :shared] = True
    setting = np.concatenate([np.full(shared, -1), np.tile(np.arange(length), vectors)])
    p |= (setting[:, None] == setting[None, :]) & (setting[:, None] >= 0)
    return p


def test_hessian_columns_recover_every_entry_of_a_sparse_hessian_exactly():
    """`HessianColumns`: from the differences along its directions (here exact: directions @ H) every entry of a
    symmetric matrix of the pattern comes back bit for bit (each is read where it is the only term), on the
    surface model's shape (5 shared parameters, 3 per-setting vectors of 12: 5 + 3 directions, not 41) and on
    random patterns, which need not compress but must come back whole."""
    from scalinfer.inference.optimize import HessianColumns

    rng = np.random.default_rng(0)
    blocks = _blocks_pattern(5, 3, 12)
    patterns = [blocks] + [rng.random((30, 30)) < density for density in (0.05, 0.1, 0.3, 0.6)]
    for pattern in patterns:
        pattern = pattern | pattern.T | np.eye(len(pattern), dtype=bool)
        h = np.where(pattern, rng.normal(size=pattern.shape), 0.0)
        h = np.where(np.triu(np.ones_like(pattern)), h, h.T)  # symmetric
        columns = HessianColumns.of_pattern(pattern)
        assert set(np.unique(columns.directions)) <= {0.0, 1.0}
        assert np.all(columns.directions.sum(axis=0) == 1)  # every column in one direction
        assert np.array_equal(columns.hessian(columns.directions @ h), h)
    assert len(HessianColumns.of_pattern(blocks).directions) == 5 + 3


def hierarchy(group, y=None, groups=1):
    """Normal means of `groups` groups around a shared mean mu with scale tau: mu and tau meet every group's mean,
    two groups' means meet only through them."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    tau = numpyro.sample("tau", dist.HalfNormal(5.0))
    with numpyro.plate("groups", groups):
        m = numpyro.sample("m", dist.Normal(mu, tau))
    numpyro.sample("y", dist.Normal(m[group], 1.0), obs=y)


def test_newton_takes_a_sparse_hessian_along_fewer_directions_and_finds_the_same_mode(monkeypatch):
    """40 groups' means and their shared mean and scale (42 parameters) on 12,000 observations: the batch holds 10
    rows (`MAX_BATCH_ELEMENTS` / 24,000 data elements), so a Hessian in full takes 5 batches; after the first
    `FULL_HESSIANS` Newton takes it along 3 directions (mu, tau, the groups' means together), one batch. The mode
    is the one the full Hessians find, to the search's own tolerance (its gradient < `CONVERGED_GRAD`, at
    curvatures ~300: ~1e-5 / 300 apart at most)."""
    import scalinfer.inference.optimize as optimize

    configure()
    rng = np.random.default_rng(3)
    group = np.repeat(np.arange(40), 300)
    y = rng.normal(2.0 + rng.normal(size=40)[group], 1.0)
    kwargs = {"group": group, "y": y, "groups": 40}
    start = {"mu": 0.0, "tau": 1.0, "m": np.zeros(40)}
    rows = []
    counting = optimize.Objective.__call__

    def count(self, flat):
        rows.append(np.atleast_2d(flat).shape[0])
        return counting(self, flat)

    monkeypatch.setattr(optimize.Objective, "__call__", count)
    sparse = find_map(hierarchy, kwargs, start)
    assert sparse.objective.rows == 10 and sparse.converged
    assert len(sparse.objective.columns.directions) == 3
    assert rows.count(3) >= 1 and 42 in rows  # the first Hessians in full, later ones along 3 directions
    monkeypatch.setattr(optimize, "FULL_HESSIANS", 10**9)  # every Hessian in full
    full = find_map(hierarchy, kwargs, start)
    assert full.converged and full.objective.columns is None
    np.testing.assert_allclose(sparse.flat, full.flat, rtol=0, atol=1e-6)


def test_the_mode_search_runs_numpy_blas_on_one_thread_and_restores_the_callers_setting(monkeypatch):
    """`find_map` limits NumPy's BLAS to one thread while it searches (its eighs between XLA batches) and gives
    the caller's setting back after it, also when the search raises."""
    from threadpoolctl import threadpool_info, threadpool_limits

    import scalinfer.inference.optimize as optimize

    configure()
    x = np.linspace(-1.0, 1.0, 20)
    seen = []
    newton = optimize._newton

    def spy(*args, **kwargs):
        seen.append([p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"])
        return newton(*args, **kwargs)

    monkeypatch.setattr(optimize, "_newton", spy)
    with threadpool_limits(limits=2, user_api="blas"):  # the caller's setting, whatever the machine's default
        before = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
        assert before and set(before) == {2}  # NumPy's BLAS is seen (else the checks below would hold vacuously)
        assert find_map(regression, {"x": x, "y": 1.0 + x}, {"a": 0.0, "b": 0.0}).converged
        assert seen and all(n == 1 for n in seen[0])
        assert [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"] == before
        monkeypatch.setattr(optimize, "_newton", lambda *a, **k: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            find_map(regression, {"x": x, "y": 1.0 + x}, {"a": 0.0, "b": 0.0})
        assert [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"] == before
