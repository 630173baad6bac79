"""Reduced designs of the ``surface`` model (`scalinfer.models.surface.design`): an LR sweep at one batch
(``fixed_batch``) and a batch sweep at one LR (``fixed_lr``): detection, forcing, and a fit of the fixed-batch
design at default NUTS settings on simulated data with a known optimum (converged as the issue asks: R-hat <=
1.01, bulk ESS >= 400, under 0.5% divergent transitions; the answer's 90% interval holds the truth). The
fixed-LR fit starts from the mode given sigma0 (its joint density has no maximum) and holds the true batch; its
bulk ESS at the defaults is still short of 400 (benchmarks/README.md). A thin table of real runs (4 per setting of
Step Law's) has a second spike, at tau_loss -> 0, and converges from the mode given both."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import scalinfer
from scalinfer.errors import ModelError

from conftest import dataset

TRUTH_COLUMNS = ["true_lr_opt", "true_batch_opt", "true_loss_opt"]
B0, ETA0 = 2.0 ** 20, 2.0 ** -9  # the one batch / LR of the cut designs (the middle of the default grid)


def _runs(df: pd.DataFrame, source: str = "simulated"):
    from scalinfer.runs.schema import validate

    return validate(df.drop(columns=[c for c in TRUTH_COLUMNS if c in df]), source=source, kind="runs")


def _table(N, D, lr, batch) -> pd.DataFrame:
    """A small table with a made-up loss (detection reads only the columns' values)."""
    df = pd.DataFrame({"N": N, "D": D, "lr": lr, "batch_tokens": batch})
    return df.assign(loss=3.0 + 0.01 * np.arange(len(df)))


# ---- detection ------------------------------------------------------------------------------------------------
def _design(df, **options):
    from scalinfer.models.surface import Surface

    _, c = Surface(**options).prepare(_runs(df))
    return c


def test_detected_designs_and_their_constants():
    from scalinfer.models.surface.design import DESIGN_CODE

    four = dict(N=[1e8] * 4, D=[2e9] * 4)
    assert _design(_table(**four, lr=[1e-3, 2e-3, 4e-3, 8e-3], batch=[2.0 ** 20] * 4))["design"] == \
        DESIGN_CODE["fixed_batch"]
    assert _design(_table(**four, lr=[1e-3] * 4, batch=[2.0 ** k for k in (17, 18, 19, 20)]))["design"] == \
        DESIGN_CODE["fixed_lr"]
    full = _table(**four, lr=[1e-3, 2e-3, 1e-3, 2e-3], batch=[2.0 ** 18] * 2 + [2.0 ** 20] * 2)
    assert _design(full)["design"] == DESIGN_CODE["full"]
    # forced: the whole surface on a one-batch table
    assert _design(_table(**four, lr=[1e-3, 2e-3, 4e-3, 8e-3], batch=[2.0 ** 20] * 4),
                   design="full")["design"] == DESIGN_CODE["full"]


def test_mixed_tables_are_full_and_an_unvaried_batch_is_recorded():
    # one setting sweeps the batch, the other does not: full, nothing unvaried
    mixed = _table(N=[1e8] * 4 + [2e8] * 2, D=[2e9] * 4 + [4e9] * 2, lr=[1e-3, 2e-3] * 3,
                   batch=[2.0 ** 18, 2.0 ** 18, 2.0 ** 20, 2.0 ** 20, 2.0 ** 19, 2.0 ** 19])
    c = _design(mixed)
    assert c["design"] == 0.0 and "unvaried_batch" not in c and "unvaried_lr" not in c
    # every setting has one batch, but the batch grows with N: full, with the batch recorded as unvaried
    grown = _table(N=[1e8] * 2 + [2e8] * 2, D=[2e9] * 2 + [4e9] * 2, lr=[1e-3, 2e-3] * 2,
                   batch=[2.0 ** 18] * 2 + [2.0 ** 20] * 2)
    c = _design(grown)
    assert c["design"] == 0.0 and c["unvaried_batch"] == 1.0 and "unvaried_lr" not in c


def test_design_errors_are_one_line_model_errors():
    from scalinfer.models.surface import Surface

    with pytest.raises(ModelError, match="design must be one of"):
        Surface(design="lr_only")
    full = _table(N=[1e8] * 4, D=[2e9] * 4, lr=[1e-3, 2e-3] * 2, batch=[2.0 ** 18] * 2 + [2.0 ** 20] * 2)
    with pytest.raises(ModelError, match="design='fixed_batch' needs one batch .* found 2 distinct"):
        _design(full, design="fixed_batch")
    with pytest.raises(ModelError, match="same LR and batch"):
        _design(_table(N=[1e8, 2e8], D=[2e9, 4e9], lr=[1e-3] * 2, batch=[2.0 ** 20] * 2))


# ---- fits at default settings ----------------------------------------------------------------------------------
def _noiseless_optimum(vary: str, N: float, D: float) -> float:
    """The true best LR at B0 (`vary` "lr") or best batch at ETA0 ("batch") at (N, D): the argmin of the
    noiseless simulated surface (every scatter and noise 0) on a grid 1/1000 of a log unit fine."""
    from scalinfer.models.surface import MODEL

    params = {**MODEL.true_params(), **{k: 0.0 for k in ("tau_lr", "tau_b", "tau_loss", "sigma0", "sigma1")},
              "diverge_above": 50.0}
    grid = np.exp(np.arange(np.log(1e-5), np.log(1.0), 1e-3) if vary == "lr"
                  else np.arange(np.log(2.0 ** 12), np.log(2.0 ** 28), 1e-3))
    design = pd.DataFrame({"N": N, "D": D, "lr": grid if vary == "lr" else ETA0,
                           "batch_tokens": B0 if vary == "lr" else grid})
    loss = MODEL.simulate(params, design, seed=0)["loss"].to_numpy()
    return float(grid[np.nanargmin(loss)])


def _cut_fit(vary: str):
    from scalinfer.models.surface import MODEL

    d = MODEL.default_design()  # 4 sizes x 3 budgets, 13 LRs x 7 batches
    d = d[d.batch_tokens == B0] if vary == "lr" else d[np.isclose(d.lr, ETA0)]
    df = MODEL.simulate(MODEL.true_params(), d, seed=5)
    return scalinfer.fit(_runs(df), model="surface", seed=5)  # NUTS at its defaults: 4 chains, 500 + 1,000


@pytest.fixture(scope="module")
def fixed_batch_fit():
    return _cut_fit("lr")


def _converged(f):
    """The issue's criterion at the defaults (4 x 1,000 draws, more where not converged): R-hat <= 1.01, bulk ESS
    >= 400, fewer than 0.5% of the draws divergent (of those drawn: a fit that draws more has more transitions that
    can diverge)."""
    s = {k: v for k, v in f.summary().items() if np.isfinite(v["r_hat"])}
    worst = max(s, key=lambda k: s[k]["r_hat"])
    assert s[worst]["r_hat"] <= 1.01, (worst, s[worst])
    least = min(s, key=lambda k: s[k]["ess_bulk"])
    assert s[least]["ess_bulk"] >= 400, (least, s[least])
    assert f.divergences < 0.005 * f.n_draws, (f.divergences, f.n_draws)


# The target is 2x the largest fitted N and D (a new setting, whose offsets have mean zero: the law's value is
# the centre of what it would see). At fixed seeds the check is deterministic; a well-calibrated 90% interval
# misses 1 time in 10 over seeds, so a failure after a change of seed is not by itself a bug, but a change of
# the model that moves the interval off the truth at this seed is.
TARGET = dict(N=1.08e9, D=1.08e11)


@pytest.mark.slow
def test_fixed_batch_fit_converges_at_the_defaults(fixed_batch_fit):
    """#21 item 2 on the simulated one-batch grid (seed 5). Measured: R-hat 1.004 and bulk ESS 532 (tau_lr), no
    divergence, since the runs that diverged are censored at their setting's best loss
    (`scalinfer.models.surface.data`); 1.013-1.025 by the machine before. The thresholds are the issue's."""
    _converged(fixed_batch_fit)


@pytest.mark.slow
def test_fixed_batch_fit_holds_the_true_lr(fixed_batch_fit, tmp_path):
    f = fixed_batch_fit
    assert f.constants["design"] == 1.0
    s = f.summary()
    assert max(v["r_hat"] for v in s.values() if np.isfinite(v["r_hat"])) < 1.05  # near: the test above is strict
    assert "nu" not in f.draws()  # a reduced design's nu is fixed (design.REDUCED_NU), not sampled
    assert not any(k.startswith(("b0", "b_", "kappa", "c_b", "delta_b", "tau_b", "eps_b")) for k in f.draws())
    p = f.predict(**TARGET)
    assert set(p.draws) == {"lr_opt_at_batch", "loss_opt_at_batch"}
    med, lo, hi = p.interval("lr_opt_at_batch", 0.9)
    truth = _noiseless_optimum("lr", **TARGET)
    assert lo <= truth <= hi, (truth, lo, hi)
    assert any("fixed-batch design" in w and "batch_opt" in w for w in p.warnings)
    # at the table's batch (given or not) the answer is the same; another batch is an error; a reload keeps it
    assert np.allclose(f.predict(**TARGET, batch=B0)["lr_opt_at_batch"], p["lr_opt_at_batch"])
    with pytest.raises(ModelError, match="answers at that batch only"):
        f.predict(**TARGET, batch=2 * B0)
    with pytest.raises(KeyError):
        p["batch_opt"]
    g = scalinfer.load_fit(f.save(tmp_path / "fb.nc"))
    assert np.allclose(g.predict(**TARGET)["lr_opt_at_batch"], p["lr_opt_at_batch"])
    assert "loss" in g.predict(**TARGET, lr=1e-3).draws


@pytest.mark.slow
def test_fixed_lr_fit_starts_from_the_mode_given_sigma0_and_holds_the_true_batch():
    """The one-LR grid (84 runs, 7 batches per setting): the joint density has no maximum (sigma0 -> 0 with each
    setting's valley through one of its runs), so the fit starts NUTS from the mode given sigma0
    (`Surface.mode_held`). From the spike its R-hat was 1.55 (tau_b); from there 1.007 at this seed, with bulk
    ESS 301, below the issue's 400, so `_converged` is not asserted (from the mode given sigma0 and tau_loss as
    well: 1.004 and 581, but that start costs (Mis)Fitting's folds elsewhere: benchmarks/README.md). R-hat < 1.02
    is: a margin over the measured 1.007 for other machines' floating point."""
    f = _cut_fit("batch")
    assert f.attrs["map_held"] == "sigma0" and f.attrs["map_converged"] == 1
    assert not any("mode search" in w for w in f.warnings())
    s = {k: v for k, v in f.summary().items() if np.isfinite(v["r_hat"])}
    assert max(v["r_hat"] for v in s.values()) < 1.02
    assert "nu" not in f.draws()  # a reduced design's nu is fixed (design.REDUCED_NU), not sampled
    assert not any(k.startswith(("a0", "a_", "kappa", "c_lr", "delta_lr", "tau_lr", "eps_lr")) for k in f.draws())
    p = f.predict(**TARGET)
    med, lo, hi = p.interval("batch_opt_at_lr", 0.9)
    truth = _noiseless_optimum("batch", **TARGET)
    assert lo <= truth <= hi, (truth, lo, hi)


def _steplaw_sparse():
    """4 random runs per setting of Step Law's N <= 6e8 (60 runs over 15 settings, both LR and batch varying):
    benchmarks/suggest_replay.py's seed design, a sweep as thin as a first calibration."""
    from scalinfer.runs.schema import validate

    full = scalinfer.load_runs(dataset("steplaw", "dense_runs.csv"), format="steplaw", where="N <= 6e8").df
    full = full.reset_index(drop=True)
    rng = np.random.default_rng(0)
    idx = sorted(int(i) for _, g in full.groupby(["N", "D"]) for i in rng.choice(g.index.to_numpy(), 4, replace=False))
    return validate(full.iloc[idx].reset_index(drop=True), source="steplaw-sparse", kind="runs")


def test_a_thin_table_has_a_second_spike_at_tau_loss_and_a_mode_given_both():
    """With 4 runs per setting the joint density also grows without bound as tau_loss -> 0 (every setting's loss
    level on the law, its valley following its runs): the search given sigma0 alone walks there (tau_loss e^-14 at
    200 steps) and does not converge; given sigma0 and tau_loss (`Surface.mode_held`) it does."""
    from scalinfer.inference.optimize import find_map
    from scalinfer.models import get_model

    m = get_model("surface")
    data, constants = m.prepare(_steplaw_sparse())
    kwargs, start = m.model_kwargs(data, constants), m.init_values(data, constants)
    sigma0_only = find_map(m.model, kwargs, start, hold=("sigma0",))
    assert not sigma0_only.converged and float(sigma0_only.params["tau_loss"]) < 1e-4
    both = find_map(m.model, kwargs, start, hold=m.mode_held)
    assert m.mode_held == ("sigma0", "tau_loss") and both.converged


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 7])
def test_a_thin_table_converges_at_the_defaults(seed):
    """The same table at fit's defaults. Held at sigma0 alone NUTS started in the tau_loss spike, every chain at
    the tree-depth cap (1,023 leapfrog steps per draw), R-hat 2.2; from the mode given both, 60-80 steps per draw
    and the issue's criterion (measured: R-hat 1.006). With the loss levels ell sampled centered, one chain in
    some seeds then entered the funnel as tau_loss -> 0 and stayed: at seed 7 646 of its 4,000 draws diverged
    and R-hat was 1.056 (seed 0 failed so after a change of rounding alone). NUTS now samples them through pins
    (`Surface.nuts_kwargs`): seeds 0-9 all converged, R-hat <= 1.010, at most 3 divergent draws."""
    f = scalinfer.fit(_steplaw_sparse(), model="surface", seed=seed)
    assert f.attrs["map_held"] == "sigma0,tau_loss"
    assert "w_ell" in f.posterior and "ell" in f.posterior  # the loss levels through their pins, and their values
    _converged(f)


def test_surface_figures_refuse_a_reduced_design_in_one_line():
    # the figures draw both valleys and both laws; a fixed-batch fit has neither B* nor the batch valley, so
    # they refuse before touching the draws (a stand-in fit: the check reads only the model name and constants)
    from types import SimpleNamespace

    from scalinfer.models.surface.design import DESIGN_CODE
    from scalinfer.plots.surface import law_figure, ppc_figure, valley_figure

    fit = SimpleNamespace(model=SimpleNamespace(name="surface", predicts={"lr_opt": "", "batch_opt": ""}),
                          constants={"design": float(DESIGN_CODE["fixed_batch"])})
    for figure in (valley_figure, ppc_figure, law_figure):
        with pytest.raises(ModelError, match="'fixed_batch'"):
            figure(fit)
