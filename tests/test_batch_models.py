"""Tests of the batch models without sampling: the censored likelihood, the piecewise E(S) inversion,
the data preparation and each model's predictions from hand-made posterior draws (closed forms checked
against docs/laws.md section 5 computed here with numpy)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from scalinfer.errors import ModelError
from scalinfer.laws.batch import tokens_min_floor, tokens_wsd_piecewise
from scalinfer.models import get_model
from scalinfer.models.batch import FLOOR, OPENAI, WSD
from scalinfer.models.batch.common import CensoredNormal, pooled, table_arrays, unit_effect
from scalinfer.models.batch.wsd import steps_wsd_piecewise, wsd_shape
from scalinfer.runs.schema import validate

jax.config.update("jax_enable_x64", True)


def _table(df, kind="steps_to_target"):
    return validate(df, "test table", kind, row_offset=None)


def _small_table():
    rows = []
    for N, L in ((1e8, 3.3), (4e8, 3.0)):
        for B, S in ((32768, 40000), (131072, 11000), (524288, 4000), (2097152, 2500)):
            rows.append({"N": N, "target_loss": L, "batch_tokens": B, "steps_to_target": S * (N / 1e8) ** 0.3})
    return pd.DataFrame(rows)


def test_registry_serves_the_three_models():
    assert get_model("batch-openai") is OPENAI
    assert get_model("batch-wsd") is WSD
    assert get_model("batch-floor") is FLOOR


def test_censored_normal_is_a_density_for_reached_cells_and_a_survival_for_censored_ones():
    y = jnp.array([0.3, 0.3, 0.3, 0.3])
    d = CensoredNormal(jnp.array([0.1, 0.1, 0.1, 0.1]), 0.2, jnp.array([False, True, False, True]),
                       jnp.array([True, True, False, False]))
    lp = np.asarray(d.log_prob(y))
    z = (0.3 - 0.1) / 0.2
    assert lp[0] == pytest.approx(-0.5 * z * z - math.log(0.2) - 0.5 * math.log(2 * math.pi), rel=1e-12)
    assert lp[1] == pytest.approx(math.log(0.5 * math.erfc(z / math.sqrt(2))), rel=1e-12)
    assert lp[2] == -np.inf and lp[3] == 0.0  # unreachable: impossible if reached, certain if censored
    g = jax.grad(lambda m: CensoredNormal(m, 0.2, jnp.array([False, True])).log_prob(jnp.array([0.3, 0.3])).sum())(0.1)
    assert np.isfinite(g)


def test_piecewise_steps_solve_e_of_s_equals_b_s_on_every_stage():
    # shape parameters on both sides of typical; E(S) continuous, B(S) = E/S decreasing (A_0 > 0)
    shape = [np.asarray(v) for v in wsd_shape(5000.0, 2e5, 0.45, 0.3, 0.5, 0.8)]
    S_min, S_1, S_opt, S_2, E_min, C, A_1 = shape
    B = np.geomspace(A_1 * 1.001, 100 * E_min / S_min, 200)
    S, ok = (np.asarray(v) for v in steps_wsd_piecewise(B, *shape))
    assert ok.all()
    E = np.asarray(tokens_wsd_piecewise(S, *shape))
    np.testing.assert_allclose(E, B * S, rtol=1e-9)  # the root of E(S) = B S
    assert np.all(np.diff(S) < 0)  # a larger batch needs fewer steps
    stage = np.where(S < S_1, 0, np.where(S <= S_2, 1, 2))
    assert set(stage) == {0, 1, 2}  # the grid crosses all three stages
    S_low, ok_low = steps_wsd_piecewise(np.array([0.5 * A_1, A_1]), *shape)
    assert not np.asarray(ok_low).any() and np.all(np.isinf(np.asarray(S_low)))
    # B_opt = E_min / S_opt reaches the target in S_opt steps with E_min tokens
    S_at_opt, _ = steps_wsd_piecewise(E_min / S_opt, *shape)
    assert float(S_at_opt) == pytest.approx(float(S_opt), rel=1e-9)


def test_wsd_shape_always_gives_a_decreasing_batch_of_steps():
    rng = np.random.default_rng(0)
    for _ in range(200):
        rho, mu, phi = rng.uniform(0.01, 0.99, 3)
        shape = wsd_shape(1.0, 1.0, rho, mu, phi, rng.lognormal(0, 1))
        S = np.geomspace(float(shape[0]) * 1.0001, 1e4, 400)
        E = np.asarray(tokens_wsd_piecewise(S, *shape))
        assert np.all(np.diff(E / S) < 0)
        assert float(shape[6]) == pytest.approx(rho)  # B_min = A_1 = rho B_opt


def test_table_arrays_center_index_units_and_refuse_what_cannot_be_used():
    data, c = table_arrays(_table(_small_table()), "m")
    assert c["n_units"] == 2 and c["n_sizes"] == 2 and c["confounded_N_L"] == 1.0
    assert data["unit"].tolist() == [0] * 4 + [1] * 4
    assert c["m_N"] == pytest.approx(0.5 * (math.log(1e8) + math.log(4e8)))
    assert np.max(data["log_b"]) == pytest.approx(-np.min(data["log_b"]))
    df = _small_table()
    df.loc[0, "steps_to_target"] = np.nan
    with pytest.raises(ModelError, match=r"100000000.*never reached|no 'steps'"):
        table_arrays(_table(df), "m")
    df["steps"] = 80000.0
    data, c = table_arrays(_table(df), "m")
    assert data["censored"].tolist() == [True] + [False] * 7
    assert data["log_steps"][0] == pytest.approx(math.log(80000) - c["m_S"])
    one = _small_table().assign(batch_tokens=65536.0, N=[1e8 * (i + 1) for i in range(8)])
    with pytest.raises(ModelError, match="two or more batch sizes"):
        table_arrays(_table(one), "m")


def test_openai_predictions_follow_the_law_and_use_the_fitted_unit():
    data, c = OPENAI.prepare(_table(_small_table()))
    n = 5
    draws = {"s0": np.full(n, -0.5), "s_N": np.full(n, 0.2), "s_L": np.full(n, -4.0), "k0": np.full(n, 0.3),
             "k_N": np.full(n, 0.4), "k_L": np.full(n, -3.0), "tau_S": np.full(n, 0.1), "tau_B": np.full(n, 0.2),
             "sigma": np.full(n, 0.1), "z_S": np.tile([1.0, -1.0], (n, 1)), "z_B": np.tile([0.5, 2.0], (n, 1))}
    B = np.array([32768.0, 1e6])
    p = OPENAI.predict(draws, c, N=4e8, target_loss=3.0, batch=B)
    x_N, x_L = math.log(4e8) - c["m_N"], math.log(3.0) - c["m_L"]
    S_min = math.exp(-0.5 + 0.2 * x_N - 4.0 * x_L + 0.1 * -1.0 + c["m_S"])  # unit 1 (N=4e8, L=3.0)
    B_crit = math.exp(0.3 + 0.4 * x_N - 3.0 * x_L + 0.2 * 2.0 + c["m_B"])
    assert p["batch_crit"].shape == (n,)
    assert p["batch_crit"][0] == pytest.approx(B_crit, rel=1e-12)
    np.testing.assert_allclose(p["steps_to_target"][0], S_min * (1 + B_crit / B), rtol=1e-12)
    np.testing.assert_allclose(p["tokens_to_target"], p["steps_to_target"] * B, rtol=1e-12)
    assert p["steps_to_target"].shape == (n, 2)
    # the 20%-overhead batch: there the steps are 1.2x perfect scaling E_min / B (E_min = S_min B_crit)
    b20 = p["batch_overhead_20"][0]
    s20 = OPENAI.predict(draws, c, N=4e8, target_loss=3.0, batch=[b20])["steps_to_target"][0, 0]
    assert s20 == pytest.approx(1.2 * S_min * B_crit / b20, rel=1e-12)
    # a new unit: fresh deviations, the same in any call for the same (N, L*)
    a = OPENAI.predict(draws, c, N=2e8, target_loss=3.1)["batch_crit"]
    b = OPENAI.predict(draws, c, N=[2e8, 9e8], target_loss=[3.1, 2.9])["batch_crit"][:, 0]
    np.testing.assert_allclose(a, b)
    assert np.std(np.log(a)) > 0  # the unit scatter enters a new unit's prediction
    with pytest.raises(ModelError, match="target loss"):
        OPENAI.predict(draws, c, N=4e8, target_loss=None)


def test_floor_predictions_are_the_closed_forms_and_loss_at_tokens_inverts_e_min():
    rows = []
    for N in (1e8, 1e9):
        for B in (32768.0, 262144.0):
            for s in (100.0, 1000.0, 10000.0):
                rows.append({"run_id": f"{N}-{B}", "N": N, "batch_tokens": B, "step": s, "D": s * B,
                             "loss": 2.5 + 100 * s ** -0.7 + 5000 / B})
    data, c = FLOOR.prepare(_table(pd.DataFrame(rows), "curves"))
    assert c["curves"] == 1.0 and data["log_loss"].shape == (12,)
    n = 4
    L_inf, a, cc, alpha = 2.4, 120.0, 4000.0, 0.8
    draws = {"alpha": np.full(n, alpha), "l0": np.zeros(n), "l_N": np.zeros(n), "a0": np.zeros(n),
             "a_N": np.zeros(n), "c0": np.zeros(n), "c_N": np.zeros(n), "tau_l": np.full(n, 0.01),
             "tau_a": np.full(n, 0.1), "tau_c": np.full(n, 0.1),
             "log_L_inf": np.full((n, 2), math.log(L_inf)),
             "log_a": np.full((n, 2), math.log(a) - alpha * c["m_S"]),
             "log_c": np.full((n, 2), math.log(cc) - c["m_B"])}
    L = 2.6
    p = FLOOR.predict(draws, c, N=1e9, target_loss=L, batch=[40000.0, 1e6])
    gap = L - L_inf
    b_min = cc / gap
    s_min = (a / gap) ** (1 / alpha)
    assert p["batch_min"][0] == pytest.approx(b_min, rel=1e-12)
    assert p["batch_opt"][0] == pytest.approx((1 + 1 / alpha) * b_min, rel=1e-12)
    e_min = (1 + 1 / alpha) * b_min * s_min * (1 + alpha) ** (1 / alpha)
    assert p["batch_crit"][0] == pytest.approx(e_min / s_min, rel=1e-10)
    expected = (a / (gap - cc / np.array([40000.0, 1e6]))) ** (1 / alpha)
    np.testing.assert_allclose(p["steps_to_target"][0], expected, rtol=1e-10)
    # loss after E_min(L) tokens on the token-efficient path is L
    T = float(tokens_min_floor(b_min, s_min, alpha))
    assert FLOOR.loss_at_tokens(draws, c, 1e9, T)[0] == pytest.approx(L, rel=1e-10)
    below = FLOOR.predict(draws, c, N=1e9, target_loss=2.3, batch=[1e6])
    assert np.isinf(below["batch_min"][0]) and np.isinf(below["steps_to_target"][0, 0])


def test_pooled_and_unit_effect_use_fitted_groups_and_reproducible_new_draws():
    fitted = np.arange(6.0).reshape(3, 2)
    mean, tau = np.zeros((3, 2)), np.full((3, 1), 1.0)
    out = pooled(fitted, mean, tau, np.array([1, -1]), np.array([7, 8]), salt=3)
    np.testing.assert_array_equal(out[:, 0], fitted[:, 1])
    again = pooled(fitted, mean[:, :1], tau, np.array([-1]), np.array([8]), salt=3)
    np.testing.assert_array_equal(out[:, 1], again[:, 0])
    z = unit_effect(np.zeros((1000, 0)), np.full(3, -1), np.array([1, 2, 3]))
    assert abs(z.mean()) < 0.15 and 0.85 < z.std() < 1.15  # 3000 standard normals: 4+ sd margins


def test_models_refuse_tables_of_another_kind():
    runs = validate(pd.DataFrame({"N": [1e8, 2e8], "D": [1e9, 2e9], "loss": [3.0, 2.9]}), "t", "runs",
                    row_offset=None)
    for m in (OPENAI, WSD, FLOOR):
        with pytest.raises(ModelError, match="steps-to-target tables|loss curves"):
            m.prepare(runs)


def test_table_models_take_loss_curves_through_the_conversion():
    design = FLOOR.default_design(n_records=6)
    curves = _table(FLOOR.simulate(FLOOR.true_params(), design, seed=0), "curves")
    m = OPENAI.with_options(target_losses=[3.0, 2.7])
    data, c = m.prepare(curves)
    # 12 runs x 2 targets, minus the cells reached before a run's first record (excluded with a reason)
    table = m.table(curves)
    assert len(data["log_steps"]) == len(table) and len(table) + len(table.excluded) == 24
    assert c["n_units"] == 6 and c["confounded_N_L"] == 0.0  # two targets per size separate N from L*
    assert data["censored"].sum() == c["n_censored"] > 0  # slow runs never reach 2.7: censored, kept
    assert WSD.with_options(target_losses=[3.0, 2.7]).prepare(curves)[0]["log_steps"].shape == data["log_steps"].shape


def test_wsd_predictions_follow_the_piecewise_curve_at_a_fitted_unit():
    data, c = WSD.prepare(_table(_small_table()))
    n = 3
    draws = {"s0": np.full(n, 0.5), "s_N": np.full(n, -0.1), "s_L": np.full(n, -4.0), "b0": np.full(n, -1.0),
             "b_N": np.full(n, 0.3), "b_L": np.full(n, -3.0), "rho": np.full(n, 0.4), "mu": np.full(n, 0.2),
             "phi": np.full(n, 0.5), "kappa_plus": np.full(n, 0.7), "tau_S": np.full(n, 0.1),
             "tau_B": np.full(n, 0.2), "sigma": np.full(n, 0.05), "z_S": np.tile([0.5, -1.0], (n, 1)),
             "z_B": np.tile([1.0, 0.3], (n, 1))}
    B = np.geomspace(2e4, 1e7, 7)
    p = WSD.predict(draws, c, N=1e8, target_loss=3.3, batch=B)  # unit 0
    x_N, x_L = math.log(1e8) - c["m_N"], math.log(3.3) - c["m_L"]
    S_opt = math.exp(0.5 - 0.1 * x_N - 4.0 * x_L + 0.1 * 0.5 + c["m_S"])
    B_opt = math.exp(-1.0 + 0.3 * x_N - 3.0 * x_L + 0.2 * 1.0 + c["m_B"])
    assert p["batch_opt"][0] == pytest.approx(B_opt, rel=1e-12)
    assert p["batch_min"][0] == pytest.approx(0.4 * B_opt, rel=1e-12)     # B_min = rho B_opt
    assert p["batch_crit"][0] == pytest.approx(B_opt / 0.2, rel=1e-12)    # E_min / S_min = B_opt / mu
    shape = wsd_shape(S_opt, B_opt, 0.4, 0.2, 0.5, 0.7)
    S = p["steps_to_target"][0]
    ok = B > 0.4 * B_opt
    np.testing.assert_allclose(np.asarray(tokens_wsd_piecewise(S[ok], *shape)), B[ok] * S[ok], rtol=1e-9)
    assert (~ok).any() and ok.sum() >= 5
    assert np.all(np.isinf(S[~ok]))  # at or below B_min the target is out of reach
    assert WSD.loss_at_tokens(draws, c, 1e8, 1e10).shape == (n,)


def test_floor_table_coordinates_are_an_exact_change_of_variables():
    """On a steps-to-target table batch-floor samples ``*_gap`` offsets and ``c_logit`` (log c below its
    wall) instead of a0, a_N, c0, c_N and log c (its docstring, "Sampling"). The joint density there must be
    the model's stated one, term for term, plus log |d log c / d c_logit| = log sigmoid(-c_logit): else the
    reparameterization would have changed the model."""
    from numpyro.infer.util import log_density
    from jax.scipy.stats import norm

    data, c = FLOOR.prepare(_table(_small_table()))
    kwargs = FLOOR.model_kwargs(data, c)
    point = FLOOR.init_values(data, c)
    rng = np.random.default_rng(0)
    point = {k: np.asarray(v) + (0.3 * rng.standard_normal(np.shape(v)) if k.endswith(("_gap", "logit")) else 0)
             for k, v in point.items()}
    moved_sites = ("a0_gap", "a_N_gap", "c0_gap", "c_N_gap", "c_logit")

    @jax.jit  # one compiled program: the model's ops one by one cost ~10 s here
    def density(point):
        logp, trace = log_density(FLOOR.model, (), kwargs, point)
        moved = sum(trace[k]["fn"].log_prob(trace[k]["value"]).sum() for k in moved_sites)
        return logp, moved, {k: s["value"] for k, s in trace.items() if s["type"] != "plate"}

    logp, moved, v = density(point)
    ref = math.log(c["L_ref"])
    stated = (norm.logpdf(v["a0"], ref + math.log(0.1), 1.5) + norm.logpdf(v["a_N"], 0, 1)
              + norm.logpdf(v["c0"], ref + math.log(0.03), 1.5) + norm.logpdf(v["c_N"], 0, 1)
              + norm.logpdf(v["log_c"], v["c0"] + v["c_N"] * data["x_N_size"], v["tau_c"]).sum()
              + jax.nn.log_sigmoid(-v["c_logit"]).sum())
    assert float(moved) == pytest.approx(float(stated), rel=1e-12)
    assert np.isfinite(float(logp))
    # the wall: c_logit -> +inf is c -> W, where the smallest reached batch's B_min reaches that batch
    gap = data["target_loss"] - np.exp(v["log_L_inf"])[data["size"]]
    wall = np.array([np.min((np.exp(data["log_b"]) * gap)[data["size"] == g]) for g in range(2)])
    np.testing.assert_allclose(np.exp(v["log_c"]), wall * jax.nn.sigmoid(v["c_logit"]), rtol=1e-12)


def test_batch_floor_names_the_prior_behind_each_sampling_coordinate():
    # a table's fit samples a0_gap, c_logit and standardized deviations (the model's "Sampling"); the prior
    # sensitivity named them as if they were priors a user had set
    from scalinfer.models.batch import FLOOR

    assert FLOOR.prior_label("a0_gap") == "a0 (sampled as a0_gap)"
    assert "c0, c_N, tau_c" in FLOOR.prior_label("c_logit")
    assert "tau_a" in FLOOR.prior_label("log_a_decentered") and FLOOR.prior_label("alpha") == "alpha"
