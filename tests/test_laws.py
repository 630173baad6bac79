"""Tests of scalinfer.laws: values pinned against plain-Python arithmetic, and the identities of docs/laws.md.

Expected values are computed here with `math` / numpy, independently of the implementation. Every
test runs in float64 (the laws are meant for it); one checks that float32 inputs stay float32.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalinfer import laws
from scalinfer.laws import (
    BASELINES,
    b_simple_from_grad_norms,
    batch_crit_openai,
    batch_min_floor,
    batch_opt_floor,
    compute_6nd,
    compute_optimal,
    deepseek_batch_opt,
    deepseek_flops_per_token,
    deepseek_lr_opt,
    log_loss_chinchilla,
    log_batch_opt_law,
    log_lr_opt_at_batch,
    log_lr_opt_law,
    loss_chinchilla,
    loss_noise_floor,
    loss_wsd,
    lr_opt_law,
    step_law_batch_opt,
    step_law_lr_opt,
    steps_min_floor,
    steps_openai,
    steps_opt_floor,
    steps_to_target_floor,
    tokens_at_steps_openai,
    tokens_floor,
    tokens_min_floor,
    tokens_openai,
    tokens_to_target_floor,
    tokens_to_target_wsd,
    tokens_wsd_piecewise,
    valley,
    valley_at,
    wsd_piecewise_coefficients,
    zhou_lr_opt,
)

HOFFMANN = dict(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
EPOCH = dict(E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658)
# A noise-floor surface with plausible magnitudes: loss in nats, S in steps, B in tokens.
FLOOR = dict(L_inf=2.0, a=30.0, alpha=0.8, c=2.0e5)
# A piecewise E(S) with S_min < S_1 < S_opt < S_2 (steps), E in tokens.
PIECEWISE = dict(S_min=1000.0, S_1=2500.0, S_opt=4000.0, S_2=7000.0, E_min=4.0e9, C=150.0, A_1=6.0e5)

REL = 1e-12  # float64 agreement with plain-Python arithmetic


@pytest.fixture(autouse=True)
def _float64():
    with jax.enable_x64(True):
        yield


def close(actual, expected, rel=REL):
    return np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=rel)


# ------------------------------------------------------------------------------------------------
# Section 1: Chinchilla
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fit", [HOFFMANN, EPOCH], ids=["hoffmann", "epoch"])
@pytest.mark.parametrize("N, D", [(70e9, 1.4e12), (1e6, 1e8), (1e12, 3e13)])
def test_loss_chinchilla_matches_hand_value(fit, N, D):
    expected = fit["E"] + fit["A"] * N ** -fit["alpha"] + fit["B"] * D ** -fit["beta"]
    close(loss_chinchilla(N, D, **fit), expected)


@pytest.mark.parametrize("N, D", [(70e9, 1.4e12), (1e6, 1e8), (1e12, 3e13)])
def test_log_loss_chinchilla_is_log_of_loss(N, D):
    a, b, e = math.log(EPOCH["A"]), math.log(EPOCH["B"]), math.log(EPOCH["E"])
    expected = math.log(EPOCH["E"] + EPOCH["A"] * N ** -EPOCH["alpha"] + EPOCH["B"] * D ** -EPOCH["beta"])
    got = log_loss_chinchilla(math.log(N), math.log(D), a, b, e, EPOCH["alpha"], EPOCH["beta"])
    close(got, expected)


def test_log_loss_chinchilla_stays_finite_where_terms_underflow():
    # a - alpha log N = -800: exp underflows to 0 in float64; the LSE form must still return e.
    got = log_loss_chinchilla(log_N=2000.0, log_D=2000.0, a=0.0, b=0.0, e=0.5, alpha=0.4, beta=0.4)
    close(got, 0.5)


@pytest.mark.parametrize("C", [1e18, 5.76e23, 1e26])
def test_compute_optimal_matches_hand_formula(C):
    A, B, al, be = HOFFMANN["A"], HOFFMANN["B"], HOFFMANN["alpha"], HOFFMANN["beta"]
    G = (al * A / (be * B)) ** (1 / (al + be))
    N_opt, D_opt = compute_optimal(C, A, B, al, be)
    close(N_opt, G * (C / 6) ** (be / (al + be)))
    close(D_opt, (C / 6) ** (al / (al + be)) / G)
    close(6 * N_opt * D_opt, C)


@pytest.mark.parametrize("fit", [HOFFMANN, EPOCH], ids=["hoffmann", "epoch"])
def test_compute_optimal_minimizes_loss_on_the_isoflop_line(fit):
    C = 1e22
    N_opt, D_opt = compute_optimal(C, fit["A"], fit["B"], fit["alpha"], fit["beta"])
    N_grid = float(N_opt) * np.logspace(-1.0, 1.0, 2001)  # steps of 10^0.001 in N
    loss_grid = np.asarray(loss_chinchilla(N_grid, C / (6 * N_grid), **fit))
    best = int(np.argmin(loss_grid))
    assert 0 < best < len(N_grid) - 1  # an interior minimum
    assert abs(math.log10(N_grid[best] / float(N_opt))) <= 0.001 + 1e-12
    assert float(loss_chinchilla(N_opt, D_opt, **fit)) <= loss_grid.min() + 1e-14


# ------------------------------------------------------------------------------------------------
# Section 2: WSD
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("D", [1e8, 2.5e10, 1e13])
def test_loss_wsd_matches_hand_value(D):
    close(loss_wsd(D, L0=2.1, A=55.0, gamma=0.3), 2.1 + 55.0 * D**-0.3)


def test_tokens_to_target_wsd_inverts_loss_wsd_and_is_inf_below_the_asymptote():
    L0, A, gamma = 2.1, 55.0, 0.3
    D = tokens_to_target_wsd(2.5, L0, A, gamma)
    close(D, (A / 0.4) ** (1 / gamma))
    close(loss_wsd(D, L0, A, gamma), 2.5)
    assert np.all(np.isinf(np.asarray(tokens_to_target_wsd(jnp.array([2.1, 2.0]), L0, A, gamma))))


# ------------------------------------------------------------------------------------------------
# Sections 3-4: LR valley and eta* law
# ------------------------------------------------------------------------------------------------


def test_valley_with_p_2_is_the_quadratic():
    log_lr, log_opt = math.log(3e-3), math.log(1e-3)
    close(valley(log_lr - log_opt, math.log(0.05)), 0.05 * math.log(3.0) ** 2)
    close(valley(log_opt - log_lr, math.log(0.05)), 0.05 * math.log(3.0) ** 2)  # symmetric: delta = 0


def test_valley_uses_each_side_curvature():
    below = valley(-1.5, math.log(0.2), delta=0.5 * math.log(8.0))  # C_below = 0.2 / sqrt 8, C_above = 0.2 sqrt 8
    above = valley(1.5, math.log(0.2), delta=0.5 * math.log(8.0))
    close(below, 0.2 / math.sqrt(8.0) * 1.5**2)
    close(above, 0.2 * math.sqrt(8.0) * 1.5**2)


@settings(max_examples=40, deadline=None)
@given(size=st.floats(0.01, 6.0), above=st.booleans(), log_c=st.floats(-8.0, 2.0), delta=st.floats(-1.0, 1.0),
       p=st.floats(0.5, 4.0))
def test_valley_matches_its_formula(size, above, log_c, delta, p):
    u = size if above else -size  # |u| >= 0.01: the plain formula's cancellation stays below 1e-11
    C = math.exp(log_c + delta if above else log_c - delta)
    close(valley(u, log_c, delta, p), 2 * C / p * ((1 + u * u) ** (p / 2) - 1), rel=1e-10)


def test_valley_at_its_curvatures_is_the_valley():
    """`valley_at` given C_-+ = exp(log c -+ delta) is `valley`: the same operations in the same order (the surface
    model computes the curvatures once per setting). Tolerance 4 ulp: the one difference is that exp runs on
    other arrays, and a vectorized exp may round an element one ulp apart in a SIMD lane and in a loop's tail."""
    u = np.linspace(-3.0, 3.0, 41)
    log_c, delta, p = np.linspace(-6.0, 1.0, 41), 0.37, 1.3
    below, above = np.exp(log_c - delta), np.exp(log_c + delta)
    expect = valley(u, log_c, delta, p, xp=np)
    np.testing.assert_allclose(valley_at(u, below, above, p, xp=np), expect, rtol=1e-15, atol=0)
    np.testing.assert_allclose(np.asarray(valley_at(u, below, above, p)), expect, rtol=1e-15, atol=0)


