"""Loss along one run under a Warmup-Stable-Decay schedule (docs/laws.md section 2, the LR paper's Eq. 4).

    L(D) = L0 + A D^-gamma                                    [nats/token]

for a fixed configuration decayed after D tokens. Each decay branch from a stable-phase checkpoint is
one "trained to D" point. Pure `jax.numpy`, broadcasting, jit- and vmap-able.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["loss_wsd", "tokens_to_target_wsd"]


def loss_wsd(D, L0, A, gamma) -> jax.Array:
    """Loss after decaying at D tokens under WSD (docs/laws.md section 2).

    .. math:: L(D) = L_0 + A D^{-\\gamma}

    Parameters
    ----------
    D : array_like
        Tokens seen when the decay ends (> 0).
    L0 : array_like
        Asymptotic loss of this configuration (nats/token).
    A : array_like
        Coefficient (nats/token times tokens^gamma).
    gamma : array_like
        Data exponent (dimensionless, > 0).

    Returns
    -------
    jax.Array
        Loss in nats/token.
    """
    return L0 + A * jnp.exp(-gamma * jnp.log(D))


def tokens_to_target_wsd(L_target, L0, A, gamma) -> jax.Array:
    """Tokens a WSD run needs to reach ``L_target`` (inverse of `loss_wsd`, docs/laws.md section 2).

    .. math:: D = \\left(\\frac{A}{L^* - L_0}\\right)^{1/\\gamma}, \\qquad
              D = \\infty \\text{ if } L^* \\le L_0

    Parameters
    ----------
    L_target : array_like
        Target loss L* (nats/token).
    L0, A, gamma : array_like
        Parameters of `loss_wsd`.

    Returns
    -------
    jax.Array
        Tokens; ``inf`` where the target is at or below the asymptote L0 (unreachable).
    """
    gap = L_target - L0
    reachable = gap > 0
    # Double `where`: the unselected branch must not see log(<= 0), or its NaN leaks into gradients.
    safe_gap = jnp.where(reachable, gap, 1.0)
    tokens = jnp.exp((jnp.log(A) - jnp.log(safe_gap)) / gamma)
    return jnp.where(reachable, tokens, jnp.inf)
