"""Point estimates: MAP by quasi-Newton on the unconstrained log posterior, and the Laplace approximation.

Used on their own (``method="map"`` / ``"laplace"``: fast, approximate intervals) and to start NUTS from the
posterior's mode, which is what keeps hierarchical models from starting chains in separate modes.
We minimize with optax's L-BFGS (zoom line search) inside one compiled `lax.while_loop`. On the Chinchilla
points `jax.scipy.optimize.minimize(method="BFGS")` stopped after 7 iterations with a failed line search far
from the mode (log density -626 against -849), while L-BFGS converged (gradient 2e-7) in 77 steps and compiled
in half the time. The potential is *summed* over runs (a mean would stop the optimizer early).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from numpyro.infer.initialization import init_to_median, init_to_value
from numpyro.infer.util import initialize_model

from scalinfer.errors import ModelError

__all__ = ["PointFit", "find_map", "laplace_draws"]


@dataclasses.dataclass(frozen=True)
class PointFit:
    """The mode of the posterior.

    Attributes
    ----------
    z : unconstrained parameters at the mode (a dict of arrays, as NUTS takes them in ``init_params``).
    params : constrained values at the mode (sampled sites and deterministics).
    potential : negative log joint density at the mode.
    converged : whether BFGS reported success.
    unravel, potential_fn, postprocess_fn : to move between flat vectors, dicts and constrained values.
    """

    z: dict[str, Any]
    params: dict[str, np.ndarray]
    potential: float
    converged: bool
    unravel: Callable
    potential_fn: Callable
    postprocess_fn: Callable


def _lbfgs(f, x0, max_iter: int, gtol: float):
    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(f)

    def step(carry):
        x, state = carry
        value, grad = value_and_grad(x, state=state)
        updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
        return optax.apply_updates(x, updates), state

    def keep_going(carry):
        _, state = carry
        k = optax.tree.get(state, "count")
        g = optax.tree.get(state, "grad")
        return (k == 0) | ((k < max_iter) & (optax.tree.norm(g, ord=jnp.inf) > gtol))

    x, state = jax.lax.while_loop(keep_going, step, (x0, opt.init(x0)))
    return x, f(x), optax.tree.norm(jax.grad(f)(x), ord=jnp.inf), optax.tree.get(state, "count")


def _newton(f, x, fun, gtol: float, max_iter: int = 60, max_dim: int = 2000):
    """Saddle-free damped Newton steps from where L-BFGS stopped (it stalls on badly conditioned posteriors:
    hierarchical loss surfaces have curvatures from 1e-1 to 1e8, and L-BFGS's memory of 10 pairs cannot span
    that). The step uses |eigenvalues| of the Hessian (so a saddle is left, not approached) and halves until
    the potential decreases. A few steps reach the mode to gtol, which the Laplace mass matrix needs."""
    if x.shape[0] > max_dim:
        return x, fun, jnp.max(jnp.abs(jax.grad(f)(x)))
    grad, hess = jax.jit(jax.grad(f)), jax.jit(jax.hessian(f))
    fx = float(fun)
    for _ in range(max_iter):
        g = grad(x)
        if not bool(jnp.all(jnp.isfinite(g))) or float(jnp.max(jnp.abs(g))) <= gtol:
            break
        w, V = jnp.linalg.eigh(0.5 * (hess(x) + hess(x).T))
        if not bool(jnp.all(jnp.isfinite(w))):
            break
        lam = jnp.maximum(jnp.abs(w), 1e-10 * jnp.max(jnp.abs(w)))
        step = -(V @ ((V.T @ g) / lam))
        t = 1.0
        for _ in range(30):
            x_new = x + t * step
            f_new = float(f(x_new))
            if np.isfinite(f_new) and f_new <= fx:
                break
            t *= 0.5
        else:
            break
        x, fx = x_new, f_new
    return x, jnp.asarray(fx), jnp.max(jnp.abs(grad(x)))


def find_map(model_fn, model_kwargs: dict[str, Any], init_values: dict[str, Any] | None = None,
             seed: int = 0, max_iter: int = 2000, gtol: float = 1e-5) -> PointFit:
    """Maximize the log posterior density starting from `init_values` (if given and finite there) or from
    the prior median. ``converged`` means the largest gradient component fell below `gtol`."""
    starts = ([init_to_value(values=init_values)] if init_values else []) + [init_to_median(num_samples=15)]
    for strategy in starts:
        try:
            info, potential_fn, postprocess_fn, _ = initialize_model(
                jax.random.PRNGKey(seed), model_fn, model_kwargs=model_kwargs, init_strategy=strategy,
                dynamic_args=False)
        except RuntimeError:  # numpyro: no valid initial parameters from this strategy
            continue
        z0, unravel = ravel_pytree(info.z)
        f = lambda v: potential_fn(unravel(v))  # noqa: E731
        x, fun, gmax, _ = jax.jit(_lbfgs, static_argnums=(0, 2, 3))(f, z0, max_iter, gtol)
        if np.isfinite(float(fun)) and float(gmax) > gtol:
            x, fun, gmax = _newton(f, x, fun, gtol)
        if np.isfinite(float(fun)):
            break
    else:
        raise ModelError("the optimizer found no point with a finite posterior density; check the data's units")
    z = unravel(x)
    params = {k: np.asarray(v) for k, v in postprocess_fn(z).items()}
    return PointFit(z=z, params=params, potential=float(fun), converged=bool(float(gmax) < 1e-3),
                    unravel=unravel, potential_fn=potential_fn, postprocess_fn=postprocess_fn)


def laplace_precision(point: PointFit) -> jnp.ndarray:
    """Cholesky factor L of the Hessian H = L L^T of the potential at the mode (unconstrained space).

    Raises `ModelError` if H is not positive definite (the mode is a saddle or the posterior is improper
    along some direction)."""
    z_flat, _ = ravel_pytree(point.z)
    hess = jax.hessian(lambda v: point.potential_fn(point.unravel(v)))(z_flat)
    hess = 0.5 * (hess + hess.T)
    chol_prec = jnp.linalg.cholesky(hess)
    if not bool(jnp.all(jnp.isfinite(chol_prec))):
        raise ModelError("Laplace approximation failed: the Hessian at the mode is not positive definite; "
                         "use --method nuts")
    return chol_prec


def laplace_draws(point: PointFit, n_draws: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Draws from the Gaussian approximation at the mode in unconstrained space, mapped to constrained values.

    Returns (constrained draws of shape (n_draws, ...), unconstrained flat draws (n_draws, dim)).
    Raises `ModelError` if the Hessian at the mode is not positive definite (see `laplace_precision`).
    """
    z_flat, _ = ravel_pytree(point.z)
    chol_prec = laplace_precision(point)
    eps = jax.random.normal(jax.random.PRNGKey(seed), (n_draws, z_flat.shape[0]), dtype=z_flat.dtype)
    # z = mode + L^-T eps has covariance (L L^T)^-1 = H^-1
    flat = z_flat + jax.scipy.linalg.solve_triangular(chol_prec.T, eps.T, lower=False).T
    draws = jax.vmap(lambda v: point.postprocess_fn(point.unravel(v)))(flat)
    return {k: np.asarray(v) for k, v in draws.items()}, np.asarray(flat)