def test_valley_is_quadratic_near_and_a_power_far_from_the_optimum():
    log_c, p = math.log(0.05), 1.2
    u = 1e-4
    close(valley(u, log_c, 0.3, p), 0.05 * math.exp(0.3) * u * u, rel=1e-7)  # C_+ u^2 for any p
    far = np.array([1e6, 1e7])
    v = np.asarray(valley(far, log_c, 0.0, p))
    close(np.log(v[1] / v[0]) / np.log(10.0), p, rel=1e-5)  # |u|^p


def test_valley_is_c1_at_the_optimum():
    log_c, delta = math.log(0.1), 0.7
    f = jax.jit(lambda u: valley(u, log_c, delta, 1.5))
    slope = jax.grad(f)
    assert float(f(0.0)) == 0.0
    assert float(slope(0.0)) == 0.0
    h = 1e-7  # both one-sided slopes vanish like 2 C_+- h
    assert abs(float(slope(-h))) <= 2 * 0.1 * math.exp(-delta) * h * (1 + 1e-6)
    assert abs(float(slope(h))) <= 2 * 0.1 * math.exp(delta) * h * (1 + 1e-6)


def test_lr_opt_at_batch_is_the_ridge():
    x, z, k1, k2 = math.log(2e-3), math.log(5e5), 0.4, -0.3
    close(log_lr_opt_at_batch(z, x, z, k1, k2), x)  # passes through the joint optimum
    v = math.log(4.0)  # 4x the optimal batch
    close(log_lr_opt_at_batch(z + v, x, z, k1, k2), x + k1 * v + 0.5 * k2 * v * v)
    close(jax.grad(lambda b: log_lr_opt_at_batch(b, x, z, k1, k2))(z), k1)  # d log eta*/d log B at B* is kappa1


