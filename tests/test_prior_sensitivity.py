"""Power-scaling prior sensitivity of predictions (issue #22 item 4): the fit's log_prior group,
`scalinfer.inference.sensitivity`, `Prediction.prior_sensitivity`, `predict --json` and its warning.

The known answer is the conjugate normal model, y_i ~ N(mu, SIGMA^2), mu ~ N(0, s0^2), fitted with the package
(NUTS): power-scaling the prior by alpha gives the exact posterior N(m_a, v_a) with precision alpha/s0^2 + n/SIGMA^2
(the likelihood by alpha: 1/s0^2 + alpha n/SIGMA^2), so the sensitivity (psense's cumulative Jensen-Shannon
distance, differentiated in log2 alpha) has a closed-form value that the importance-weighted estimate must find.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd
import pytest
from scipy.stats import norm

import scalinfer.models
from scalinfer.inference.fit import fit, load_fit
from scalinfer.inference.sensitivity import THRESHOLD, prior_sensitivity
from scalinfer.models.base import Model
from scalinfer.predict import Prediction
from scalinfer.runs.schema import validate

from conftest import run_cli

SIGMA = 0.1
TRUE_MU = 0.05


@dataclasses.dataclass(frozen=True)
class NormalMean(Model):
    """y_i = loss_i - 3 ~ N(mu, SIGMA^2) with mu ~ N(0, prior_sd^2); predicts mu (the same at every target).
    A pair of nuisance parameters, N(0, 1) and unrelated to the data, is a site with dims (as the surface
    model's per-setting and per-size sites are): its log prior is one value per draw all the same."""

    prior_sd: float = 0.1

    name = "test-normal-mean"
    required_columns = ("N", "D", "loss")
    predicts = {"mu": "nats/token"}
    observed = ("y",)
    dims = {"nuisance": ["pair"]}

    def prepare(self, runs):
        self.check(runs)
        df = runs.df
        return ({"y": df["loss"].to_numpy(float) - 3.0},
                {"max_N": float(df["N"].max()), "max_D": float(df["D"].max())})

    def model(self, y, prior_sd):
        mu = numpyro.sample("mu", dist.Normal(0.0, prior_sd))
        numpyro.sample("nuisance", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        with numpyro.plate("run", y.shape[0]):
            numpyro.sample("obs", dist.Normal(mu, SIGMA), obs=y)

    def model_kwargs(self, data, constants):
        return {"y": data["y"], "prior_sd": float(self.prior_sd)}

    def init_values(self, data, constants):
        return {"mu": 0.0, "nuisance": np.zeros(2)}

    def predict(self, draws, constants, N=None, D=None):
        shape = np.broadcast_shapes(np.shape(N), np.shape(D))
        mu = np.asarray(draws["mu"], float)
        return {"mu": np.broadcast_to(mu.reshape(-1, *(1,) * len(shape)), (mu.shape[0], *shape)).copy()}

    def default_design(self, seed=0):
        return pd.DataFrame({"N": [1e8], "D": [2e9]})

    def true_params(self):
        return {"mu": TRUE_MU}

    def simulate(self, params, design, seed=0):
        rng = np.random.default_rng(seed)
        return design.assign(loss=3.0 + params["mu"] + SIGMA * rng.normal(size=len(design)))


TOY = NormalMean()


@pytest.fixture
def toy_model(monkeypatch):
    """The toy registered under its name (a fit file names its model; `load_fit` and `Fit` look it up)."""
    monkeypatch.setitem(scalinfer.models._REGISTRY, TOY.name, (f"{__name__}:TOY", TOY.version))
    return TOY


def _runs(n: int, seed: int):
    design = pd.DataFrame({"N": np.full(n, 1e8), "D": 2e9 * (1 + np.arange(n)), "run_id": np.arange(n).astype(str)})
    return validate(TOY.simulate({"mu": TRUE_MU}, design, seed=seed), source=f"toy n={n}", kind="runs")


def _cjs(m1, s1, m2, s2, lo, hi):
    """psense's cumulative Jensen-Shannon distance (`arviz_stats`'s ECDF formula) between N(m1, s1^2) (the
    unweighted P) and N(m2, s2^2) (the weighted Q), with the exact CDFs over [lo, hi] (the draws' range)."""
    x = np.linspace(lo, hi, 20001)
    dx = np.diff(x)
    mid = 0.5 * (x[1:] + x[:-1])
    p, q = norm.cdf(mid, m1, s1), norm.cdf(mid, m2, s2)
    ip, iq = np.sum(p * dx), np.sum(q * dx)
    d = np.log2(0.5 * (p + q))
    pq = np.sum(dx * p * (np.log2(p) - d)) + 0.5 / np.log(2) * (iq - ip)
    qp = np.sum(dx * q * (np.log2(q) - d)) + 0.5 / np.log(2) * (ip - iq)
    return np.sqrt((max(pq, 0) + max(qp, 0)) / (ip + iq))


def _exact(y, s0, component, draws, alphas=(0.99, 1.01)):
    """The exact power-scaling sensitivity of mu in the conjugate model (see the module docstring)."""
    def posterior(a_prior, a_lik):
        prec = a_prior / s0 ** 2 + a_lik * len(y) / SIGMA ** 2
        return a_lik * np.sum(y) / SIGMA ** 2 / prec, prec ** -0.5

    m1, s1 = posterior(1.0, 1.0)
    grads = []
    for a in alphas:
        m2, s2 = posterior(a, 1.0) if component == "prior" else posterior(1.0, a)
        cjs = max(_cjs(m1, s1, m2, s2, draws.min(), draws.max()),  # psense takes the larger of q's and -q's
                  _cjs(-m1, s1, -m2, s2, -draws.max(), -draws.min()))
        grads.append(cjs / abs(np.log2(a)))
    return float(np.mean(grads))


@pytest.mark.parametrize("n, prior_sd, dominated", [(1, 0.01, True), (400, 0.1, False)])
def test_conjugate_normal_known_answer(toy_model, n, prior_sd, dominated):
    """A strong prior and one observation: the answer follows the prior (prior sensitivity high, likelihood low,
    a warning naming mu's prior); a weak prior and 400 observations: the data (prior low, likelihood high)."""
    runs = _runs(n, seed=1)
    f = fit(runs, model=toy_model, chains=4, warmup=300, samples=1000, seed=0, prior_sd=prior_sd)
    assert set(f.tree["log_prior"].data_vars) == {"mu", "nuisance"}
    # the stored log prior is each site's prior log density at each draw (summed over the site's elements)
    mu = f.posterior["mu"].values
    np.testing.assert_allclose(f.tree["log_prior"]["mu"].values, norm.logpdf(mu, 0.0, prior_sd), rtol=1e-10)
    np.testing.assert_allclose(f.tree["log_prior"]["nuisance"].values,
                               norm.logpdf(f.posterior["nuisance"].values).sum(-1), rtol=1e-10)

    pred = f.predict(N=1e9, D=2e10)
    s = pred.prior_sensitivity["mu"]
    y = runs.df["loss"].to_numpy(float) - 3.0
    exact = {c: _exact(y, prior_sd, c, mu.ravel()) for c in ("prior", "likelihood")}
    # 4,000 NUTS draws of a normal: the importance-weighted ECDF distances of mu's own prior and of the likelihood
    # matched the exact ones within 4% at these seeds without the nuisance (the Monte Carlo error of an ECDF
    # functional of ~1,000 effective draws, a few percent); 10% leaves room for that, while a wrong weight (another
    # site's log prior, the wrong power) is off by a factor, not by percents. The joint prior's weights also carry
    # the nuisance's, whose power-scaling does not move mu but adds their noise (10% off at these seeds): 25%
    assert s["likelihood"] == pytest.approx(exact["likelihood"], rel=0.10), (s, exact)
    if dominated:
        assert s["most"] == s["most_label"] == "mu"  # the default Model.prior_label: the site itself
        assert s["most_prior"] == pytest.approx(exact["prior"], rel=0.10), (s, exact)
        assert s["prior"] == pytest.approx(exact["prior"], rel=0.25), (s, exact)
    if dominated:
        assert s["prior"] >= THRESHOLD > s["likelihood"] and s["diagnosis"] == "prior-dominated"
        assert any("mu is prior-dominated" in w and "prior of mu" in w for w in pred.warnings)
    else:
        # mu's own prior sensitivity is 0.003 here, below the nuisance's weights' noise: no site "moves" it
        assert s["prior"] < THRESHOLD <= s["likelihood"] and s["diagnosis"] == "data"
        assert not any("prior-dominated" in w for w in pred.warnings)


def test_predict_json_carries_it_and_old_files_say_unavailable(toy_model, tmp_path):
    """`scalinfer predict --json` has each quantity's prior sensitivity, and a prior-dominated answer warns there;
    a fit file without the log_prior group (written before it was stored) still loads and predicts, and the
    sensitivity says why it is unavailable."""
    f = fit(_runs(1, seed=1), model=toy_model, chains=2, warmup=200, samples=500, seed=0, prior_sd=0.01)
    path = f.save(tmp_path / "toy.nc")
    r = run_cli("predict", path, "--N", "1e9", "--D", "2e10", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    s = out["prior_sensitivity"]["mu"]
    assert set(s) == {"prior", "likelihood", "most", "most_label", "most_prior", "diagnosis"}
    assert s["diagnosis"] == "prior-dominated" and s["most"] == "mu"
    assert any("prior-dominated" in w and "mu" in w for w in out["warnings"])
    text = run_cli("predict", path, "--N", "1e9", "--D", "2e10")
    assert "prior sensitivity: mu" in text.out

    old = load_fit(path)
    del old.tree["log_prior"]
    old.save(tmp_path / "old.nc")
    pred = load_fit(tmp_path / "old.nc").predict(N=1e9, D=2e10)
    assert "no log_prior group" in pred.prior_sensitivity
    assert "no log_prior group" in pred.to_dict()["prior_sensitivity"]["unavailable"]
    assert pred.to_dict()["mu"]["median"] is not None
    off = run_cli("predict", path, "--N", "1e9", "--D", "2e10", "--no-sensitivity", "--json")
    assert off.code == 0 and "prior_sensitivity" not in json.loads(off.out), off.err
    assert not any("prior-dominated" in w for w in json.loads(off.out)["warnings"])


def test_grid_and_non_finite_draws(toy_model):
    """On a grid each quantity's values have the target's shape; a quantity with a non-finite draw has NaN
    sensitivity (its weighted distribution is not defined), not a number from the finite draws only."""
    f = fit(_runs(1, seed=1), model=toy_model, chains=2, warmup=200, samples=500, seed=0, prior_sd=0.01)
    mu = f.draws(["mu"])["mu"]
    grid = np.stack([mu, np.where(np.arange(mu.size) == 3, np.inf, mu)], axis=1)  # (draws, 2 targets)
    s = prior_sensitivity(f.tree, {"mu": grid})["mu"]
    assert np.shape(s["prior"]) == (2,) and np.isfinite(s["prior"][0]) and np.isnan(s["prior"][1])
    assert list(s["diagnosis"]) == ["prior-dominated", "unknown"]
    # no prior "moves" the undefined one: it was named after the first site, which a reader took for an answer
    assert list(s["most"]) == ["mu", None] and list(s["most_label"]) == ["mu", None]
    one = prior_sensitivity(f.tree, {"mu": grid[:, 1]})["mu"]
    assert one["most"] is None and one["diagnosis"] == "unknown" and np.isnan(one["prior"])
    text = Prediction({"mu": grid[:, 1]}, {"mu": "nats"}, {}, {}, prior_sensitivity={"mu": one}).to_text()
    assert f"prior sensitivity: mu unknown (1 of {mu.size} draws not finite)" in text, text
    # predict computes it at one target by default, on a grid when asked
    assert f.predict(N=[1e9, 2e9], D=2e10).prior_sensitivity is None
    assert np.shape(f.predict(N=[1e9, 2e9], D=2e10, sensitivity=True).prior_sensitivity["mu"]["prior"]) == (2,)


def test_surface_names_the_prior_behind_its_reparameterized_sites():
    # size scatter samples standard normals and residuals that stand for the laws' and the scatter's priors
    # (scalinfer.models.surface.size_scatter): a warning that said "the prior of lr_law_std" named nothing a user
    # can change; the label names the Priors fields (what Priors.scaled takes)
    from scalinfer.models.surface import MODEL

    assert "optimum_sd, lr_exp_N" in MODEL.prior_label("lr_law_std")
    assert "tau_lr_size" in MODEL.prior_label("lr_size_resid") and "lr_size" in MODEL.prior_label("lr_size_u")
    assert "loss_sd" in MODEL.prior_label("loss_size_line") and "tau_b" in MODEL.prior_label("w_b")
    assert MODEL.prior_label("a_D") == "a_D"  # a site that is its own prior
