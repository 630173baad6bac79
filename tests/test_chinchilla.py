"""The first posterior end to end: Chinchilla's L(N, D) on Epoch AI's points, and recovery from simulation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import scalinfer
from conftest import dataset

# Epoch AI's refit (Besiroglu et al. 2024): estimate and standard error; the issue asks for our posterior
# medians to fall inside their 95% intervals (estimate +- 1.96 se, rounded as 0.06 / 0.04 / 0.04).
EPOCH = {"E": (1.8172, 0.06), "alpha": (0.3478, 0.04), "beta": (0.3658, 0.04)}


@pytest.fixture(scope="module")
def epoch_fit():
    runs = scalinfer.load_runs(dataset("chinchilla_epoch2024", "points.csv"), format="chinchilla")
    assert len(runs) == 245  # all points kept: the robust likelihood handles the outliers (see README)
    return scalinfer.fit(runs, model="chinchilla", chains=4, warmup=500, samples=500, seed=1)


def test_epoch_replication(epoch_fit):
    s = epoch_fit.summary()
    for name, (est, half_width) in EPOCH.items():
        assert abs(s[name]["q50"] - est) <= half_width, (name, s[name]["q50"])
    # A and B are reported on the natural scale (derived from the centered parameterization)
    assert 200 < s["A"]["q50"] < 1000 and 500 < s["B"]["q50"] < 6000
    assert max(v["r_hat"] for v in s.values()) <= 1.01
    assert epoch_fit.divergences == 0
    assert epoch_fit.warnings() == []


def test_epoch_outliers_get_heavy_tails(epoch_fit):
    # The five points at C ~ 1e19 with D/N < 0.45 sit 6-30% above the law; a Gaussian likelihood would bend
    # the fit towards them. The learned Student-t degrees of freedom being small is what discounts them.
    assert epoch_fit.summary()["nu"]["q95"] < 5


def test_recovery_from_simulation():
    truth = {"E": 1.9, "A": 300.0, "B": 1500.0, "alpha": 0.32, "beta": 0.30, "sigma": 0.01}
    runs = scalinfer.simulate("chinchilla", params=truth, seed=3)
    f = scalinfer.fit(runs, model="chinchilla", chains=4, warmup=400, samples=400, seed=3)
    s = f.summary()
    # each 90% interval should hold the truth; with 5 parameters at a fixed seed this either holds or not,
    # and a miss at 90% nominal for one of them would be a 1-in-2 event over 5 -- so we check the two
    # exponents and E (the quantities users read) and the loss prediction at a 10x larger target.
    for name in ("E", "alpha", "beta"):
        assert s[name]["q05"] <= truth[name] <= s[name]["q95"], (name, s[name], truth[name])
    N, D = 5e10, 1e12
    true_loss = truth["E"] + truth["A"] * N ** -truth["alpha"] + truth["B"] * D ** -truth["beta"]
    pred = f.predict(N=N, D=D, ci=0.9).to_dict()
    assert pred["loss"]["lo"] <= true_loss <= pred["loss"]["hi"]
    assert pred["extrapolation"]["N_ratio"] == pytest.approx(N / 5e9)


def test_predict_shapes_and_compute_optimal(epoch_fit):
    p = epoch_fit.predict(N=np.array([1e9, 1e10]), D=2e11)
    assert p["loss"].shape == (2000, 2)
    assert np.all(np.diff(np.median(p["loss"], axis=0)) < 0)  # bigger model, lower loss
    c = epoch_fit.predict(C=5.76e23)
    assert np.allclose(6 * c["N_opt"] * c["D_opt"], 5.76e23, rtol=1e-8)
    frame = epoch_fit.predict(N=np.array([1e9, 1e10]), D=2e11).to_frame()
    assert list(frame.columns[:2]) == ["N", "D"] and len(frame) == 2


def test_laplace_close_to_nuts_when_well_identified(epoch_fit):
    # Well-identified parameters (hundreds of points, 7 parameters): the Gaussian at the mode should match
    # NUTS's medians and interval widths closely; 20% of the posterior sd for the medians and a 40% ratio band
    # for the widths leave room for the mild skew of the heavy-tailed likelihood.
    runs = scalinfer.load_runs(dataset("chinchilla_epoch2024", "points.csv"), format="chinchilla")
    lap = scalinfer.fit(runs, model="chinchilla", method="laplace", seed=1)
    a, b = epoch_fit.summary(), lap.summary()
    for name in ("E", "alpha", "beta"):
        assert abs(a[name]["q50"] - b[name]["q50"]) < 0.2 * a[name]["sd"], name
        assert 0.6 < b[name]["sd"] / a[name]["sd"] < 1.4, name
    assert any("laplace" in w for w in lap.warnings())


def test_nuts_draws_more_until_converged_or_max_samples(tmp_path, monkeypatch):
    import importlib

    fit_module = importlib.import_module("scalinfer.inference.fit")  # the module (the package exports its `fit`)
    runs = scalinfer.simulate("chinchilla", seed=3)
    short = scalinfer.fit(runs, model="chinchilla", chains=2, warmup=200, samples=100, seed=0)
    # the rule says "more" after every block (what it says of which draws: the next test): every block up to
    # max_samples is drawn
    asked = []
    monkeypatch.setattr(fit_module, "_more_draws",
                        lambda d, before: asked.append(d["alpha"].shape) or (True, "forced", 1.0))
    longer = scalinfer.fit(runs, model="chinchilla", chains=2, warmup=200, samples=100, max_samples=300, seed=0)
    assert asked == [(2, 100), (2, 150), (2, 200), (2, 250)]  # blocks of EXTEND_FRACTION x samples = 50
    assert short.posterior.sizes["draw"] == 100 and short.attrs["samples_extended"] == 0  # explicit: no more
    assert longer.posterior.sizes["draw"] == 300 and longer.attrs["samples_extended"] == 200
    # the same chains, continued: the first 100 draws are the short fit's, bit for bit
    np.testing.assert_array_equal(longer.posterior["alpha"].values[:, :100], short.posterior["alpha"].values)
    assert longer.arrays("sample_stats", ["diverging"])["diverging"].shape == (2, 300)
    again = scalinfer.load_fit(longer.save(tmp_path / "f.nc"))
    assert again.attrs["samples_extended"] == 200
    assert {k: again.summary_dict()[k] for k in ("chains", "draws_per_chain", "samples_extended")} == {
        "chains": 2, "draws_per_chain": 300, "samples_extended": 200}  # what `scalinfer summary` prints


def test_more_draws_mend_slow_mixing_not_a_stuck_chain():
    from scalinfer.inference.fit import RHAT_STUCK, _more_draws

    rng = np.random.default_rng(0)
    iid = rng.normal(size=(4, 1000))
    assert _more_draws({"a": iid})[:2] == (False, None)  # converged: R-hat ~1.00, bulk ESS ~4,000
    # an AR(1) chain with phi 0.99: ESS ~ 4,000 x 0.01 / 1.99 = 20, chains still overlapping (R-hat < 1.1)
    slow = np.zeros((4, 1000))
    for t in range(1, 1000):
        slow[:, t] = 0.99 * slow[:, t - 1] + np.sqrt(1 - 0.99 ** 2) * rng.normal(size=4)
    more, why, _ = _more_draws({"a": iid, "b": slow})
    assert more and "bulk ESS" in why and "(b)" in why
    # one chain 5 sd off the others: R-hat far above RHAT_STUCK. After a first block, more draws (a short first
    # block's R-hat can fall); once it has not fallen over a block, no more
    stuck = iid + np.array([0.0, 0.0, 0.0, 5.0])[:, None]
    more, why, rhat = _more_draws({"a": stuck})
    assert more and why.startswith("R-hat") and rhat > RHAT_STUCK
    more, _, again = _more_draws({"a": stuck}, rhat)
    assert not more and again == rhat
    assert _more_draws({"a": stuck}, rhat + 0.5)[0]  # it fell: more
