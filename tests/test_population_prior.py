"""The surface model's population prior (`scalinfer.models.surface.population`, issue #22 item 1): its pooling
recovers a known spread across families, ``prior="default"`` is the broad prior of before, the option travels
through the fit file, and the shipped numbers are what `FAMILIES` give."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import scalinfer
from scalinfer.models.surface import PRIORS, Surface, surface_model
from scalinfer.models.surface.population import (FAMILIES, POPULATION, SCALES, default_on_scale, family_likelihood,
                                                 fit_population, population_priors, to_prior)

#: the broad prior as shipped before the population prior (the module table of scalinfer.models.surface.priors)
TODAY = {"optimum_sd": 1.5, "lr_exp_N": (0.0, 1.0), "lr_exp_D": (0.0, 1.0), "batch_exp_N": (0.0, 1.0),
         "batch_exp_D": (0.0, 1.0), "kappa1": (0.5, 0.5), "kappa2_sd": 0.5, "loss_sd": 0.2, "loss_exponent_sd": 0.3,
         "c_lr0": (-4.0, 1.5), "c_b0": (-4.0, 1.5), "curvature_exponent_sd": 1.0, "delta_lr": (0.0, 1.0),
         "delta_b": (0.0, 1.0), "p_lr_beta": (3.0, 3.0), "p_b_beta": (3.0, 3.0), "p_min": 0.5, "p_span": 3.5,
         "tau_optimum_sd": 0.3, "tau_loss_sd": 0.02, "sigma0_sd": 0.02, "sigma1_sd": 0.5, "nu": (2.0, 0.1),
         "lr_size": (1.0, 0.005), "b_size": (1.0, 0.005), "loss_size": (1.0, 5e-5),
         # the option lr_valley_by_batch's two sites (added with it; no site of a fit without the option)
         "c_lr_B_sd": 0.3, "delta_lr_B_sd": 0.3}


def _trace(prior, seed=0):
    """One prior draw of the surface model with size scatter on a 3-size design (no data: every site drawn from
    its prior), run eagerly (compiling the whole model costs more than its few hundred operations one by one):
    (values, distributions) by site."""
    from numpyro import handlers

    n = np.array([-1.0, 0.0, 1.0])
    kw = dict(n_s=n, d_s=np.zeros(3), size_s=np.arange(3), n_size=tuple(n), s_obs=np.zeros(1, int),
              x_obs=np.zeros(1), z_obs=np.zeros(1), h_N=1.2, h_D=0.8, size_scatter=True, prior=prior)
    tr = handlers.trace(handlers.seed(surface_model, seed)).get_trace(**kw)
    return ({k: np.asarray(v["value"], float) for k, v in tr.items() if v["type"] in ("sample", "deterministic")},
            {k: v["fn"] for k, v in tr.items() if v["type"] == "sample"})


def test_default_is_the_broad_prior_of_before():
    """``prior="default"`` samples from exactly the priors shipped before: `PRIORS` holds the same numbers and
    each site's distribution has them (scaled by h where the table says; one prior draw, no data). Above 5 s
    (49 s at load 12): its first draw compiles the model's operations one by one; the next test's reuses them."""
    assert dataclasses.asdict(PRIORS) == TODAY
    fn = _trace("default")[1]
    assert (float(fn["a_D"].loc), float(fn["a_D"].scale)) == pytest.approx((0.0, 0.8))
    assert (float(fn["b_D"].loc), float(fn["b_D"].scale)) == pytest.approx((0.0, 0.8))
    assert (float(fn["c_lr0"].loc), float(fn["c_lr0"].scale)) == (-4.0, 1.5)
    assert (float(fn["delta_b"].loc), float(fn["delta_b"].scale)) == (0.0, 1.0)
    assert (float(fn["p_lr_unit"].concentration1), float(fn["p_lr_unit"].concentration0)) == (3.0, 3.0)
    assert (float(fn["kappa1"].loc), float(fn["kappa1"].scale)) == (0.5, 0.5)
    # tau_lr_size^2 ~ InverseGamma(1, 0.005): residuals t_2(0, sqrt(0.005 / 1)), u ~ Gamma(1 + (3 - 2) / 2)
    assert fn["lr_size_resid"]._c == pytest.approx(np.sqrt(0.005)) and float(fn["lr_size_u"].concentration) == 1.5


def test_a_law_prior_with_a_mean_shifts_the_size_levels():
    """With size scatter the N slope's prior enters through the sizes' levels (its conditional given them): a
    prior mean must move the slope and the levels by mean x h_N n. With lr_exp_N ~ N(-0.7, 1e-4) and a size
    scatter of ~1e-4 (InverseGamma(100, 1e-6)), one prior draw has a_N / h_N within 1e-3 of -0.7 (10 sds) and
    levels on that line within 1e-2 of it (the intercept's prior sd 1.5 moves them all together)."""
    pr = dataclasses.replace(PRIORS, lr_exp_N=(-0.7, 1e-4), lr_size=(100.0, 1e-6))
    values = _trace(pr)[0]
    a0, a_N, A = (values[k] for k in ("a0", "a_N", "lr_size"))
    assert abs(a_N / 1.2 + 0.7) < 1e-3
    np.testing.assert_allclose(A, a0 + a_N * np.array([-1.0, 0.0, 1.0]), atol=1e-2)


def test_pooling_recovers_a_known_spread_across_families():
    """300 synthetic families, theta_f ~ N(0.4, 0.25^2), each seen through a posterior of sd 0.05-0.3 under the
    broad prior N(0, 1): dividing the prior out and pooling recovers mu and sigma within 3 of their posterior sds
    (mu's ~0.016, sigma's ~0.015; seed fixed). With 4 families the predictive stays near the default's width,
    and with none it is the default (mean, sd) to 1e-3 (the grid's resolution)."""
    rng = np.random.default_rng(0)
    F, mu, sigma, m0, s0 = 300, 0.4, 0.25, 0.0, 1.0
    se = rng.uniform(0.05, 0.3, F)
    theta = rng.normal(mu, sigma, F)
    lik_y = rng.normal(theta, se)
    # each family's posterior under the prior N(m0, s0^2), then the likelihood recovered from it
    post_var = 1.0 / (1.0 / se ** 2 + 1.0 / s0 ** 2)
    post_mean = post_var * (lik_y / se ** 2 + m0 / s0 ** 2)
    lik = [family_likelihood(m, np.sqrt(v), m0, s0) for m, v in zip(post_mean, post_var)]
    np.testing.assert_allclose([y for y, _ in lik], lik_y, rtol=1e-9)
    np.testing.assert_allclose([s for _, s in lik], se, rtol=1e-9)
    r = fit_population(lik_y, se ** 2, m0, s0)
    assert abs(r["mu"] - mu) < 3 * 0.016 and abs(r["sigma"] - sigma) < 3 * r["sigma_sd"]
    assert abs(r["sd"] - np.hypot(sigma, 0.016)) < 0.05
    few = fit_population(lik_y[:4], se[:4] ** 2, m0, s0)
    assert 0.3 < few["sd"] < 1.0
    none = fit_population([], [], m0, s0)
    assert abs(none["mean"] - m0) < 1e-9 and abs(none["sd"] - s0) < 1e-3


def test_prior_forms_round_trip():
    """`to_prior` is the inverse of `default_on_scale`: an InverseGamma, a Beta and a Normal come back from their
    moments on the pooling scale."""
    for name in SCALES:
        np.testing.assert_allclose(to_prior(name, *default_on_scale(name)), getattr(PRIORS, SCALES[name][0]),
                                   rtol=1e-6)


def test_shipped_population_is_regenerated_from_families():
    """`POPULATION` is `population_priors(FAMILIES)` (to the 4 significant digits it is written with)."""
    assert FAMILIES, "population.FAMILIES is empty"
    regenerated, _ = population_priors(FAMILIES)
    for field, _ in SCALES.values():
        np.testing.assert_allclose(getattr(POPULATION, field), getattr(regenerated, field), rtol=1e-3, err_msg=field)
    assert POPULATION != PRIORS


@pytest.fixture(scope="module")
def tiny_runs():
    from tests.support.designs import surface_design

    m = Surface()
    df = m.simulate(m.true_params(), surface_design("tiny"), seed=1)
    from scalinfer.runs.schema import validate

    return validate(df.drop(columns=[c for c in df if c.startswith("true_")]), source="simulated", kind="runs")


@pytest.mark.slow
def test_population_prior_round_trips_through_the_fit_file(tiny_runs, tmp_path):
    """A MAP fit on the 96-run tiny design with the default option records its prior (option and constant);
    the reloaded fit is the same model and answers the same. (One compilation of the model: 149 s at load 12.)"""
    from scalinfer.inference.fit import load_fit

    f = scalinfer.fit(tiny_runs, model="surface", method="map", seed=0)
    g = load_fit(f.save(tmp_path / "f.nc"))
    assert f.model.prior == g.model.prior == "population"
    assert g.model == f.model and g.constants["prior"] == 1.0
    np.testing.assert_allclose(g.predict(N=1e9, D=4e10).interval("lr_opt"), f.predict(N=1e9, D=4e10).interval("lr_opt"))


def test_a_fit_file_from_before_the_option_is_default():
    from scalinfer.models.surface.model import prior_of

    assert prior_of({}) == "default" and prior_of({"prior": 1.0}) == "population"
    with pytest.raises(scalinfer.errors.ModelError, match="prior must be one of"):
        Surface(prior="flat")