@pytest.mark.parametrize("N, D", [(1e8, 2e9), (1e12, 1e13)])
def test_batch_opt_law_matches_hand_value(N, D):
    log_c, a, b = math.log(0.58), -0.11, 0.56
    close(log_batch_opt_law(math.log(N), math.log(D), log_c, a, b), math.log(0.58 * N**a * D**b))


@pytest.mark.parametrize("N, D", [(1e8, 2e9), (7e9, 1e12), (1e12, 1e13)])
def test_lr_opt_law_matches_hand_value(N, D):
    log_c, a, b = math.log(1.79), -0.713, 0.307
    close(lr_opt_law(N, D, log_c, a, b), 1.79 * N**a * D**b)
    expected_log = math.log(1.79) + a * math.log(N) + b * math.log(D)
    close(log_lr_opt_law(math.log(N), math.log(D), log_c, a, b), expected_log)


# ------------------------------------------------------------------------------------------------
# Section 5: OpenAI's model and the gradient noise scale
# ------------------------------------------------------------------------------------------------


def test_openai_steps_and_tokens_match_hand_values():
    S_min, B_crit, B = 2.0e4, 1.5e6, 4.0e5
    close(steps_openai(B, S_min, B_crit), S_min * (1 + B_crit / B))
    close(tokens_openai(B, S_min, B_crit), B * S_min * (1 + B_crit / B))
    # at B = B_crit both steps and tokens are twice their minimum (the 2x-overhead point)
    close(steps_openai(B_crit, S_min, B_crit), 2 * S_min)
    close(tokens_openai(B_crit, S_min, B_crit), 2 * S_min * B_crit)


def test_openai_limits_give_b_crit_as_e_min_over_s_min():
    S_min, B_crit = 2.0e4, 1.5e6
    S_min_limit = float(steps_openai(1e30, S_min, B_crit))  # infinite batch -> fewest steps
    E_min_limit = float(tokens_openai(1e-30, S_min, B_crit))  # vanishing batch -> fewest tokens
    close(S_min_limit, S_min)
    close(E_min_limit, S_min * B_crit)
    close(batch_crit_openai(S_min_limit, E_min_limit), B_crit)


