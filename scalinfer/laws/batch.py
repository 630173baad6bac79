"""Batch size: steps-tokens trade-offs to reach a target loss (docs/laws.md section 5).

Three models of how the optimizer steps S and the tokens E = B S needed to reach a target loss
depend on the batch B (tokens per step):

- OpenAI's empirical model (McCandlish et al. 2018), with its gradient-noise-scale estimator:
  S = S_min (1 + B_crit / B), E = E_min (1 + B / B_crit), (S/S_min - 1)(E/E_min - 1) = 1;
- the batch-size paper's piecewise E(S) under WSD (inverse, quadratic, linear stages);
- our mechanistic noise-floor surface L(S; B) = L_inf + a S^-alpha + c / B, which produces all three
  stages and gives B_min, B_opt, S_min, S_opt in closed form.

and the law of the loss-optimal batch at fixed (N, D), log B*(N, D) = log c_B + a_B log N + b_B log D
(`log_batch_opt_law`; the surface model's, with the LR valley and ridge of `scalinfer.laws.lr`).

The batch sizes they return follow different definitions (docs/laws.md section 5.4 lists them; their names
in the answers: `scalinfer.quantities`): B_crit = E_min / S_min, which is the 2x-overhead point (twice the
fewest steps and twice the fewest tokens) only under OpenAI's hyperbola, not under the other two curves
(under the noise floor E_min / S_min = (1 + 1/alpha)(1 + alpha)^(1/alpha) B_min, ~2.1 B_opt at alpha = 0.7,
where steps and tokens are both ~1.36x their minima); B_min the smallest batch that reaches the target at
all; B_opt (``batch_token_opt``) the batch that reaches it with the fewest tokens at constant LR; B*
(``batch_loss_opt``) the batch of the lowest loss at fixed (N, D). Compare numbers only within one definition.

Units: batch in tokens per optimizer step, S in optimizer steps, E in tokens, loss in nats/token.
Every function is pure `jax.numpy`, broadcasts over its arguments and jits/vmaps; where a target is
out of reach the result is ``inf`` (never NaN), and the unselected branch is evaluated on a safe
value so gradients stay finite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import jax

__all__ = [
    # OpenAI / McCandlish et al. 2018
    "steps_openai",
    "tokens_openai",
    "tokens_at_steps_openai",
    "batch_crit_openai",
    "GradNoiseScale",
    "b_simple_from_grad_norms",
    # the batch-size paper's piecewise E(S) under WSD
    "WsdPiecewiseCoefficients",
    "wsd_piecewise_coefficients",
    "tokens_wsd_piecewise",
    # the noise-floor surface
    "loss_noise_floor",
    "batch_min_floor",
    "steps_min_floor",
    "tokens_floor",
    "steps_opt_floor",
    "batch_opt_floor",
    "tokens_min_floor",
    "steps_to_target_floor",
    "tokens_to_target_floor",
    # the loss-optimal batch at fixed (N, D)
    "log_batch_opt_law",
]


# --------------------------------------------------------------------------------------------
# OpenAI's empirical model (McCandlish et al. 2018)
# --------------------------------------------------------------------------------------------


def steps_openai(batch_tokens, S_min, B_crit) -> jax.Array:
    """Steps to reach a target loss at batch B, OpenAI's model (docs/laws.md section 5).

    .. math:: S(B) = S_{min} \\left(1 + \\frac{B_{crit}}{B}\\right)

    Parameters
    ----------
    batch_tokens : array_like
        Batch size B (tokens per step, > 0).
    S_min : array_like
        Steps needed with an infinite batch (steps).
    B_crit : array_like
        Critical batch E_min / S_min (tokens per step).

    Returns
    -------
    jax.Array
        Optimizer steps.
    """
    return S_min * (1.0 + B_crit / batch_tokens)


def tokens_openai(batch_tokens, S_min, B_crit) -> jax.Array:
    """Tokens to reach a target loss at batch B, OpenAI's model (docs/laws.md section 5).

    .. math:: E(B) = B\\, S(B) = S_{min} (B + B_{crit})
              = E_{min} \\left(1 + \\frac{B}{B_{crit}}\\right), \\qquad E_{min} = S_{min} B_{crit}

    Under this model a larger batch always costs more tokens.

    Parameters
    ----------
    batch_tokens, S_min, B_crit : array_like
        As in `steps_openai`.

    Returns
    -------
    jax.Array
        Tokens.
    """
    return S_min * (batch_tokens + B_crit)


def tokens_at_steps_openai(S, S_min, E_min) -> jax.Array:
    """Tokens on OpenAI's steps-tokens hyperbola at S steps (docs/laws.md section 5).

    Solves :math:`(S/S_{min} - 1)(E/E_{min} - 1) = 1` for E:

    .. math:: E(S) = E_{min} \\frac{S}{S - S_{min}}, \\qquad E = \\infty \\text{ for } S \\le S_{min}

    Parameters
    ----------
    S : array_like
        Optimizer steps.
    S_min : array_like
        Fewest steps that can reach the target (infinite batch).
    E_min : array_like
        Fewest tokens that can reach the target (tokens; batch -> 0).

    Returns
    -------
    jax.Array
        Tokens; ``inf`` where S <= S_min (unreachable in S steps).
    """
    import jax.numpy as jnp

    reachable = S > S_min
    safe_S = jnp.where(reachable, S, 2.0 * S_min + 1.0)
    return jnp.where(reachable, E_min * safe_S / (safe_S - S_min), jnp.inf)


def batch_crit_openai(S_min, E_min) -> jax.Array:
    """OpenAI's critical batch (docs/laws.md section 5): E_min / S_min, their model's 2x-overhead point.

    .. math:: B_{crit} = E_{min} / S_{min}

    On OpenAI's hyperbola (`steps_openai`) both the steps and the tokens at B = B_crit are twice their
    minimum. That is a property of the hyperbola, not of E_min / S_min: on another steps-tokens curve the same
    ratio is another point (on the noise floor's, ~1.36x both at alpha = 0.7; `batch_opt_floor`).

    Parameters
    ----------
    S_min : array_like
        Fewest steps that can reach the target (steps).
    E_min : array_like
        Fewest tokens that can reach the target (tokens).

    Returns
    -------
    jax.Array
        Tokens per step.
    """
    return E_min / S_min


class GradNoiseScale(NamedTuple):
    """Estimates of the simple gradient noise scale and its two parts (docs/laws.md section 5).

    The batch unit is the one the caller used for ``batch_small`` / ``batch_big`` (examples,
    sequences or tokens); ``trace_cov`` is then the covariance trace of one such unit's gradient.

    Attributes
    ----------
    b_simple : jax.Array
        B_simple = tr(Sigma) / |G|^2 (batch units).
    grad_sq_norm : jax.Array
        Estimate of |G|^2, the squared norm of the true (full-batch) gradient.
    trace_cov : jax.Array
        Estimate of tr(Sigma), the trace of the per-unit gradient covariance.
    """

    b_simple: jax.Array
    grad_sq_norm: jax.Array
    trace_cov: jax.Array


def b_simple_from_grad_norms(sq_norm_small, sq_norm_big, batch_small, batch_big) -> GradNoiseScale:
    """Gradient noise scale from squared gradient norms at two batch sizes (docs/laws.md section 5).

    A mean gradient over a batch of B units has :math:`E|G_B|^2 = |G|^2 + tr(\\Sigma)/B`. Two batch
    sizes give two equations, solved for the unbiased estimates

    .. math::

        |G|^2 \\approx \\frac{B_{big} |G_{big}|^2 - B_{small} |G_{small}|^2}{B_{big} - B_{small}},
        \\qquad
        tr(\\Sigma) \\approx \\frac{|G_{small}|^2 - |G_{big}|^2}{1/B_{small} - 1/B_{big}},
        \\qquad
        B_{simple} = tr(\\Sigma) / |G|^2 .

    Each estimate is unbiased but noisy; their ratio is not unbiased. Average ``grad_sq_norm`` and
    ``trace_cov`` over many steps (e.g. an exponential moving average) and divide the averages,
    rather than averaging per-step ``b_simple``: from a single step the |G|^2 estimate can even be
    negative.

    Parameters
    ----------
    sq_norm_small : array_like
        |G_small|^2, squared norm of the mean gradient over ``batch_small`` units.
    sq_norm_big : array_like
        |G_big|^2, squared norm of the mean gradient over ``batch_big`` units.
    batch_small, batch_big : array_like
        The two batch sizes (same unit; batch_big > batch_small).

    Returns
    -------
    GradNoiseScale
        ``(b_simple, grad_sq_norm, trace_cov)``.
    """
    grad_sq_norm = (batch_big * sq_norm_big - batch_small * sq_norm_small) / (batch_big - batch_small)
    trace_cov = (sq_norm_small - sq_norm_big) / (1.0 / batch_small - 1.0 / batch_big)
    return GradNoiseScale(trace_cov / grad_sq_norm, grad_sq_norm, trace_cov)


# --------------------------------------------------------------------------------------------
# The batch-size paper's piecewise E(S) under WSD
# --------------------------------------------------------------------------------------------


class WsdPiecewiseCoefficients(NamedTuple):
    """Derived coefficients of the piecewise E(S) (see `wsd_piecewise_coefficients`).

    Attributes
    ----------
    B_m1 : jax.Array
        B_-1 of the inverse stage (tokens times steps).
    B_0 : jax.Array
        B_0 of the inverse stage (tokens).
    A_0 : jax.Array
        Intercept of the linear stage (tokens).
    batch_min : jax.Array
        B_min = A_1, the smallest batch that reaches the target at all (tokens per step).
    batch_opt : jax.Array
        B_opt = E_min / S_opt, the batch that reaches it with the fewest tokens (tokens per step).
    """

    B_m1: jax.Array
    B_0: jax.Array
    A_0: jax.Array
    batch_min: jax.Array
    batch_opt: jax.Array


def wsd_piecewise_coefficients(S_min, S_1, S_opt, S_2, E_min, C, A_1) -> WsdPiecewiseCoefficients:
    """Coefficients of the piecewise E(S) fixed by continuity at the breakpoints (docs/laws.md section 5).

    The paper's stages are

    .. math::

        E(S) = \\begin{cases}
            B_{-1} / (S - S_{min}) + B_0 & S_{min} < S < S_1 \\quad\\text{(inverse)} \\\\
            C (S - S_{opt})^2 + E_{min} & S_1 \\le S \\le S_2 \\quad\\text{(quadratic)} \\\\
            A_1 S + A_0 & S > S_2 \\quad\\text{(linear)}
        \\end{cases}

    Free parameters: S_min < S_1 < S_opt < S_2, E_min > 0, C > 0, A_1 > 0. Derived:

    - at S_1, value and slope continuity (the inverse stage joins the parabola smoothly):
      :math:`-B_{-1}/(S_1 - S_{min})^2 = 2 C (S_1 - S_{opt})` and equal values give

      .. math:: B_{-1} = 2 C (S_{opt} - S_1)(S_1 - S_{min})^2, \\qquad
                B_0 = E_{min} + C (S_{opt} - S_1)^2 - 2 C (S_{opt} - S_1)(S_1 - S_{min})

      (B_-1 > 0 because S_1 < S_opt, so E falls through the inverse stage);
    - at S_2, value continuity: :math:`A_0 = E_{min} + C (S_2 - S_{opt})^2 - A_1 S_2`. The slope
      is continuous there too only if S_2 = S_opt + A_1 / (2 C); pass that S_2 for a C^1 curve
      (one parameter fewer), any other S_2 > S_opt leaves a kink.

    Then B_min = A_1 (E/S -> A_1 as S -> infinity) and B_opt = E_min / S_opt.

    Parameters
    ----------
    S_min, S_1, S_opt, S_2 : array_like
        Breakpoints and the token-optimal step count (steps), S_min < S_1 < S_opt < S_2.
    E_min : array_like
        Fewest tokens that reach the target (tokens).
    C : array_like
        Curvature of the quadratic stage (tokens per squared step).
    A_1 : array_like
        Slope of the linear stage (tokens per step).

    Returns
    -------
    WsdPiecewiseCoefficients
        ``(B_m1, B_0, A_0, batch_min, batch_opt)``.
    """
    import jax.numpy as jnp

    to_opt = S_opt - S_1
    past_min = S_1 - S_min
    B_m1 = 2.0 * C * to_opt * jnp.square(past_min)
    B_0 = E_min + C * jnp.square(to_opt) - 2.0 * C * to_opt * past_min
    A_0 = E_min + C * jnp.square(S_2 - S_opt) - A_1 * S_2
    return WsdPiecewiseCoefficients(B_m1, B_0, A_0, jnp.asarray(A_1), E_min / S_opt)


def tokens_wsd_piecewise(S, S_min, S_1, S_opt, S_2, E_min, C, A_1) -> jax.Array:
    """Tokens to reach a target loss in S steps, the batch-size paper's piecewise E(S) (docs/laws.md section 5).

    The inverse / quadratic / linear stages of `wsd_piecewise_coefficients`, whose docstring gives
    the equations and how B_-1, B_0 and A_0 follow from continuity. E(S) is continuous in S, with a
    continuous slope at S_1; its minimum is E_min at S_opt.

    Parameters
    ----------
    S : array_like
        Optimizer steps.
    S_min, S_1, S_opt, S_2, E_min, C, A_1 : array_like
        As in `wsd_piecewise_coefficients` (steps, tokens, tokens/step^2, tokens/step).

    Returns
    -------
    jax.Array
        Tokens; ``inf`` where S <= S_min (no batch reaches the target in S steps).
    """
    import jax.numpy as jnp

    B_m1, B_0, A_0, _, _ = wsd_piecewise_coefficients(S_min, S_1, S_opt, S_2, E_min, C, A_1)
    reachable = S > S_min
    safe_S = jnp.where(reachable, S, S_1)  # S_1 > S_min: the inverse stage stays finite
    inverse = B_m1 / (safe_S - S_min) + B_0
    quadratic = C * jnp.square(S - S_opt) + E_min
    linear = A_1 * S + A_0
    tokens = jnp.where(S < S_1, inverse, jnp.where(S <= S_2, quadratic, linear))
    return jnp.where(reachable, tokens, jnp.inf)


# --------------------------------------------------------------------------------------------
# The noise-floor surface (our reconstruction)
# --------------------------------------------------------------------------------------------


def loss_noise_floor(S, batch_tokens, L_inf, a, alpha, c) -> jax.Array:
    """Loss at step S of a constant-LR run with batch B: the noise-floor surface (docs/laws.md section 5).

    .. math:: L(S; B) = L_\\infty + a S^{-\\alpha} + c / B

    Our mechanistic reconstruction (not the paper's derivation): the batch sets a noise floor c/B
    that the stable phase cannot go below.

    Parameters
    ----------
    S : array_like
        Optimizer steps (> 0).
    batch_tokens : array_like
        Batch size B (tokens per step, > 0).
    L_inf : array_like
        Loss with infinitely many steps and an infinite batch (nats/token).
    a : array_like
        Step-term coefficient (nats/token times steps^alpha).
    alpha : array_like
        Step exponent (dimensionless, > 0).
    c : array_like
        Noise-floor coefficient (nats/token times tokens).

    Returns
    -------
    jax.Array
        Loss in nats/token.
    """
    import jax.numpy as jnp

    return L_inf + a * jnp.exp(-alpha * jnp.log(S)) + c / batch_tokens


def _reachable_gap(L_target, L_inf):
    """(L* - L_inf > 0, that gap or 1 where it is not positive) for the double-`where` pattern."""
    import jax.numpy as jnp

    gap = L_target - L_inf
    reachable = gap > 0
    return reachable, jnp.where(reachable, gap, 1.0)


def batch_min_floor(L_target, L_inf, c) -> jax.Array:
    """Smallest batch that reaches the target loss, noise-floor law (docs/laws.md section 5).

    .. math:: B_{min} = \\frac{c}{L^* - L_\\infty}

    (the noise floor c/B alone uses the whole gap), ``inf`` where L* <= L_inf.

    Parameters
    ----------
    L_target : array_like
        Target loss L* (nats/token).
    L_inf, c : array_like
        As in `loss_noise_floor`.

    Returns
    -------
    jax.Array
        Tokens per step.
    """
    import jax.numpy as jnp

    reachable, gap = _reachable_gap(L_target, L_inf)
    return jnp.where(reachable, c / gap, jnp.inf)


def steps_min_floor(L_target, L_inf, a, alpha) -> jax.Array:
    """Fewest steps that reach the target loss (infinite batch), noise-floor law (docs/laws.md section 5).

    .. math:: S_{min} = \\left(\\frac{a}{L^* - L_\\infty}\\right)^{1/\\alpha}

    ``inf`` where L* <= L_inf.

    Parameters
    ----------
    L_target : array_like
        Target loss L* (nats/token).
    L_inf, a, alpha : array_like
        As in `loss_noise_floor`.

    Returns
    -------
    jax.Array
        Optimizer steps.
    """
    import jax.numpy as jnp

    reachable, gap = _reachable_gap(L_target, L_inf)
    return jnp.where(reachable, jnp.exp((jnp.log(a) - jnp.log(gap)) / alpha), jnp.inf)


def tokens_floor(S, batch_min, steps_min, alpha) -> jax.Array:
    """Tokens to reach the target loss in S steps, noise-floor law (docs/laws.md section 5).

    Solving :math:`L(S; B) = L^*` for B gives :math:`B(S) = B_{min} / (1 - (S_{min}/S)^\\alpha)`, so

    .. math:: E(S) = B(S)\\, S = \\frac{B_{min} S}{1 - (S_{min} / S)^{\\alpha}}

    inverse-like near S_min, minimal at S_opt (`steps_opt_floor`), linear with slope B_min for
    large S: the three stages of the paper's piecewise E(S).

    Parameters
    ----------
    S : array_like
        Optimizer steps.
    batch_min : array_like
        B_min (tokens per step), from `batch_min_floor`.
    steps_min : array_like
        S_min (steps), from `steps_min_floor`.
    alpha : array_like
        Step exponent of `loss_noise_floor`.

    Returns
    -------
    jax.Array
        Tokens; ``inf`` where S <= S_min.
    """
    import jax.numpy as jnp

    reachable = S > steps_min
    safe_S = jnp.where(reachable, S, 2.0 * steps_min + 1.0)
    shortfall = -jnp.expm1(alpha * (jnp.log(steps_min) - jnp.log(safe_S)))  # 1 - (S_min/S)^alpha
    return jnp.where(reachable, batch_min * safe_S / shortfall, jnp.inf)


def steps_opt_floor(steps_min, alpha) -> jax.Array:
    """Steps at which the target is reached with the fewest tokens, noise-floor law (docs/laws.md section 5).

    .. math:: S_{opt} = S_{min} (1 + \\alpha)^{1/\\alpha}

    the minimizer of `tokens_floor` (dE/dS = 0).

    Parameters
    ----------
    steps_min : array_like
        S_min (steps).
    alpha : array_like
        Step exponent (dimensionless).

    Returns
    -------
    jax.Array
        Optimizer steps.
    """
    import jax.numpy as jnp

    return steps_min * jnp.exp(jnp.log1p(alpha) / alpha)


def batch_opt_floor(batch_min, alpha) -> jax.Array:
    """Token-minimizing batch for the target loss at constant LR, noise-floor law (docs/laws.md section 5).

    .. math:: B_{opt} = E_{min} / S_{opt} = (1 + 1/\\alpha) B_{min}

    (``batch_token_opt`` in the answers.) E_min / S_min, OpenAI's B_crit formula, is
    (1 + alpha)^(1/alpha) B_opt here (~2.13 B_opt at alpha = 0.7), where the steps and the tokens are both
    (1 - B_min / B)^(-1/alpha) ~ 1.36x their minima: not the 2x-overhead point it is under OpenAI's hyperbola.

    Parameters
    ----------
    batch_min : array_like
        B_min (tokens per step).
    alpha : array_like
        Step exponent (dimensionless).

    Returns
    -------
    jax.Array
        Tokens per step.
    """
    return (1.0 + 1.0 / alpha) * batch_min


def tokens_min_floor(batch_min, steps_min, alpha) -> jax.Array:
    """Fewest tokens that reach the target loss, noise-floor law (docs/laws.md section 5).

    .. math:: E_{min} = E(S_{opt}) = B_{opt} S_{opt}
              = (1 + 1/\\alpha) B_{min} S_{min} (1 + \\alpha)^{1/\\alpha}

    Parameters
    ----------
    batch_min, steps_min, alpha : array_like
        As in `tokens_floor`.

    Returns
    -------
    jax.Array
        Tokens.
    """
    return batch_opt_floor(batch_min, alpha) * steps_opt_floor(steps_min, alpha)


def steps_to_target_floor(batch_tokens, L_target, L_inf, a, alpha, c) -> jax.Array:
    """Steps to reach a target loss at batch B, noise-floor law (docs/laws.md section 5).

    Solving :math:`L_\\infty + a S^{-\\alpha} + c/B = L^*` for S:

    .. math:: S = \\left(\\frac{a}{L^* - L_\\infty - c/B}\\right)^{1/\\alpha}
              = S_{min} (1 - B_{min}/B)^{-1/\\alpha}

    ``inf`` where the target is unreachable: B <= B_min (or L* <= L_inf).

    Parameters
    ----------
    batch_tokens : array_like
        Batch size B (tokens per step, > 0).
    L_target : array_like
        Target loss L* (nats/token).
    L_inf, a, alpha, c : array_like
        As in `loss_noise_floor`.

    Returns
    -------
    jax.Array
        Optimizer steps.
    """
    import jax.numpy as jnp

    reachable, gap = _reachable_gap(L_target, L_inf + c / batch_tokens)
    return jnp.where(reachable, jnp.exp((jnp.log(a) - jnp.log(gap)) / alpha), jnp.inf)


def tokens_to_target_floor(batch_tokens, L_target, L_inf, a, alpha, c) -> jax.Array:
    """Tokens to reach a target loss at batch B, noise-floor law (docs/laws.md section 5).

    .. math:: E = B\\, S = B \\left(\\frac{a}{L^* - L_\\infty - c/B}\\right)^{1/\\alpha}

    ``inf`` where B <= B_min (or L* <= L_inf).

    Parameters
    ----------
    batch_tokens, L_target, L_inf, a, alpha, c : array_like
        As in `steps_to_target_floor`.

    Returns
    -------
    jax.Array
        Tokens.
    """
    return batch_tokens * steps_to_target_floor(batch_tokens, L_target, L_inf, a, alpha, c)


# --------------------------------------------------------------------------------------------
# The loss-optimal batch at fixed (N, D)
# --------------------------------------------------------------------------------------------


def log_batch_opt_law(log_N, log_D, log_c, a, b) -> jax.Array:
    r"""Log of the loss-optimal batch B*(N, D) (docs/laws.md section 5).

    .. math:: \log B^*(N, D) = \log c_B + a_B \log N + b_B \log D

    B* is the batch (tokens per step) of the lowest final loss of a run of N parameters on D tokens, at
    that batch's best LR: Step Law's and DeepSeek's definition (not OpenAI's B_crit nor the token-optimal
    B_opt above). The form holds in any affine coordinates of log N and log D (the surface model's centered,
    scaled (n, d)). The optimal LR along the batch axis is `scalinfer.laws.lr.log_lr_opt_at_batch`.

    Parameters
    ----------
    log_N : array_like
        Natural log of non-embedding parameters (count; total or active for MoE, as fitted).
    log_D : array_like
        Natural log of training tokens.
    log_c : array_like
        Log of the prefactor c_B (B* in tokens at N = D = 1).
    a, b : array_like
        Exponents of N and D (dimensionless).

    Returns
    -------
    jax.Array
        log B* (B* in tokens per step).
    """
    return log_c + a * log_N + b * log_D
