"""Published hyperparameter laws to compare against (docs/laws.md section 4).

The constants below are the peer laws' published reference values: they *are* the baselines, not
defaults for our fits. Each law is only meaningful in its authors' setting (optimizer, schedule,
data, architecture) and with its own definition of the optimal batch:

- Step Law (Li et al. 2025): eta* = 1.79 N^-0.713 D^0.307, B* = 0.58 D^0.571 tokens; N non-embedding
  parameters, D tokens; loss-optimal (eta, B) at fixed (N, D), fit to runs within 0.25% of each
  grid's best loss.
- DeepSeek LLM (2024): eta* = 0.3118 C^-0.125, B* = 0.2920 C^0.3271 tokens; C = M D FLOPs with M the
  non-embedding FLOPs per token; loss-optimal at fixed compute.
- Zhou et al. 2026 (the LR paper): eta* = 38.4588 N^-0.2219 D^-0.3509 (MoE, WSD, standard init).
  Whether N is a raw count or millions, total or active, is unverified.

Bjorck et al. 2025 (eta* proportional to D^-0.32 at fixed N) gives no prefactor and is not a
baseline here. `BASELINES` maps a name to ``(lr_opt(N, D), batch_opt(N, D) or None)``.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "step_law_lr_opt",
    "step_law_batch_opt",
    "deepseek_lr_opt",
    "deepseek_batch_opt",
    "deepseek_flops_per_token",
    "compute_6nd",
    "zhou_lr_opt",
    "Baseline",
    "BASELINES",
]


def _power_law(log_prefactor, *terms) -> jax.Array:
    """exp(log_prefactor) * prod(x ** k) for (x, k) in terms, evaluated in log space.

    ``log_prefactor`` is a Python float (weakly typed), so the result keeps the inputs' precision.
    """
    log_value = log_prefactor
    for x, k in terms:
        log_value = log_value + k * jnp.log(x)
    return jnp.exp(log_value)


def step_law_lr_opt(N, D) -> jax.Array:
    """Step Law optimal peak learning rate (Li et al. 2025; docs/laws.md section 4).

    .. math:: \\eta^* = 1.79\\, N^{-0.713} D^{0.307}

    Parameters
    ----------
    N : array_like
        Non-embedding parameters (count).
    D : array_like
        Training tokens.

    Returns
    -------
    jax.Array
        Peak learning rate (AdamW).
    """
    return _power_law(math.log(1.79), (N, -0.713), (D, 0.307))


def step_law_batch_opt(D) -> jax.Array:
    """Step Law optimal batch size (Li et al. 2025; docs/laws.md section 4).

    .. math:: B^* = 0.58\\, D^{0.571}

    The loss-optimal batch at fixed (N, D); it does not depend on N.

    Parameters
    ----------
    D : array_like
        Training tokens.

    Returns
    -------
    jax.Array
        Batch size in tokens per step.
    """
    return _power_law(math.log(0.58), (D, 0.571))


def deepseek_lr_opt(C) -> jax.Array:
    """DeepSeek LLM optimal peak learning rate (DeepSeek-AI 2024; docs/laws.md section 4).

    .. math:: \\eta^* = 0.3118\\, C^{-0.125}

    Parameters
    ----------
    C : array_like
        Training compute C = M D in FLOPs, M the non-embedding FLOPs per token
        (`deepseek_flops_per_token`, or `compute_6nd` when only N is known).

    Returns
    -------
    jax.Array
        Peak learning rate (AdamW).
    """
    return _power_law(math.log(0.3118), (C, -0.125))


def deepseek_batch_opt(C) -> jax.Array:
    """DeepSeek LLM optimal batch size (DeepSeek-AI 2024; docs/laws.md section 4).

    .. math:: B^* = 0.2920\\, C^{0.3271}

    Parameters
    ----------
    C : array_like
        Training compute C = M D in FLOPs, as in `deepseek_lr_opt`.

    Returns
    -------
    jax.Array
        Batch size in tokens per step.
    """
    return _power_law(math.log(0.2920), (C, 0.3271))


def deepseek_flops_per_token(n_layers, d_model, seq_len) -> jax.Array:
    """Non-embedding FLOPs per token M as DeepSeek LLM defines it, for a dense transformer.

    .. math:: M = 72\\, n_{layer} d_{model}^2 + 6\\, n_{layer} d_{model} l_{seq}

    (forward plus backward; the second term is attention over the context, which 6 N omits). Then
    C = M D is the compute their laws take.

    Parameters
    ----------
    n_layers : array_like
        Transformer blocks.
    d_model : array_like
        Model width.
    seq_len : array_like
        Training sequence length (tokens).

    Returns
    -------
    jax.Array
        FLOPs per token.
    """
    return 72.0 * n_layers * jnp.square(d_model) + 6.0 * n_layers * d_model * seq_len


def compute_6nd(N, D) -> jax.Array:
    """Training compute C = 6 N D, the approximation M = 6 N of FLOPs per token.

    .. math:: C \\approx 6 N D

    Use it to evaluate DeepSeek's laws when only N is known: it drops the attention-over-context
    FLOPs of `deepseek_flops_per_token` (so it underestimates M, most for small models with long
    sequences). For MoE, pass the *active* non-embedding parameters.

    Parameters
    ----------
    N : array_like
        Non-embedding parameters (count).
    D : array_like
        Training tokens.

    Returns
    -------
    jax.Array
        FLOPs.
    """
    return 6.0 * N * D


def zhou_lr_opt(N, D) -> jax.Array:
    """The LR paper's optimal peak learning rate (Zhou et al. 2026; docs/laws.md section 4).

    .. math:: \\eta^* = 38.4588\\, N^{-0.2219} D^{-0.3509}

    Fit on MoE models with WSD and standard initialization (R^2 = 0.962). **Units unverified**:
    whether N is a raw count or in millions (and total or active parameters), and D raw tokens,
    is not established from the sources available; with raw counts, N = 1e9 and D = 1e11 give
    eta* ~ 5e-5, small for models of that size, so treat absolute values with care.

    Parameters
    ----------
    N : array_like
        Parameters, in the paper's (unverified) unit.
    D : array_like
        Training tokens, in the paper's (unverified) unit.

    Returns
    -------
    jax.Array
        Peak learning rate.
    """
    return _power_law(math.log(38.4588), (N, -0.2219), (D, -0.3509))


class Baseline(NamedTuple):
    """A peer law as functions of (N, D).

    Attributes
    ----------
    lr_opt : Callable
        ``lr_opt(N, D)`` -> optimal peak learning rate.
    batch_opt : Callable or None
        ``batch_opt(N, D)`` -> optimal batch in tokens per step, or None where the peer gives no
        batch law.
    """

    lr_opt: Callable[..., jax.Array]
    batch_opt: Callable[..., jax.Array] | None


def _step_law_batch_opt_nd(N, D) -> jax.Array:
    """`step_law_batch_opt` as a function of (N, D); N does not enter."""
    del N  # Step Law's B* depends on D only
    return step_law_batch_opt(D)


def _deepseek_lr_opt_nd(N, D) -> jax.Array:
    """`deepseek_lr_opt` at C = 6 N D (`compute_6nd`)."""
    return deepseek_lr_opt(compute_6nd(N, D))


def _deepseek_batch_opt_nd(N, D) -> jax.Array:
    """`deepseek_batch_opt` at C = 6 N D (`compute_6nd`)."""
    return deepseek_batch_opt(compute_6nd(N, D))


BASELINES: Mapping[str, Baseline] = types.MappingProxyType(
    {
        "step_law": Baseline(step_law_lr_opt, _step_law_batch_opt_nd),
        "deepseek_llm": Baseline(_deepseek_lr_opt_nd, _deepseek_batch_opt_nd),
        "zhou2026": Baseline(zhou_lr_opt, None),
    }
)
"""Peer laws by name -> ``Baseline(lr_opt(N, D), batch_opt(N, D) or None)`` (read-only).

DeepSeek's entries take C = 6 N D (`compute_6nd`); call `deepseek_lr_opt` with C = M D directly when
M is known.
"""