@settings(max_examples=40, deadline=None)
@given(log_B=st.floats(math.log(1e3), math.log(1e9)))
def test_openai_hyperbola_identity(log_B):
    S_min, B_crit = 2.0e4, 1.5e6
    E_min = S_min * B_crit
    B = math.exp(log_B)
    S = float(steps_openai(B, S_min, B_crit))
    E = float(tokens_openai(B, S_min, B_crit))
    assert (S / S_min - 1) * (E / E_min - 1) == pytest.approx(1.0, rel=1e-9)
    assert float(tokens_at_steps_openai(S, S_min, E_min)) == pytest.approx(E, rel=1e-9)


def test_tokens_at_steps_openai_is_inf_at_or_below_s_min():
    got = np.asarray(tokens_at_steps_openai(jnp.array([5.0, 10.0, 20.0]), 10.0, 100.0))
    assert np.isinf(got[0]) and np.isinf(got[1])
    close(got[2], 100.0 * 20.0 / 10.0)


def test_b_simple_recovers_exact_expected_norms():
    G2, trace, B_small, B_big = 2.5, 80.0, 8.0, 128.0
    out = b_simple_from_grad_norms(G2 + trace / B_small, G2 + trace / B_big, B_small, B_big)
    close(out.grad_sq_norm, G2)
    close(out.trace_cov, trace)
    close(out.b_simple, trace / G2)


def test_b_simple_on_synthetic_gradients_within_monte_carlo_error():
    rng = np.random.default_rng(0)
    dim, n_batches, B_small, B_big = 16, 4000, 4, 64
    G = rng.normal(size=dim) * 0.5
    L = rng.normal(size=(dim, dim)) * 0.3  # Sigma = L L^T, a full covariance
    G2_true, trace_true = float(G @ G), float(np.sum(L * L))
    b_true = trace_true / G2_true

    def mean_sq_norm(batch):
        per_example = G + rng.normal(size=(n_batches, batch, dim)) @ L.T  # g_i ~ N(G, Sigma)
        sq = np.sum(per_example.mean(axis=1) ** 2, axis=1)  # |G_B|^2 per batch
        return sq.mean(), sq.var(ddof=1) / n_batches

    s_small, var_small = mean_sq_norm(B_small)
    s_big, var_big = mean_sq_norm(B_big)
    out = b_simple_from_grad_norms(s_small, s_big, B_small, B_big)

    # Delta-method standard errors of the three estimates (the two averages are independent).
    k_t = 1 / (1 / B_small - 1 / B_big)
    k_g = 1 / (B_big - B_small)
    g2_hat = (B_big * s_big - B_small * s_small) * k_g
    t_hat = (s_small - s_big) * k_t
    se_g2 = math.sqrt((B_big**2 * var_big + B_small**2 * var_small)) * k_g
    se_t = math.sqrt(var_small + var_big) * k_t
    d_small = k_t / g2_hat + t_hat / g2_hat**2 * B_small * k_g
    d_big = -k_t / g2_hat - t_hat / g2_hat**2 * B_big * k_g
    se_b = math.sqrt(d_small**2 * var_small + d_big**2 * var_big)

    assert se_b / b_true < 0.02  # about 1.2% here: a 4-sigma band of ~5% still means something
    assert abs(float(out.grad_sq_norm) - G2_true) < 4 * se_g2
    assert abs(float(out.trace_cov) - trace_true) < 4 * se_t
    assert abs(float(out.b_simple) - b_true) < 4 * se_b


# ------------------------------------------------------------------------------------------------
# Section 5: the paper's piecewise E(S)
# ------------------------------------------------------------------------------------------------


def test_wsd_piecewise_coefficients_match_hand_values():
    p = PIECEWISE
    q, d = p["S_opt"] - p["S_1"], p["S_1"] - p["S_min"]
    coef = wsd_piecewise_coefficients(**p)
    close(coef.B_m1, 2 * p["C"] * q * d**2)
    close(coef.B_0, p["E_min"] + p["C"] * q**2 - 2 * p["C"] * q * d)
    close(coef.A_0, p["E_min"] + p["C"] * (p["S_2"] - p["S_opt"]) ** 2 - p["A_1"] * p["S_2"])
    close(coef.batch_min, p["A_1"])
    close(coef.batch_opt, p["E_min"] / p["S_opt"])


