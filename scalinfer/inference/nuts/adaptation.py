"""NUTS's warmup: the step size and the mass matrix, adapted as pure ``(init, update, final)`` triples.

Every piece is a triple of pure functions over a `NamedTuple` state, in the style of blackjax's
``adaptation`` modules, so that the sampler's loop owns the state and nothing is written into another
library's:

- `dual_averaging`: the step size, by Nesterov's dual averaging as Hoffman and Gelman (2014, section 3.2)
  adapt it toward a target acceptance probability;
- `welford_covariance`: the running mean and (co)variance of the chain's positions (Welford 1962), and the
  mass matrix they give, regularized as Stan does;
- `shrunk_covariance`: the covariance of a short window's draws with its correlations shrunk (Schafer and
  Strimmer 2005), for windows of fewer than `SHRINK_BELOW` times as many draws as coordinates;
- `window_adaptation`: the two combined on Stan's schedule (NumPyro's public `build_adaptation_schedule`):
  a fast start buffer (step size only), doubling slow windows that each end with a new mass matrix and a
  restarted step-size adaptation, and a fast end buffer; its final step size is the dual average.
  `terminal_window` is where that end buffer starts: a run can go on from there at another target acceptance.

The mass matrix M is the momentum's covariance; NUTS uses its inverse (the positions' covariance estimate)
in the kinetic energy r' M^-1 r / 2 and a square root S, S S' = M, to draw the momentum r = S eps (and A = S^-T,
A A' = M^-1, to whiten a transition's coordinates: `sampler.nuts_kernel`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import export, lax
from jax.scipy.linalg import solve_triangular
from numpyro.infer.hmc_util import build_adaptation_schedule

from scalinfer.errors import ModelError

__all__ = ["NutsConfig", "NutsParameters", "DualAveragingState", "WelfordState", "WindowAdaptationState",
           "dual_averaging", "step_size", "welford_covariance", "mass_matrix", "regularized_mass_matrix",
           "shrunk_covariance", "shrunk_windows", "terminal_window", "window_adaptation", "ADAPT", "SHRINK_BELOW",
           "WINDOW_DRAWS"]

#: mass-matrix adaptation in warmup: a dense or diagonal estimate, or none (the identity)
ADAPT = ("dense", "diag", "none")
#: a dense window of fewer than SHRINK_BELOW * d draws gets `shrunk_covariance` instead of the sample covariance
SHRINK_BELOW = 2
#: a metric given to start from (`window_adaptation`'s ``init``) is kept until a window of WINDOW_DRAWS * d draws
#: replaces it; the shorter windows run on into the next
WINDOW_DRAWS = 4


class NutsConfig(NamedTuple):
    """The settings of a NUTS run that shape its program (hashable: one compiled program per configuration).
    The target acceptance probability the step size is adapted toward is not one of them: an argument of the
    program (`scalinfer.inference.nuts.run_nuts`), so that a run at another one compiles nothing.

    Attributes
    ----------
    warmup : adaptation iterations, whose draws are discarded.
    samples : draws kept per chain after warmup.
    adapt : mass-matrix adaptation in warmup, one of `ADAPT`; the step size is always adapted.
    max_tree_depth : NUTS's tree depth cap after warmup (at most 2^depth - 1 leapfrog steps per draw).
    warmup_tree_depth : the cap during warmup.
    potential_dtype : the float type the potential and its gradient are evaluated in (``"float32"``,
        ``"float64"``), or None for the data's.
    """

    warmup: int
    samples: int
    adapt: str = "dense"
    max_tree_depth: int = 10
    warmup_tree_depth: int = 10
    potential_dtype: str | None = None


class NutsParameters(NamedTuple):
    """What a NUTS transition runs with.

    Attributes
    ----------
    step_size : the leapfrog step, scalar.
    inverse_mass_matrix : M^-1, (d,) diagonal or (d, d) dense.
    mass_matrix_sqrt : S with S S' = M, of the same shape: the momentum is r = S eps, eps ~ N(0, I).
    position_factor : A = S^-T, so that A A' = M^-1: in coordinates u, w = w_0 + A u, the metric is the identity
        and the momentum is eps itself (a dense metric's transitions run there: `sampler.nuts_kernel`).
    """

    step_size: jax.Array
    inverse_mass_matrix: jax.Array
    mass_matrix_sqrt: jax.Array
    position_factor: jax.Array


# ---- step size ------------------------------------------------------------------------------------------

class DualAveragingState(NamedTuple):
    """Dual averaging of x = log step size (Hoffman and Gelman 2014, eq. 6).

    Attributes
    ----------
    log_step_size : x_t = mu - sqrt(t) / gamma * g_bar_t, the iterate the next transition uses.
    log_step_size_avg : x_bar_t = (1 - t^-kappa) x_bar_{t-1} + t^-kappa x_t, the average warmup ends with.
    gradient_avg : g_bar_t = (1 - 1/(t + t0)) g_bar_{t-1} + g_t / (t + t0), g_t = target - acceptance.
    step : t, the updates so far.
    prox_center : mu, where the iterates are pulled toward: log(10 * the initial step size).
    """

    log_step_size: jax.Array
    log_step_size_avg: jax.Array
    gradient_avg: jax.Array
    step: jax.Array
    prox_center: jax.Array


def dual_averaging(target_accept: float, t0: float = 10.0, kappa: float = 0.75, gamma: float = 0.05):
    """(init, update, final) of the dual-averaging step size, with Hoffman and Gelman's t0, kappa, gamma.

    ``init(step_size)`` starts at mu = log(10 step_size) (a start that favours trying larger steps);
    ``update(state, accept_prob)`` takes one transition's mean acceptance probability;
    ``final(state)`` is the averaged step size exp(x_bar). During adaptation the step size is
    exp(x_t) (`step_size`): a transition accepting less than the target shrinks it.
    """

    def init(step_size) -> DualAveragingState:
        zero = jnp.zeros((), jnp.result_type(float))
        return DualAveragingState(zero, zero, zero, jnp.zeros((), jnp.result_type(int)),
                                  jnp.log(10.0) + jnp.log(jnp.asarray(step_size, jnp.result_type(float))))

    def update(state: DualAveragingState, accept_prob) -> DualAveragingState:
        t = state.step + 1
        g_avg = (1 - 1 / (t + t0)) * state.gradient_avg + (target_accept - accept_prob) / (t + t0)
        x = state.prox_center - t ** 0.5 / gamma * g_avg
        weight = t ** (-kappa)
        x_avg = (1 - weight) * state.log_step_size_avg + weight * x
        return DualAveragingState(x, x_avg, g_avg, t, state.prox_center)

    def final(state: DualAveragingState):
        return step_size(state.log_step_size_avg)

    return init, update, final


def step_size(log_step_size):
    """exp(`log_step_size`), clipped to the positive range of the float type (an extreme iterate of the dual
    averaging stays a usable number)."""
    info = jnp.finfo(jnp.result_type(float))
    return jnp.clip(jnp.exp(log_step_size), info.tiny, info.max)


# ---- mass matrix ------------------------------------------------------------------------------------------

class WelfordState(NamedTuple):
    """Welford's running moments of the positions seen.

    Attributes
    ----------
    mean : (d,) their mean.
    m2 : (d,) sum of squared deviations, or (d, d) of outer products (dense).
    count : n, the positions seen.
    """

    mean: jax.Array
    m2: jax.Array
    count: jax.Array


def welford_covariance(dim: int, dense: bool):
    """(init, update, final) of the positions' (co)variance: ``init()``, ``update(state, position (d,))``,
    ``final(state)`` -> (the sample covariance m2 / (n - 1), (d, d) or its (d,) diagonal; n)."""

    def init() -> WelfordState:
        ftype = jnp.result_type(float)
        return WelfordState(jnp.zeros(dim, ftype), jnp.zeros((dim, dim) if dense else dim, ftype),
                            jnp.zeros((), jnp.result_type(int)))

    def update(state: WelfordState, position) -> WelfordState:
        n = state.count + 1
        before = position - state.mean
        mean = state.mean + before / n
        after = position - mean
        m2 = state.m2 + (jnp.outer(after, before) if dense else before * after)
        return WelfordState(mean, m2, n)

    def final(state: WelfordState):
        return state.m2 / (state.count - 1), state.count

    return init, update, final


def regularized_mass_matrix(cov, n) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(M^-1, S, A) from the positions' covariance estimate `cov` ((d, d) or (d,)) of `n` draws, regularized as
    Stan does: M^-1 = n / (n + 5) cov + 1e-3 * 5 / (n + 5) I, which pulls a short window's estimate
    toward a small multiple of the identity. S S' = M: with cov = L' L, L lower triangular (the Cholesky
    factor of cov with its rows and columns reversed), S = L^-1 and A = L' (`mass_matrix`)."""
    return mass_matrix((n / (n + 5)) * cov + 1e-3 * (5 / (n + 5)) * (jnp.identity(cov.shape[0]) if cov.ndim == 2
                                                                     else 1.0))


def mass_matrix(cov) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(M^-1, S, A) for the positions' covariance `cov` ((d, d) or (d,)), as given: M^-1 = cov, S S' = M and
    A = S^-T (A A' = M^-1)."""
    if cov.ndim == 1:
        return cov, 1.0 / jnp.sqrt(cov), jnp.sqrt(cov)
    lower = jnp.linalg.cholesky(cov[::-1, ::-1])[::-1, ::-1].T
    return cov, solve_triangular(lower, jnp.identity(cov.shape[0]), lower=True), lower.T


def shrunk_covariance(x, mask):
    """(covariance, n) of the rows of `x` (T, d) where `mask` (T,), its correlations shrunk toward zero.

    Schafer and Strimmer's (2005) target "D": the sample variances are kept and every correlation r_ij is
    multiplied by 1 - lambda, with lambda = sum_{i != j} Var(r_ij) / sum_{i != j} r_ij^2 clipped to [0, 1],
    Var(r_ij) estimated from the n products of the standardized rows. The result is positive definite for
    any n >= 2 (lambda > 0 when n <= d), where the sample covariance is singular, unless a coordinate did not
    move: its variance is 0, and `regularized_mass_matrix`'s regularization makes it positive."""
    m = mask[:, None].astype(x.dtype)
    n = m.sum()
    xc = (x - (x * m).sum(0) / n) * m
    sd = jnp.sqrt((xc ** 2).sum(0) / (n - 1))
    u = xc / jnp.where(sd > 0, sd, 1.0)  # a coordinate that never moved (a stuck chain) has variance 0
    prod = u.T @ u  # (n - 1) * correlations
    var_r = n / (n - 1) ** 3 * ((u ** 2).T @ (u ** 2) - prod ** 2 / n)
    off = 1.0 - jnp.eye(x.shape[1], dtype=x.dtype)
    r = prod / (n - 1) * off
    # (no correlation at all: r = 0, and lambda does not matter)
    lam = jnp.clip(jnp.sum(var_r * off) / jnp.maximum(jnp.sum(r ** 2), jnp.finfo(x.dtype).tiny), 0.0, 1.0)
    corr = (1.0 - lam) * r + jnp.eye(x.shape[1], dtype=x.dtype)
    return sd[:, None] * corr * sd[None, :], n


def terminal_window(warmup: int) -> int:
    """The first iteration of the terminal window of a `warmup`-iteration schedule (Stan's fast end buffer, the
    last of NumPyro's public `build_adaptation_schedule`): from there on only the step size adapts, by a dual
    average that the last slow window's end restarted, toward the target acceptance of the iterations it runs (an
    argument of each call of NUTS's program). 0 where the schedule has no slow window (fewer than 20 iterations):
    all of warmup."""
    schedule = build_adaptation_schedule(int(warmup))
    return int(schedule[-1].start) if len(schedule) > 1 else 0


def shrunk_windows(warmup: int, dim: int, dense: bool = True, chains: int = 1) -> list[tuple[int, int]]:
    """(start, end) iterations, inclusive, of the slow windows of a `warmup`-iteration schedule whose mass
    matrix is `shrunk_covariance` of their draws: the dense ones of fewer than `SHRINK_BELOW` * `dim` draws
    (`chains` draws an iteration where `window_adaptation` pools the chains).

    Why: Stan's regularization of a window's sample covariance S (see `regularized_mass_matrix`) does not
    help when n < d: S is singular, and on coordinates of variance ~1 its null directions get variances
    ~1e-4, a 10^4-fold error that forces tiny steps at the depth cap; for d <= n < 2d the smallest
    eigenvalues of S are still (1 - sqrt(d/n))^2 of the truth or less. On Step Law's surface (d = 78, 1,000
    warmup: windows of 25, 50, 100, 200 and 500 draws) the iterations after the 25-, 50- and 100-draw windows
    ran at the depth cap (63 leapfrog steps), shrunk they took 30-50. Windows of 2d draws or more keep the
    sample covariance: shrinking correlations toward zero breaks strong ones, and on the bundled MoE runs
    (d = 87) shrinking the 200-draw window doubled the steps per draw."""
    if not dense:
        return []
    return [(w.start, w.end) for w in build_adaptation_schedule(warmup)[1:-1]
            if chains * (w.end - w.start + 1) < SHRINK_BELOW * dim]


# ---- the schedule -------------------------------------------------------------------------------------------

class WindowAdaptationState(NamedTuple):
    """The warmup's adaptation.

    Attributes
    ----------
    parameters : the `NutsParameters` of the next warmup transition.
    step_size : the step size's `DualAveragingState`, restarted at each slow window's end.
    moments : the current slow window's `WelfordState` (empty outside slow windows).
    draws : (rows, d) the positions of the first `rows` iterations, which hold the short windows that
        `shrunk_covariance` estimates (rows = 0 when there are none).
    informed : whether warmup started from a metric other than the identity, which only a window of
        `WINDOW_DRAWS` d draws replaces.
    """

    parameters: NutsParameters
    step_size: DualAveragingState
    moments: WelfordState
    draws: jax.Array
    informed: jax.Array


# the adaptation's state is part of NUTS's stored programs' signature (`scalinfer.inference.compiled.StoredProgram`)
for _state in (NutsParameters, DualAveragingState, WelfordState, WindowAdaptationState):
    export.register_namedtuple_serialization(_state, serialized_name=f"scalinfer.nuts.{_state.__name__}")


def pooled_moments(state: WelfordState, axis_name: str) -> WelfordState:
    """The Welford moments of the positions of every chain along `axis_name` together (Chan et al.'s 1979
    merge): n = sum n_c, mean = sum n_c mean_c / n, m2 = sum [m2_c + n_c (mean_c - mean)(mean_c - mean)'].
    Chains apart from each other add their spread to the covariance."""
    count = lax.psum(state.count, axis_name)
    mean = lax.psum(state.count * state.mean, axis_name) / count
    shift = state.mean - mean
    spread = jnp.outer(shift, shift) if state.m2.ndim == 2 else shift * shift
    return WelfordState(mean, lax.psum(state.m2 + state.count * spread, axis_name), count)


def window_adaptation(warmup: int, dim: int, adapt: str = "dense", target_accept: float = 0.8,
                      axis_name: str | None = None, chains: int = 1):
    """(init, update, final) of Stan's windowed adaptation over `warmup` iterations of a `dim`-dimensional
    chain, the mass matrix `adapt` (`ADAPT`).

    ``init(initial_step_size=1.0, metric=None)`` starts from `metric`, the positions' covariance to start
    from (the inverse mass matrix, (d, d); its diagonal with ``"diag"``), default the identity. ``update(state,
    i, position, accept_prob)`` takes warmup iteration i's new position and mean acceptance probability: it
    updates the dual average (the next step size is exp(x_t)); within a slow window it adds the position to the
    window's moments; at a slow window's end it sets the mass matrix (`regularized_mass_matrix` of the window's
    covariance, of `shrunk_covariance` for the windows of `shrunk_windows`; unchanged with ``"none"``) and
    restarts the window's moments and the dual averaging, at mu = log(10 * the current step size).

    A `metric` other than the identity is an estimate already (in a fit, the Laplace correlations in
    coordinates fitted to the mode): a window then ends only once it holds `WINDOW_DRAWS` d draws (pooled);
    a shorter one runs on into the next, its draws kept. Why: on the quickstart's table (d = 90, 4 chains, in
    the pinned coordinates of `scalinfer.models.surface`) NUTS took 20-24 leapfrog steps an iteration on the
    Laplace metric, 61-63 after the 100-draw window's shrunk estimate replaced it, 36-43 after the 200-draw
    window's, 23-29 after the 400-draw window's; from the identity it takes ~60 until that window
    (benchmarks/README.md, "warmup.py").
    ``final(state)`` is the `NutsParameters` after warmup: the dual average's step size and the last mass
    matrix.

    `axis_name`: the functions run once per chain along this named axis (`jax.vmap`'s or a `shard_map`'s) of
    `chains` chains, which the adaptation pools: each window's covariance is that of every chain's draws in it
    (`pooled_moments`; the short windows' draws gathered), so a window of n iterations estimates the mass matrix
    from `chains` n draws, and the final step size is the chains' averaged log step size, so every chain samples
    with the same kernel. Why: a single chain's window holds too few draws, and too correlated ones, for a dense
    matrix of the surface's ~90 coordinates (the last window of a 500-iteration warmup is 200 iterations); pooled,
    the steps per draw come near those of NUTS with the posterior's own covariance (benchmarks/README.md,
    "warmup.py"). Where the chains sit in different modes the pooled covariance spans them: R-hat still compares
    the chains' draws.
    """
    if adapt not in ADAPT:
        raise ModelError(f"adapt must be one of {ADAPT}, got {adapt!r}")
    dense = adapt == "dense"
    da_init, da_update, da_final = dual_averaging(target_accept)
    wf_init, wf_update, wf_final = welford_covariance(dim, dense)
    slow = [(w.start, w.end) for w in build_adaptation_schedule(warmup)[1:-1]]
    ends = np.array([end for _, end in slow], dtype=int)
    short = shrunk_windows(warmup, dim, dense, chains if axis_name else 1)
    rows = short[-1][1] + 1 if short else 0
    short_starts = jnp.asarray([start for start, _ in short], dtype=int)
    short_ends = jnp.asarray([end for _, end in short], dtype=int)

    def init(initial_step_size=1.0, metric=None) -> WindowAdaptationState:
        ftype = jnp.result_type(float)
        step = jnp.asarray(initial_step_size, ftype)
        if metric is None:
            eye = jnp.identity(dim, ftype) if dense else jnp.ones(dim, ftype)
            parameters, informed = NutsParameters(step, eye, eye, eye), jnp.asarray(False)
        else:
            metric = jnp.asarray(metric, ftype)
            informed = jnp.any(metric != jnp.identity(dim, ftype))
            parameters = NutsParameters(step, *mass_matrix(metric if dense else jnp.diag(metric)))
        return WindowAdaptationState(parameters, da_init(initial_step_size), wf_init(),
                                     jnp.zeros((rows, dim), ftype), informed)

    def window_covariance(state: WindowAdaptationState, i):
        moments = state.moments if axis_name is None else pooled_moments(state.moments, axis_name)
        if not short:
            return wf_final(moments)

        def shrunk(_):
            k = jnp.argmax(short_ends == i)
            idx = jnp.arange(rows)
            mask = (idx >= short_starts[k]) & (idx <= short_ends[k])
            draws = state.draws
            if axis_name is not None:  # every chain's draws of the window
                draws = lax.all_gather(draws, axis_name).reshape(-1, dim)
                mask = jnp.tile(mask, draws.shape[0] // rows)
            cov, n = shrunk_covariance(draws, mask)
            return cov, n.astype(state.moments.count.dtype)

        return lax.cond(jnp.any(short_ends == i), shrunk, lambda _: wf_final(moments), None)

    def window_end(i, state: WindowAdaptationState) -> WindowAdaptationState:
        parameters = state.parameters
        if adapt != "none":
            parameters = NutsParameters(parameters.step_size, *regularized_mass_matrix(*window_covariance(state, i)))
        return WindowAdaptationState(parameters, da_init(parameters.step_size), wf_init(), state.draws, state.informed)

    def update(state: WindowAdaptationState, i, position, accept_prob) -> WindowAdaptationState:
        da = da_update(state.step_size, accept_prob)
        parameters = NutsParameters(step_size(da.log_step_size), *state.parameters[1:])
        moments = state.moments
        if adapt != "none" and slow:
            in_slow = (i >= slow[0][0]) & (i <= slow[-1][1])
            moments = lax.cond(in_slow, lambda m: wf_update(m, position), lambda m: m, moments)
        draws = state.draws.at[i].set(position, mode="drop") if rows else state.draws
        state = WindowAdaptationState(parameters, da, moments, draws, state.informed)
        if not slow:
            return state
        pooled = moments.count * (chains if axis_name is not None else 1)  # the window's draws so far
        end = jnp.any(i == ends) & (~state.informed | (pooled >= WINDOW_DRAWS * dim))
        return lax.cond(end, lambda s: window_end(i, s), lambda s: s, state)

    def final(state: WindowAdaptationState) -> NutsParameters:
        da = state.step_size
        if axis_name is not None:  # one kernel for every chain: the chains' dual averages averaged
            da = da._replace(log_step_size_avg=lax.pmean(da.log_step_size_avg, axis_name))
        return NutsParameters(da_final(da), *state.parameters[1:])

    return init, update, final
