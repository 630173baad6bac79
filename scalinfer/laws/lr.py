"""Loss against learning rate, and the optimal-learning-rate law (MATH.md sections 3 and 4).

    L(eta | N, D) = L_min + C (log eta - log eta*)^2          (section 3, the LR valley)
    log eta*(N, D) = log c + a log N + b log D                  (section 4, the Fitting paradigm)

eta is the peak learning rate (dimensionless for Adam-type optimizers), logs are natural. Pure
`jax.numpy`, broadcasting, jit- and vmap-able.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["loss_lr_valley", "loss_lr_valley_asymmetric", "lr_opt_law", "log_lr_opt_law"]


def loss_lr_valley(log_lr, L_min, C, log_lr_opt) -> jax.Array:
    """Quadratic LR valley in log eta at fixed (N, D) (MATH.md section 3).

    .. math:: L(\\eta) = L_{min} + C (\\log \\eta - \\log \\eta^*)^2

    Parameters
    ----------
    log_lr : array_like
        Natural log of the peak learning rate.
    L_min : array_like
        Loss at the optimum (nats/token).
    C : array_like
        Curvature (nats/token per squared log-LR unit, > 0).
    log_lr_opt : array_like
        Natural log of the optimal peak learning rate eta*.

    Returns
    -------
    jax.Array
        Loss in nats/token.
    """
    return L_min + C * jnp.square(log_lr - log_lr_opt)


def loss_lr_valley_asymmetric(log_lr, L_min, C_below, C_above, log_lr_opt) -> jax.Array:
    """LR valley with its own curvature on each side of the optimum (MATH.md section 3).

    .. math::

        L(\\eta) = L_{min} + \\begin{cases}
            C_{below} (\\log \\eta - \\log \\eta^*)^2 & \\eta < \\eta^* \\\\
            C_{above} (\\log \\eta - \\log \\eta^*)^2 & \\eta \\ge \\eta^*
        \\end{cases}

    Both halves have value L_min and slope 0 at eta*, so the loss is continuous with a continuous
    first derivative there (in log_lr and in every parameter); only the second derivative jumps.
    Real valleys rise faster above eta* (C_above > C_below). With C_below = C_above = C this is
    `loss_lr_valley`.

    Parameters
    ----------
    log_lr : array_like
        Natural log of the peak learning rate.
    L_min : array_like
        Loss at the optimum (nats/token).
    C_below, C_above : array_like
        Curvatures below and above eta* (nats/token per squared log-LR unit, > 0).
    log_lr_opt : array_like
        Natural log of the optimal peak learning rate eta*.

    Returns
    -------
    jax.Array
        Loss in nats/token.
    """
    offset = log_lr - log_lr_opt
    curvature = jnp.where(offset < 0, C_below, C_above)
    return L_min + curvature * jnp.square(offset)


def log_lr_opt_law(log_N, log_D, log_c, a, b) -> jax.Array:
    """Log of the optimal peak learning rate (MATH.md section 4).

    .. math:: \\log \\eta^*(N, D) = \\log c + a \\log N + b \\log D

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
    """Optimal peak learning rate eta*(N, D) (MATH.md section 4).

    .. math:: \\eta^*(N, D) = c\\, N^{a} D^{b}, \\qquad c = e^{\\log c}

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
    return jnp.exp(log_lr_opt_law(jnp.log(N), jnp.log(D), log_c, a, b))