def test_wsd_piecewise_stage_values():
    p = PIECEWISE
    coef = wsd_piecewise_coefficients(**p)
    S = jnp.array([1500.0, 3000.0, 9000.0])  # inverse, quadratic, linear stage
    expected = [
        float(coef.B_m1) / (1500.0 - p["S_min"]) + float(coef.B_0),
        p["C"] * (3000.0 - p["S_opt"]) ** 2 + p["E_min"],
        p["A_1"] * 9000.0 + float(coef.A_0),
    ]
    close(tokens_wsd_piecewise(S, **p), expected)
    close(tokens_wsd_piecewise(p["S_opt"], **p), p["E_min"])


@pytest.mark.parametrize("breakpoint", ["S_1", "S_2"])
def test_wsd_piecewise_is_continuous_at_breakpoints(breakpoint):
    p = PIECEWISE
    tokens = jax.jit(lambda s: tokens_wsd_piecewise(s, **p))
    slope = jax.grad(tokens)
    S_b = p[breakpoint]
    at = float(tokens(S_b))
    for eps in (1e-2, 1e-5):  # a jump would not shrink with eps; a continuous curve moves by ~slope * eps
        for s in (S_b - eps, S_b + eps):
            bound = eps * abs(float(slope(s))) * 1.01 + 1e-13 * at
            assert abs(float(tokens(s)) - at) <= bound


def test_wsd_piecewise_slope_continuity():
    p = PIECEWISE
    slope = jax.grad(lambda s: tokens_wsd_piecewise(s, **p))
    eps = 1e-6
    # C^1 at S_1 by construction; both sides equal 2 C (S_1 - S_opt)
    for s in (p["S_1"] - eps, p["S_1"] + eps):
        assert float(slope(s)) == pytest.approx(2 * p["C"] * (p["S_1"] - p["S_opt"]), rel=1e-6)
    # at S_2 the slope jumps unless S_2 = S_opt + A_1 / (2 C)
    smooth = dict(p, S_2=p["S_opt"] + p["A_1"] / (2 * p["C"]))
    slope_smooth = jax.grad(lambda s: tokens_wsd_piecewise(s, **smooth))
    for s in (smooth["S_2"] - eps, smooth["S_2"] + eps):
        assert float(slope_smooth(s)) == pytest.approx(p["A_1"], rel=1e-6)


def test_wsd_piecewise_shape_minimum_and_limits():
    p = PIECEWISE
    S = np.linspace(p["S_min"] * 1.01, 3 * p["S_2"], 4001)
    E = np.asarray(tokens_wsd_piecewise(S, **p))
    assert E.min() >= p["E_min"] * (1 - 1e-12)
    assert abs(S[np.argmin(E)] - p["S_opt"]) <= S[1] - S[0]
    assert np.all(np.diff(E[S < p["S_1"]]) < 0)  # the inverse stage falls toward the parabola
    assert np.isinf(float(tokens_wsd_piecewise(p["S_min"], **p)))
    far = 1e9  # E/S -> A_1 = B_min on the linear stage
    assert float(tokens_wsd_piecewise(far, **p)) / far == pytest.approx(p["A_1"], rel=1e-3)


# ------------------------------------------------------------------------------------------------
# Section 5: the noise-floor surface
# ------------------------------------------------------------------------------------------------


def _floor_hand(L_target):
    f = FLOOR
    gap = L_target - f["L_inf"]
    return f["c"] / gap, (f["a"] / gap) ** (1 / f["alpha"])  # B_min, S_min


def test_loss_noise_floor_matches_hand_value():
    f = FLOOR
    close(loss_noise_floor(5000.0, 1e6, **f), f["L_inf"] + f["a"] * 5000.0 ** -f["alpha"] + f["c"] / 1e6)


def test_floor_min_batch_and_steps_match_hand_values():
    f = FLOOR
    B_min, S_min = _floor_hand(2.5)
    close(batch_min_floor(2.5, f["L_inf"], f["c"]), B_min)
    close(steps_min_floor(2.5, f["L_inf"], f["a"], f["alpha"]), S_min)
    assert np.isinf(float(batch_min_floor(1.9, f["L_inf"], f["c"])))
    assert np.isinf(float(steps_min_floor(2.0, f["L_inf"], f["a"], f["alpha"])))


