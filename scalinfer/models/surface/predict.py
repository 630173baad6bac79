r"""Predictions of the surface model at targets (N, D[, lr, batch]), for a *new* setting.

A new setting draws its own offsets from the population, :math:`x^* = x^*(N, D) + \tau_\eta \epsilon`,
:math:`z^* = z^*(N, D) + \tau_B \epsilon'`, :math:`\ell = \ell(N, D) + \tau_L \epsilon''` with
:math:`\epsilon \sim \mathcal N(0, 1)`, so the intervals include the scatter of settings around the laws, not
only the laws' uncertainty. With size scatter it is also of a new size, which draws its own level
(:math:`\tau^{size} e`), unless the target N is within 0.5% of a fitted size's: then it sits around that
size's fitted level (`fitted_size`). From one draw (a point estimate, ``method="map"``) every offset is 0:
the answer is the laws' value at the target.

Quantities: ``lr_opt`` (eta* at B*), ``batch_opt`` (B*, the loss-optimal batch at fixed (N, D), tokens),
``loss_opt`` (nats/token at the joint optimum); with ``batch``, ``lr_opt_at_batch`` (the LR-batch ridge,
`scalinfer.laws.lr.log_lr_opt_at_batch`); with ``lr``, ``loss`` (at ``batch``, else at each draw's B*).

A fit of a reduced design (`scalinfer.models.surface.design`) answers at its table's one batch B_0 (``fixed_batch``:
``lr_opt_at_batch``, ``loss_opt_at_batch``, with ``lr`` ``loss``) or one LR eta_0 (``fixed_lr``:
``batch_opt_at_lr``, ``loss_opt_at_lr``, with ``batch`` ``loss``); a target at another batch (LR) is a
`ModelError`, and the joint optimum (``lr_opt``, ``batch_opt``, ``loss_opt``) is left out (`reduced_note`).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from scalinfer.errors import ModelError
from scalinfer.laws.lr import log_lr_opt_at_batch
from scalinfer.models.base import Arrays
from scalinfer.models.surface.design import LEFT_OUT, design_of, fill_left_out
from scalinfer.models.surface.loss import curvatures, laws, surface_at
from scalinfer.models.surface.priors import LAW_N, NEW_SETTING, SCALARS, SIZE, VALLEY_BY_BATCH
from scalinfer.models.surface.size_scatter import size_offsets

__all__ = ["predict", "fitted_log_N", "fitted_size", "reduced_note"]

#: draw x target values above which a prediction is computed in float32 and by JAX (`_predict_core`)
BIG = 2**22

#: a reduced design's renamed answers: the full model's name -> the reduced one's (absent: left out)
_REDUCED = {"fixed_batch": {"lr_opt_at_batch": "lr_opt_at_batch", "loss_opt": "loss_opt_at_batch", "loss": "loss"},
            "fixed_lr": {"batch_opt": "batch_opt_at_lr", "loss_opt": "loss_opt_at_lr", "loss": "loss"}}


def reduced_note(constants: dict[str, float]) -> str:
    """What a reduced design's fit answers, and what not (a prediction's warning)."""
    if design_of(constants) == "fixed_batch":
        return (f"every run of this fit has one batch, {np.exp(constants['m_b']):.6g} tokens (fixed-batch design): "
                "it answers lr_opt_at_batch and loss_opt_at_batch at that batch only; lr_opt, batch_opt and "
                "loss_opt (the joint optimum over batches) are not answered, as nothing in the table moves the batch")
    return (f"every run of this fit has one peak LR, {np.exp(constants['m_lr']):.6g} (fixed-LR design): it answers "
            "batch_opt_at_lr and loss_opt_at_lr at that LR only; lr_opt, batch_opt and loss_opt (the joint optimum "
            "over LRs) are not answered, as nothing in the table moves the LR")


def _at_fixed(name: str, value, fixed: float, unit: str) -> None:
    """A `ModelError` unless every target `value` is the table's one `fixed` value (within 0.5%)."""
    if value is not None and np.any(np.abs(np.log(np.asarray(value, float) / fixed)) > np.log(1.005)):
        raise ModelError(f"{name}: this fit's runs all have {name} = {fixed:.6g}{unit}, so it answers at that "
                         f"{name} only (got {np.ravel(value)[0]:.6g}); refit a table that varies the {name}")


def predict(draws: Arrays, constants: dict[str, float], N=None, D=None, lr=None, batch=None, seed: int = 0) -> Arrays:
    """Posterior draws at the targets, for a new setting (see the module docstring); `Surface.predict`."""
    if N is None or D is None:
        raise ModelError("the surface model predicts at a target N and D (both needed)")
    arrays = [np.asarray(v, float) for v in (N, D, lr, batch) if v is not None]
    for v in arrays:
        if not np.all(np.isfinite(v) & (v > 0)):
            raise ModelError("targets N, D, lr and batch must be positive finite numbers")
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    design = design_of(constants)
    n_draws = len(draws["tau_loss"])
    if design != "full":  # the left-out sites at the reduced model's values; the targets at the one batch (LR)
        zero = np.zeros(n_draws)
        M = int(constants.get("n_sizes", 1))
        law = LEFT_OUT[design][2]
        draws = {**fill_left_out(dict(draws), design, zero, None, np.zeros((n_draws, M))), f"tau_{law}_size": zero}
        B0, eta0 = float(np.exp(constants["m_b"])), float(np.exp(constants["m_lr"]))
        if design == "fixed_batch":
            _at_fixed("batch", batch, B0, " tokens")
            batch = B0
        else:
            _at_fixed("lr", lr, eta0, "")
            lr = None if batch is None else eta0
    eps = np.random.default_rng(seed).standard_normal((2, len(NEW_SETTING), n_draws))
    if n_draws == 1:  # a point estimate (method=map): the laws' value there, not one random new setting's
        eps[:] = 0.0
    # big grids (over 4M draw x target values) in float32: relative error ~1e-7, far below any interval's width
    big = n_draws * int(np.prod(shape)) > BIG
    ft = np.float32 if big else np.float64
    p = {k: np.asarray(draws[k], ft) for k in SCALARS + tuple(k for k in VALLEY_BY_BATCH if k in draws)}
    eps = eps.astype(ft)
    c = {k: float(constants[k]) for k in ("m_N", "h_N", "m_D", "h_D", "m_lr", "m_b", "m_y")}
    log = lambda v: None if v is None else np.log(np.broadcast_to(np.asarray(v, float), shape)).astype(ft)  # noqa: E731
    size = None  # without size scatter, `_predict_core` skips the size term
    if constants.get("size_scatter"):
        size = _size_terms(draws, constants, np.broadcast_to(np.asarray(N, float), shape), eps[1], ft)
    core = _compiled_core() if big else _predict_core
    out = core(p, eps[0], c, log(N), log(D), log(lr), log(batch), size)
    if design != "full":
        out = {new: out[old] for old, new in _REDUCED[design].items() if old in out}
    return {k: np.asarray(v) for k, v in out.items()}


