"""Loss as a function of model and data size: the Chinchilla form (docs/laws.md section 1).

    L(N, D) = E + A N^-alpha + B D^-beta                     [nats/token]
    log L   = LSE(a - alpha log N, b - beta log D, e),       A = e^a, B = e^b, E = e^e

N is non-embedding parameters (a count; for MoE total or active, the caller says which), D is
training tokens. Every function is pure `jax.numpy`, broadcasts over its arguments, jits and vmaps,
and keeps the dtype of its inputs (use float64, `jax.config.update("jax_enable_x64", True)`, when N
reaches 1e12: fractional powers of such numbers lose digits in float32).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["loss_chinchilla", "log_loss_chinchilla", "compute_optimal", "ComputeOptimal"]


def loss_chinchilla(N, D, E, A, B, alpha, beta) -> jax.Array:
    """Chinchilla loss surface (docs/laws.md section 1).

    .. math:: L(N, D) = E + A N^{-\\alpha} + B D^{-\\beta}

    Parameters
    ----------
    N : array_like
        Non-embedding parameters (count, > 0).
    D : array_like
        Training tokens (> 0).
    E : array_like
        Irreducible loss (nats/token).
    A, B : array_like
        Coefficients of the model-size and data-size terms (nats/token times count^alpha,
        tokens^beta).
    alpha, beta : array_like
        Exponents of N and D (dimensionless, > 0).

    Returns
    -------
    jax.Array
        Loss in nats/token, broadcast over the arguments.

    Examples
    --------
    Hoffmann et al.'s fit at N = 70e9, D = 1.4e12:

    >>> loss = loss_chinchilla(70e9, 1.4e12, E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
    >>> round(float(loss), 3)
    1.937
    """
    # exp(-alpha log N) rather than N**-alpha: the same in exact arithmetic, and it keeps the
    # large count inside a log before any power is taken.
    return E + A * jnp.exp(-alpha * jnp.log(N)) + B * jnp.exp(-beta * jnp.log(D))


def log_loss_chinchilla(log_N, log_D, a, b, e, alpha, beta) -> jax.Array:
    """Log of the Chinchilla loss in log-sum-exp form (docs/laws.md section 1).

    .. math:: \\log L = \\mathrm{LSE}(a - \\alpha \\log N,\\; b - \\beta \\log D,\\; e)

    with :math:`A = e^a`, :math:`B = e^b`, :math:`E = e^e`, so every term of the loss is positive
    whatever the real-valued ``a, b, e``; this is the form to fit (Epoch AI's refit minimizes a
    Huber loss on it).

    Parameters
    ----------
    log_N : array_like
        Natural log of non-embedding parameters (log count).
    log_D : array_like
        Natural log of training tokens.
    a, b, e : array_like
        Logs of the coefficients A, B and of the irreducible loss E (log of nats/token for e).
    alpha, beta : array_like
        Exponents of N and D (dimensionless).

    Returns
    -------
    jax.Array
        log L, L in nats/token.
    """
    return jnp.logaddexp(jnp.logaddexp(a - alpha * log_N, b - beta * log_D), e)


class ComputeOptimal(NamedTuple):
    """Compute-optimal allocation of a FLOP budget (docs/laws.md section 1).

    Attributes
    ----------
    N_opt : jax.Array
        Loss-minimizing non-embedding parameters (count).
    D_opt : jax.Array
        Matching training tokens, D_opt = C / (6 N_opt).
    """

    N_opt: jax.Array
    D_opt: jax.Array


def compute_optimal(C, A, B, alpha, beta) -> ComputeOptimal:
    """Loss-minimizing (N, D) on the isoFLOP line C = 6 N D (docs/laws.md section 1).

    .. math::

        N_{opt} = G (C/6)^{\\beta/(\\alpha+\\beta)}, \\quad
        D_{opt} = G^{-1} (C/6)^{\\alpha/(\\alpha+\\beta)}, \\quad
        G = \\left(\\frac{\\alpha A}{\\beta B}\\right)^{1/(\\alpha+\\beta)}

    obtained by setting d L(N, C/(6N)) / dN = 0 in the Chinchilla form; E does not enter.

    Parameters
    ----------
    C : array_like
        Training compute in FLOPs (> 0), with the 6 N D approximation.
    A, B, alpha, beta : array_like
        Chinchilla coefficients and exponents, as in `loss_chinchilla`.

    Returns
    -------
    ComputeOptimal
        ``(N_opt, D_opt)``: parameters (count) and tokens, with 6 N_opt D_opt = C.
    """
    log_half_budget = jnp.log(C) - math.log(6.0)  # log(C / 6) = log(N D)
    total = alpha + beta
    log_G = (jnp.log(alpha) + jnp.log(A) - jnp.log(beta) - jnp.log(B)) / total
    log_N_opt = log_G + beta / total * log_half_budget
    log_D_opt = -log_G + alpha / total * log_half_budget
    return ComputeOptimal(jnp.exp(log_N_opt), jnp.exp(log_D_opt))