@pytest.mark.parametrize("alpha", [0.6, 0.8, 1.0, 1.33])
def test_floor_optimum_identities(alpha):
    B_min, S_min = 4.0e5, 3.0e3
    S_opt = float(steps_opt_floor(S_min, alpha))
    B_opt = float(batch_opt_floor(B_min, alpha))
    close(S_opt, S_min * (1 + alpha) ** (1 / alpha))
    close(B_opt, (1 + 1 / alpha) * B_min)
    E_opt = float(tokens_floor(S_opt, B_min, S_min, alpha))
    close(tokens_min_floor(B_min, S_min, alpha), E_opt)
    close(E_opt / S_opt, B_opt)  # B_opt = E_min / S_opt
    # E(S_opt) is the minimum of E(S) over S, checked on a grid
    S = S_min * np.logspace(1e-4, 2.0, 20001)
    E = np.asarray(tokens_floor(S, B_min, S_min, alpha))
    assert E.min() >= E_opt * (1 - 1e-12)
    assert abs(math.log(S[np.argmin(E)] / S_opt)) <= math.log(S[1] / S[0])


def test_tokens_floor_matches_hand_value_and_limits():
    B_min, S_min, alpha = 4.0e5, 3.0e3, 0.8
    S = 7.0e3
    close(tokens_floor(S, B_min, S_min, alpha), B_min * S / (1 - (S_min / S) ** alpha))
    assert np.isinf(float(tokens_floor(S_min, B_min, S_min, alpha)))
    far = 1e12  # linear stage: E/S -> B_min
    assert float(tokens_floor(far, B_min, S_min, alpha)) / far == pytest.approx(B_min, rel=1e-6)


def test_floor_batch_opt_exponent_in_tokens():
    # docs/laws.md section 5.3: B_opt proportional to E_min^(alpha / (1 + alpha)) as the target loss varies
    f = FLOOR
    targets = np.array([2.2, 2.4, 2.8, 3.5])
    B_min = batch_min_floor(targets, f["L_inf"], f["c"])
    S_min = steps_min_floor(targets, f["L_inf"], f["a"], f["alpha"])
    log_B_opt = np.log(np.asarray(batch_opt_floor(B_min, f["alpha"])))
    log_E_min = np.log(np.asarray(tokens_min_floor(B_min, S_min, f["alpha"])))
    slopes = np.diff(log_B_opt) / np.diff(log_E_min)
    np.testing.assert_allclose(slopes, f["alpha"] / (1 + f["alpha"]), rtol=1e-10)


def test_steps_to_target_floor_reaches_the_target():
    f = FLOOR
    L_target = 2.5
    B_min, S_min = _floor_hand(L_target)
    B = jnp.array([1.5, 3.0, 20.0]) * B_min
    S = steps_to_target_floor(B, L_target, **f)
    gap = L_target - f["L_inf"] - f["c"] / np.asarray(B)
    close(S, (f["a"] / gap) ** (1 / f["alpha"]))
    close(S, S_min * (1 - B_min / np.asarray(B)) ** (-1 / f["alpha"]), rel=1e-10)
    close(loss_noise_floor(S, B, **f), L_target)
    close(tokens_to_target_floor(B, L_target, **f), np.asarray(B) * np.asarray(S))
    # consistency with E(S): the batch that reaches the target in S steps is E(S) / S
    close(tokens_floor(S, B_min, S_min, f["alpha"]) / S, B, rel=1e-10)


def test_steps_to_target_floor_is_inf_where_unreachable():
    f = FLOOR
    B_min, _ = _floor_hand(2.5)
    B = jnp.array([0.5 * B_min, B_min, 1e3 * B_min])
    S = np.asarray(steps_to_target_floor(B, 2.5, **f))
    assert np.isinf(S[0]) and np.isinf(S[1]) and np.isfinite(S[2])
    assert np.all(np.isinf(np.asarray(tokens_to_target_floor(B[:2], 2.5, **f))))
    assert np.isinf(float(steps_to_target_floor(1e30, 1.9, **f)))  # below L_inf


