r"""Loss against learning rate, the optimal-learning-rate law, and the LR-batch ridge (docs/laws.md sections 3-4).

With x = log eta (peak learning rate, dimensionless for Adam-type optimizers) and z = log B (batch in
tokens), natural logs:

.. math::

    L(\eta) &= L_{min} + V(\log \eta - \log \eta^*), \qquad
        V(u) = \tfrac{2 C_\pm}{p}\big((1 + u^2)^{p/2} - 1\big)         && \text{(the LR valley)} \\
    \log \eta^*(N, D) &= \log c + a \log N + b \log D                     && \text{(the law of eta*)} \\
    \log \eta^*(N, D, B) &= \log \eta^* + \kappa_1 v + \tfrac12 \kappa_2 v^2, \quad v = \log B - \log B^*
        && \text{(the LR-batch ridge)}

The valley is C u^2 (section 3's quadratic) for p = 2 and equal sides; the batch valley around B* is the
same function of log B - log B* (`valley`). B*(N, D) is `scalinfer.laws.batch.log_batch_opt_law`.

Pure `jax.numpy` (the laws are plain arithmetic and keep NumPy inputs NumPy), broadcasting, jit- and
vmap-able.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jax

__all__ = ["valley", "valley_at", "log_lr_opt_law", "lr_opt_law", "log_lr_opt_at_batch"]


def valley(offset, log_c, delta=0.0, p=2.0, xp=None) -> jax.Array:
    r"""Excess loss of a smooth, asymmetric valley at ``offset`` from its optimum (docs/laws.md section 3).

    .. math::

        V(u) = \frac{2 C_\pm}{p}\Big((1 + u^2)^{p/2} - 1\Big), \qquad
        \log C_\pm = \log c \pm \delta \quad (+ \text{ for } u \ge 0,\ - \text{ for } u < 0)

    Near the optimum V = C_+- u^2 (for any p): the quadratic valley, with its own curvature on each
    side (real LR valleys rise faster above eta*, delta > 0). Far from it V grows as |u|^p: p < 2 is
    flatter than a parabola, p = 2 is C_+- u^2 exactly. V is infinitely smooth in every parameter and
    C^1 in u at 0 (only the curvature jumps there, by e^{2 delta}); a bare |u|^p with p < 2 would have
    unbounded curvature at the optimum.

    The LR valley is V(log eta - log eta*); the batch valley V(log B - log B*) has the same form.

    Parameters
    ----------
    offset : array_like
        u, the distance from the optimum in natural-log units (e.g. log eta - log eta*).
    log_c : array_like
        log c, the log of the valley's geometric-mean curvature (loss units per squared log unit).
    delta : array_like
        Half the log ratio of the curvatures above and below the optimum (0: symmetric).
    p : array_like
        Far-field exponent (> 0; 2: quadratic throughout).
    xp : module, optional
        The array namespace to compute in: ``numpy`` (NumPy arrays in, NumPy out, no JAX program: a prediction
        from saved draws) or ``jax.numpy`` (None, the default).

    Returns
    -------
    jax.Array
        V(u), in the loss's units (the surface model adds it to a log loss); an array of `xp`.

    Examples
    --------
    >>> import math
    >>> f"{float(valley(math.log(3.0), math.log(0.05))):.6f}"  # p = 2, symmetric: 0.05 (log 3)^2
    '0.060347'
    """
    if xp is None:
        import jax.numpy as xp
    return xp.exp(xp.where(offset < 0, log_c - delta, log_c + delta)) * (2.0 / p) * _rise(offset, p, xp)


def valley_at(offset, below, above, p=2.0, xp=None) -> jax.Array:
    r"""`valley` given its two curvatures, C_- (`below`, for u < 0) and C_+ (`above`), not log c and delta:
    V(u) = (2 C_\pm / p)((1 + u^2)^{p/2} - 1). What a model evaluates when many points share a valley: the
    curvatures exp(log c -+ delta) computed once per valley, not once per point.

    Examples
    --------
    >>> import math
    >>> f"{float(valley_at(math.log(3.0), 0.01, 0.05)):.6f}"  # above the optimum: C_+ (log 3)^2
    '0.060347'
    """
    if xp is None:
        import jax.numpy as xp
    return xp.where(offset < 0, below, above) * (2.0 / p) * _rise(offset, p, xp)


def _rise(offset, p, xp):
    """(1 + u^2)^{p/2} - 1."""
    return xp.expm1(0.5 * p * xp.log1p(offset * offset))


def log_lr_opt_law(log_N, log_D, log_c, a, b) -> jax.Array:
    r"""Log of the optimal peak learning rate (docs/laws.md section 4).

    .. math:: \log \eta^*(N, D) = \log c + a \log N + b \log D

    The form holds in any affine coordinates of log N and log D: the surface model evaluates it at its
    centered, scaled (n, d) with its own intercept and slopes.

    Parameters
    ----------
    log_N : array_like
        Natural log of non-embedding parameters (count; total or active for MoE, as fitted).
    log_D : array_like
        Natural log of training tokens.
    log_c : array_like
        Log of the prefactor c (eta* at N = D = 1).
    a, b : array_like
        Exponents of N and D (dimensionless).

    Returns
    -------
    jax.Array
        log eta*.
    """
    return log_c + a * log_N + b * log_D


def lr_opt_law(N, D, log_c, a, b) -> jax.Array:
    r"""Optimal peak learning rate eta*(N, D) (docs/laws.md section 4).

    .. math:: \eta^*(N, D) = c\, N^{a} D^{b}, \qquad c = e^{\log c}

    Parameters
    ----------
    N : array_like
        Non-embedding parameters (count, > 0; total or active for MoE, as fitted).
    D : array_like
        Training tokens (> 0).
    log_c, a, b : array_like
        As in `log_lr_opt_law`.

    Returns
    -------
    jax.Array
        eta*, the peak learning rate (dimensionless).

    Examples
    --------
    The LR paper's law (units of N unverified), 38.4588 N^-0.2219 D^-0.3509:

    >>> import math
    >>> eta = lr_opt_law(1e9, 1e11, log_c=math.log(38.4588), a=-0.2219, b=-0.3509)
    >>> f"{float(eta):.3e}"
    '5.346e-05'
    """
    import jax.numpy as jnp

    return jnp.exp(log_lr_opt_law(jnp.log(N), jnp.log(D), log_c, a, b))


def log_lr_opt_at_batch(log_batch, log_lr_opt, log_batch_opt, kappa1, kappa2) -> jax.Array:
    r"""The LR-batch ridge: log of the optimal peak LR at batch B, around the joint optimum (eta*, B*).

    .. math::

        \log \eta^*(B) = \log \eta^* + \kappa_1 v + \tfrac12 \kappa_2 v^2, \qquad v = \log B - \log B^*

    At B = B* the ridge passes through eta*, so (eta*, B*) is the joint optimum. kappa_1 is
    d log eta*/d log B there (1/2: Adam's square-root rule; 1: linear scaling, SGD); kappa_2 lets the
    ridge bend (e.g. flatten beyond B*).

    Parameters
    ----------
    log_batch : array_like
        Natural log of the batch (tokens per step).
    log_lr_opt, log_batch_opt : array_like
        log eta* and log B* of the joint optimum (any common offsets of the logs cancel in v).
    kappa1, kappa2 : array_like
        Slope and curvature of the ridge in log-log units.

    Returns
    -------
    jax.Array
        log eta*(B).
    """
    v = log_batch - log_batch_opt
    return log_lr_opt + kappa1 * v + 0.5 * kappa2 * v * v
