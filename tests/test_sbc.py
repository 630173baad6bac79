"""The misspecified simulators of `benchmarks/sbc.py` (`scalinfer.models.surface.simulate.Variant`) do what they
claim, on noiseless or large designs (no fits)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scalinfer.errors import ModelError
from scalinfer.models.surface.simulate import TRUE_PARAMS, Variant, law_optima, simulate

#: the Step-Law-like truth without scatter or divergence, so each setting's optimum is the law's
CLEAN = {**TRUE_PARAMS, "tau_lr": 0.0, "tau_b": 0.0, "tau_loss": 0.0, "diverge_above": 100.0}
NOISELESS = {**CLEAN, "sigma0": 0.0, "sigma1": 0.0}


def _grid(Ns, lrs, batches, tpp=50.0) -> pd.DataFrame:
    return pd.DataFrame([(n, tpp * n, lr, b) for n in Ns for lr in lrs for b in batches],
                        columns=["N", "D", "lr", "batch_tokens"])


def test_no_variant_is_the_model():
    d = _grid([2e8, 4e8], 2.0 ** np.arange(-12, -6), 2.0 ** np.arange(17, 21))
    pd.testing.assert_frame_equal(simulate({}, d, seed=3), simulate({}, d, seed=3, variant=Variant()))


def test_variant_fields_are_checked():
    with pytest.raises(ModelError, match="noise_N_exp"):
        Variant(noise_N_exp=float("nan"))


def test_nonseparable_valley_width_and_asymmetry_move_with_batch():
    """At batches v = -2 and +2 log units off B*, the LR valley's excess one log unit above and below the ridge:
    its log curvature moves by w v and its asymmetry (log of above over below, 2 delta) by 2 a v; the best LR at
    each batch stays on the ridge. Noiseless and at the same u, so exact (the valley's far-field term cancels in
    the ratios)."""
    N, D = 3e8, 1.5e10
    x_star, z_star = (float(v) for v in (law_optima(NOISELESS, N, D)[k] for k in ("lr_opt", "batch_opt")))
    w, a = 0.3, -0.2
    out = {}
    for v in (-2.0, 2.0):
        z = z_star + v
        ridge = x_star + NOISELESS["kappa1"] * v + 0.5 * NOISELESS["kappa2"] * v * v
        d = pd.DataFrame({"N": N, "D": D, "lr": np.exp(ridge + np.array([-1.0, 0.0, 1.0])), "batch_tokens": np.exp(z)})
        for name, var in (("sep", None), ("non", Variant(lr_width_per_log_batch=w, lr_asymmetry_per_log_batch=a))):
            y = np.log(simulate(NOISELESS, d, seed=0, variant=var)["loss"].to_numpy())
            out[name, v] = (y[0] - y[1], y[2] - y[1])  # excess below and above the ridge
            assert y[1] < min(y[0], y[2])  # the ridge is still the best LR at this batch
    for v in (-2.0, 2.0):  # non-separable over separable: curvature x e^{w v}, above/below x e^{2 a v}
        below = out["non", v][0] / out["sep", v][0]
        above = out["non", v][1] / out["sep", v][1]
        assert np.log(np.sqrt(below * above)) == pytest.approx(w * v, abs=1e-9)
        assert np.log(above / below) == pytest.approx(2 * a * v, abs=1e-9)


def test_curved_laws_have_a_second_difference():
    """log eta* and log B* at three log-equally spaced N: the separable power law's second difference is 0, the
    curved one's 2 q h^2, in the laws (`law_optima`) and in the simulated settings' optima alike."""
    q_lr, q_b, h = 0.05, -0.03, np.log(4.0)
    Ns = np.exp(TRUE_PARAMS["ref_logN"] + h * np.array([-1.0, 0.0, 1.0]))
    var = Variant(lr_opt_curv_N=q_lr, batch_opt_curv_N=q_b)
    for variant, want in ((None, (0.0, 0.0)), (var, (2 * q_lr * h * h, 2 * q_b * h * h))):
        law = law_optima(CLEAN, Ns, 50.0 * Ns, variant)
        df = simulate({**CLEAN, "tau_lr_size": 0.0, "tau_b_size": 0.0}, _grid(Ns, [1e-3], [2.0**19]), 0, variant)
        for k, target in zip(("lr_opt", "batch_opt"), want):
            for logs in (law[k], np.log(df[f"true_{k}"].to_numpy())):
                assert np.diff(logs, 2)[0] == pytest.approx(target, abs=1e-9)


def test_heteroscedastic_noise_grows_as_one_over_N():
    """Residual sd of log loss about the noiseless surface at N 4x below and 4x above ref_logN: in ratio 16 with
    noise_N_exp = 1 (scale ~ 1/N), 1 without. 600 runs per size with near-Gaussian noise (nu = 1e6): each sd is
    within ~3% (1/sqrt(2n)), so 15% is five standard errors."""
    Ns = np.exp(TRUE_PARAMS["ref_logN"] + np.log(4.0) * np.array([-1.0, 1.0]))
    d = _grid(Ns, 2.0 ** np.linspace(-12, -7, 30), 2.0 ** np.linspace(17, 21, 20))
    noisy = {**CLEAN, "sigma0": 0.01, "sigma1": 0.0, "nu": 1e6}
    clean = np.log(simulate(NOISELESS, d, seed=1)["loss"].to_numpy())
    small = d["N"].to_numpy() < np.exp(TRUE_PARAMS["ref_logN"])
    for variant, ratio in ((None, 1.0), (Variant(noise_N_exp=1.0), 16.0)):
        r = np.log(simulate(noisy, d, seed=1, variant=variant)["loss"].to_numpy()) - clean
        assert np.std(r[small]) / np.std(r[~small]) == pytest.approx(ratio, rel=0.15)
        assert np.std(r[~small]) == pytest.approx(0.01 / ratio ** 0.5, rel=0.15)


def test_padded_runs_leave_the_density_unchanged():
    """`scalinfer.models.surface.data.pad_runs` (the padding that lets sbc.py's data sets share one compiled
    program): the masked rows add nothing, so the joint log density at the same parameters is the same (float64:
    the sums differ only in rounding, 1e-9 relative is ~1e7 ulps of margin). Too many runs is a one-line error."""
    import jax
    from numpyro import handlers
    from numpyro.infer.util import log_density

    import scalinfer
    from scalinfer.models.surface import MODEL
    from scalinfer.models.surface.data import pad_runs

    d = _grid([1e8, 2e8, 4e8], 2.0 ** np.arange(-12, -4), 2.0 ** np.arange(17, 21))
    df = simulate({**TRUE_PARAMS, "diverge_above": 1.0}, d, seed=4)
    runs = scalinfer.load_runs(df.drop(columns=["true_lr_opt", "true_batch_opt", "true_loss_opt"]))
    data, c = MODEL.prepare(runs)
    assert 0 < c["n_censored"] < len(df)
    kw = MODEL.model_kwargs(data, c)
    params = MODEL.init_values(data, c)
    with jax.enable_x64(True):
        plain, _ = log_density(handlers.seed(MODEL.model, 0), (), kw, params)
        padded_kw = pad_runs(kw, len(df))
        padded, _ = log_density(handlers.seed(MODEL.model, 0), (), padded_kw, params)
    assert len(padded_kw["x_obs"]) == len(padded_kw["x_cens"]) == len(df)
    assert padded_kw["obs_mask"].sum() + padded_kw["cens_mask"].sum() == len(df)
    np.testing.assert_allclose(float(padded), float(plain), rtol=1e-9)
    with pytest.raises(ModelError, match="cannot pad .* runs to 10 rows"):
        pad_runs(kw, 10)