def test_unreachable_branches_do_not_leak_nan_into_gradients():
    f = FLOOR
    grads = [
        jax.grad(lambda c: steps_to_target_floor(1e3, 2.5, f["L_inf"], f["a"], f["alpha"], c))(f["c"]),
        jax.grad(lambda L0: tokens_to_target_wsd(2.0, L0, 55.0, 0.3))(2.1),
        jax.grad(lambda s: tokens_floor(1e3, 4e5, s, 0.8))(3e3),
        jax.grad(lambda s: tokens_wsd_piecewise(500.0, **dict(PIECEWISE, S_min=s)))(PIECEWISE["S_min"]),
        jax.grad(lambda s: tokens_at_steps_openai(5.0, s, 100.0))(10.0),
    ]
    assert all(float(g) == 0.0 for g in grads)


# ------------------------------------------------------------------------------------------------
# Section 4: peer laws
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("N, D", [(1e8, 2e9), (7e9, 2e12), (1e12, 1e13)])
def test_peer_laws_match_published_forms(N, D):
    close(step_law_lr_opt(N, D), 1.79 * N**-0.713 * D**0.307)
    close(step_law_batch_opt(D), 0.58 * D**0.571)
    C = 6 * N * D
    close(compute_6nd(N, D), C)
    close(deepseek_lr_opt(C), 0.3118 * C**-0.125)
    close(deepseek_batch_opt(C), 0.2920 * C**0.3271)
    close(zhou_lr_opt(N, D), 38.4588 * N**-0.2219 * D**-0.3509)


def test_deepseek_flops_per_token():
    n_layers, d_model, seq_len = 30, 4096, 4096
    M = 72 * n_layers * d_model**2 + 6 * n_layers * d_model * seq_len
    close(deepseek_flops_per_token(n_layers, d_model, seq_len), M)


def test_baselines_table():
    N, D = 7e9, 2e12
    assert set(BASELINES) == {"step_law", "deepseek_llm", "zhou2026"}
    lr, batch = BASELINES["step_law"]
    close(lr(N, D), 1.79 * N**-0.713 * D**0.307)
    close(batch(N, D), 0.58 * D**0.571)
    lr, batch = BASELINES["deepseek_llm"]
    close(lr(N, D), 0.3118 * (6 * N * D) ** -0.125)
    close(batch(N, D), 0.2920 * (6 * N * D) ** 0.3271)
    assert BASELINES["zhou2026"].batch_opt is None
    close(BASELINES["zhou2026"].lr_opt(N, D), 38.4588 * N**-0.2219 * D**-0.3509)
    with pytest.raises(TypeError):
        BASELINES["mine"] = BASELINES["step_law"]  # the published table is read-only


# ------------------------------------------------------------------------------------------------
# Every public function: jit, vmap, float64 at N ~ 1e12
# ------------------------------------------------------------------------------------------------