def _size_terms(draws: Arrays, constants: dict[str, float], N: np.ndarray, eps: np.ndarray, ft):
    """The size term of x*, z*, ell at each target: offsets (3, n_draws, M + 1), the M fitted sizes' levels off
    the law and then a new size's tau_size * eps, and each target's column of them (ints of N's shape)."""
    log_Nm = fitted_log_N(constants)
    M = len(log_Nm)
    # the fitted sizes' levels off the law, as the model computes them for its settings
    q = {k: np.asarray(draws[k], float)[:, None] for v in LAW_N.values() for k in v[:2]}
    q.update({k: np.asarray(draws[k], float) for k in SIZE})
    fitted = size_offsets(q, (log_Nm - constants["m_N"]) / constants["h_N"], np.arange(M))
    off = [np.concatenate([fitted[k], (np.asarray(draws[f"tau_{v}_size"], float) * eps[i])[:, None]], axis=1)
           for i, (k, v) in enumerate(NEW_SETTING.items())]
    return np.stack(off).astype(ft), fitted_size(log_Nm, N)


def fitted_log_N(constants: dict[str, float]) -> np.ndarray:
    """log N of each fitted model size (none for fits saved before they were kept: every target a new size)."""
    M = int(constants["n_sizes"]) if "size_N_0" in constants else 0
    return np.log([constants[f"size_N_{m}"] for m in range(M)])


def fitted_size(log_Nm: np.ndarray, N: np.ndarray) -> np.ndarray:
    """Index of the fitted size each target N is (within 0.5%), else len(log_Nm) (a new size); N's shape."""
    M = len(log_Nm)
    if not M:  # every target is a new size: the only column
        return np.full(np.shape(N), M, dtype=np.int32)
    dist_m = np.abs(np.log(N)[..., None] - log_Nm)
    return np.where(np.min(dist_m, -1) < np.log(1.005), np.argmin(dist_m, -1), M).astype(np.int32)


@functools.cache
def _compiled_core():
    """`_predict_core` in ``jax.numpy``, compiled: one fused computation for a big grid (on 100 x 100 targets from
    4,000 draws, 2-5x faster than NumPy's array by array), at the cost of importing JAX and compiling it."""
    import jax
    import jax.numpy as jnp

    return jax.jit(functools.partial(_predict_core, xp=jnp))


def _predict_core(p, eps, c, log_N, log_D, log_lr, log_b, size=None, xp=np) -> dict[str, Any]:
    """Every draw x every target point, broadcast (no Python loop over the grid). The laws are closed forms
    (`scalinfer.models.surface.loss`), computed in the array namespace `xp`: NumPy (no JAX program to import
    or build: what one target needs), or ``jax.numpy`` under `jax.jit` (`_compiled_core`, for big grids).
    `size`: with size scatter, (offsets, column) from `_size_terms`."""
    ex = (-1,) + (1,) * log_N.ndim
    q = {k: v.reshape(ex) for k, v in p.items()}
    law = laws(q, (log_N - c["m_N"]) / c["h_N"], (log_D - c["m_D"]) / c["h_D"])
    # a new setting: its own offsets at each level
    v = {k: law[k] + q[f"tau_{t}"] * eps[i].reshape(ex) for i, (k, t) in enumerate(NEW_SETTING.items())}
    if size is not None:  # of a fitted size (its level) or of a new one (its own offset)
        off, idx = size
        v = {k: v[k] + off[i][:, idx] for i, k in enumerate(NEW_SETTING)}
    v.update(curvatures(law, q, xp), kappa1=q["kappa1"] + 0.0 * law["x_star"])
    out = {"lr_opt": xp.exp(c["m_lr"] + v["x_star"]), "batch_opt": xp.exp(c["m_b"] + v["z_star"]),
           "loss_opt": xp.exp(c["m_y"] + v["ell"])}
    z = v["z_star"] if log_b is None else log_b - c["m_b"]
    if log_b is not None:
        out["lr_opt_at_batch"] = xp.exp(c["m_lr"] + log_lr_opt_at_batch(z, v["x_star"], v["z_star"], v["kappa1"],
                                                                         q["kappa2"]))
    if log_lr is not None:
        mu, _ = surface_at(q, v, log_lr - c["m_lr"], z, xp=xp)
        out["loss"] = xp.exp(c["m_y"] + mu)
    return dict(sorted(out.items()))  # by name: the order answers have been listed in