# (function, keyword arguments, name of the argument to vmap over); sizes at the 1e12 scale.
CASES = [
    (loss_chinchilla, dict(N=1e12, D=2e13, **EPOCH), "N"),
    (log_loss_chinchilla,
     dict(log_N=math.log(1e12), log_D=math.log(2e13), a=6.2, b=7.6, e=0.6, alpha=0.35, beta=0.37), "log_N"),
    (compute_optimal, dict(C=1e26, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658), "C"),
    (loss_wsd, dict(D=2e13, L0=1.8, A=55.0, gamma=0.3), "D"),
    (tokens_to_target_wsd, dict(L_target=1.9, L0=1.8, A=55.0, gamma=0.3), "L_target"),
    (valley, dict(offset=1.0, log_c=-3.0, delta=0.5, p=1.5), "offset"),
    (valley_at, dict(offset=1.0, below=0.03, above=0.08, p=1.5), "offset"),
    (log_lr_opt_at_batch, dict(log_batch=15.0, log_lr_opt=-6.0, log_batch_opt=14.0, kappa1=0.5, kappa2=-0.2),
     "log_batch"),
    (lr_opt_law, dict(N=1e12, D=2e13, log_c=math.log(1.79), a=-0.713, b=0.307), "N"),
    (log_lr_opt_law,
     dict(log_N=math.log(1e12), log_D=math.log(2e13), log_c=0.58, a=-0.713, b=0.307), "log_N"),
    (steps_openai, dict(batch_tokens=4e6, S_min=1e5, B_crit=8e6), "batch_tokens"),
    (tokens_openai, dict(batch_tokens=4e6, S_min=1e5, B_crit=8e6), "batch_tokens"),
    (tokens_at_steps_openai, dict(S=3e5, S_min=1e5, E_min=8e11), "S"),
    (batch_crit_openai, dict(S_min=1e5, E_min=8e11), "E_min"),
    (b_simple_from_grad_norms,
     dict(sq_norm_small=3.0, sq_norm_big=2.1, batch_small=8.0, batch_big=128.0), "sq_norm_small"),
    (wsd_piecewise_coefficients, PIECEWISE, "S_2"),
    (tokens_wsd_piecewise, dict(S=5e3, **PIECEWISE), "S"),
    (loss_noise_floor, dict(S=1e5, batch_tokens=4e6, **FLOOR), "S"),
    (batch_min_floor, dict(L_target=2.1, L_inf=2.0, c=2e5), "L_target"),
    (steps_min_floor, dict(L_target=2.1, L_inf=2.0, a=30.0, alpha=0.8), "L_target"),
    (tokens_floor, dict(S=1e5, batch_min=2e6, steps_min=3e4, alpha=0.8), "S"),
    (steps_opt_floor, dict(steps_min=3e4, alpha=0.8), "steps_min"),
    (batch_opt_floor, dict(batch_min=2e6, alpha=0.8), "batch_min"),
    (tokens_min_floor, dict(batch_min=2e6, steps_min=3e4, alpha=0.8), "batch_min"),
    (steps_to_target_floor, dict(batch_tokens=4e6, L_target=2.1, **FLOOR), "batch_tokens"),
    (tokens_to_target_floor, dict(batch_tokens=4e6, L_target=2.1, **FLOOR), "batch_tokens"),
    (log_batch_opt_law,
     dict(log_N=math.log(1e12), log_D=math.log(2e13), log_c=-0.54, a=-0.11, b=0.56), "log_N"),
    (step_law_lr_opt, dict(N=1e12, D=2e13), "N"),
    (step_law_batch_opt, dict(D=2e13), "D"),
    (deepseek_lr_opt, dict(C=1.2e26), "C"),
    (deepseek_batch_opt, dict(C=1.2e26), "C"),
    (deepseek_flops_per_token, dict(n_layers=95.0, d_model=12288.0, seq_len=8192.0), "d_model"),
    (compute_6nd, dict(N=1e12, D=2e13), "N"),
    (zhou_lr_opt, dict(N=1e12, D=2e13), "N"),
]


def test_cases_cover_every_public_function():
    covered = {fn.__name__ for fn, _, _ in CASES}
    functions = {name for name in laws.__all__ if callable(getattr(laws, name)) and name[0].islower()}
    assert functions == covered


@pytest.mark.parametrize("fn, kwargs, axis_arg", CASES, ids=[c[0].__name__ for c in CASES])
def test_jit_vmap_and_float64(fn, kwargs, axis_arg):
    eager = jax.tree.leaves(fn(**kwargs))
    jitted = jax.tree.leaves(jax.jit(fn)(**kwargs))
    for e, j in zip(eager, jitted, strict=True):
        assert j.dtype == jnp.float64
        assert np.isfinite(np.asarray(j)).all()
        close(j, np.asarray(e), rel=1e-13)
    # vmap over one argument: each row equals the scalar call
    values = kwargs[axis_arg] * np.array([0.9, 1.0, 1.1])
    mapped = jax.vmap(lambda v: fn(**{**kwargs, axis_arg: v}))(jnp.asarray(values))
    for i, v in enumerate(values):
        single = jax.tree.leaves(fn(**{**kwargs, axis_arg: v}))
        for m, s in zip(jax.tree.leaves(mapped), single, strict=True):
            close(m[i], np.asarray(s), rel=1e-13)


def test_broadcasting_over_arrays():
    N = np.array([1e9, 1e10, 1e11, 1e12])[:, None]
    D = np.array([1e11, 1e12, 1e13])[None, :]
    loss = loss_chinchilla(N, D, **EPOCH)
    assert loss.shape == (4, 3)
    close(loss, EPOCH["E"] + EPOCH["A"] * N ** -EPOCH["alpha"] + EPOCH["B"] * D ** -EPOCH["beta"])


def test_float32_inputs_stay_float32():
    with jax.enable_x64(False):
        out = loss_chinchilla(jnp.float32(1e9), jnp.float32(1e11), **EPOCH)
        assert out.dtype == jnp.float32
        assert np.isfinite(float(out))
