"""``recommend`` (scalinfer.decide) and the one vocabulary of reported quantities (scalinfer.quantities): the
expected-loss LR against a known truth, the valley's asymmetry, the price of a fixed batch, the CLI's JSON, the
old batch names as aliases."""

from __future__ import annotations

import numpy as np
import pytest

import scalinfer
from conftest import run_cli
from scalinfer.models import MODEL_NAMES
from support.designs import surface_design, true_law

TRUTH_COLUMNS = ["true_lr_opt", "true_batch_opt", "true_loss_opt"]
#: an interpolation target: a new model size between the fitted 3e8 and 6e8, at 60 tokens per parameter
N, D = 4.5e8, 2.7e10


@pytest.fixture(scope="module")
def sim(surface_sim_table):
    """(true parameters, the simulated table) of conftest's shared fit: 405 runs in 9 settings, delta_lr = 0.63
    (the LR valley ~3.5x steeper above the optimum)."""
    return surface_sim_table


@pytest.fixture(scope="module")
def surface_fit(surface_sim_fit):
    """conftest's one NUTS fit of `sim` (test_surface's too: made once per run), and its file. Its users are
    marked slow (~130 CPU s for the worker that makes it)."""
    return surface_sim_fit[2:]


def _true_expected_loss_lr(params: dict, N: float, D: float, B: float) -> float:
    """The truth's expected-loss LR at batch B for a new setting at (N, D): the LR minimising E[loss] over the
    new setting's offsets (tau_lr, tau_b), by Monte Carlo (20,000 offsets, a 0.1% grid in LR)."""
    from scalinfer.laws.lr import log_lr_opt_at_batch, valley

    q = params
    eps_lr, eps_b = np.random.default_rng(0).standard_normal((2, 20_000, 1))
    x_star = np.log(true_law(q, "lr_opt", N, D)) + q["tau_lr"] * eps_lr
    z_star = np.log(true_law(q, "batch_opt", N, D)) + q["tau_b"] * eps_b
    log_c = lambda v: (q[f"log_c_{v}"] + q[f"c_{v}_exp_N"] * (np.log(N) - q["ref_logN"])  # noqa: E731
                       + q[f"c_{v}_exp_D"] * (np.log(D) - q["ref_logD"]))
    z = np.log(B)
    ridge = np.asarray(log_lr_opt_at_batch(z, x_star, z_star, q["kappa1"], q["kappa2"]))
    x = np.log(true_law(q, "lr_opt", N, D)) + np.linspace(-0.5, 0.5, 1001)[None, :]
    log_loss = (np.asarray(valley(x - ridge, log_c("lr"), q["delta_lr"], q["p_lr"]))
                + np.asarray(valley(z - z_star, log_c("b"), q["delta_b"], q["p_b"])))
    return float(np.exp(x[0, np.argmin(np.exp(log_loss).mean(0))]))


def _mirrored(fit):
    """The same posterior with the LR valley's asymmetry mirrored (delta_lr -> -delta_lr): steep below."""
    from scalinfer.inference.fit import Fit

    tree = fit.tree.copy(deep=True)
    post = tree["posterior"].to_dataset()
    post["delta_lr"] = -post["delta_lr"]
    tree["posterior"] = post
    return Fit(tree)


@pytest.mark.slow
def test_expected_loss_lr_holds_the_truth(sim, surface_fit):
    """At a fixed seed the 90% intervals of the recommended point hold the truth's: the truth's expected-loss
    LR at the recommended batch (the best LR at that batch moved by a new setting's offsets: ~2% below the
    ridge, as the valley is steeper above) and its B*. The interval is narrow enough to miss a wrong answer
    (hi/lo < 2.5 in LR); benchmarks/calibration_lr.py measures the coverage of lr_opt over seeds."""
    params, _ = sim
    f, _ = surface_fit
    r = f.recommend(N, D)
    lr, b = r.recommended["lr"], r.recommended["batch"]
    truth = _true_expected_loss_lr(params, N, D, b.value)
    assert lr.lo <= truth <= lr.hi, (lr, truth)
    assert lr.lo <= lr.value <= lr.hi and lr.hi / lr.lo < 2.5, lr
    assert b.lo <= true_law(params, "batch_opt", N, D) <= b.hi, (b, true_law(params, "batch_opt", N, D))
    # the expected excess of the recommended point is small and its interval ordered
    e = r.expected_excess
    assert 0 <= e.lo <= e.median <= e.hi and 0 <= e.mean < 0.01, e
    # the near-optimal LR range holds the recommendation, and the largest near-optimal batch is above it
    rng = r.near_optimal["lr"]
    assert rng.lo < lr.value < rng.hi, rng
    assert r.batch_largest_near_optimal.value >= b.value


@pytest.mark.slow
def test_asymmetric_valley_puts_the_expected_loss_lr_on_the_gentle_side(surface_fit):
    """Steep above the optimum (delta_lr > 0 in the truth and the posterior): the expected-loss LR lies below the
    median best LR at its batch (overshooting costs more). Mirror the asymmetry and it lies above."""
    f, _ = surface_fit
    assert np.median(f.draws(["delta_lr"])["delta_lr"]) > 0.2
    for fit, below in ((f, True), (_mirrored(f), False)):
        r = fit.recommend(N, D, batch=2.0 ** 19)
        lr = r.recommended["lr"]
        assert (lr.value < lr.median) == below, (below, lr)
        # by more than the search's resolution (a fine step is ~0.4% of the LR)
        assert abs(np.log(lr.value / lr.median)) > 0.01, lr


@pytest.mark.slow
def test_fixed_batch_penalty_is_zero_at_b_star(surface_fit):
    """One posterior draw: at its own B* the batch costs nothing (to the LR grid's resolution, ~1e-6 relative);
    4x above it costs more than 2x above it, and the recommended LR there is that draw's best LR at the batch."""
    f, _ = surface_fit
    one = type(f)(f.tree.isel(chain=slice(0, 1), draw=slice(0, 1), missing_dims="ignore"))
    b_star = float(one.predict(N=N, D=D)["batch_opt"][0])
    pen = [one.recommend(N, D, batch=k * b_star).batch_penalty for k in (1.0, 2.0, 4.0)]
    assert abs(pen[0].median) < 1e-5, pen[0]
    assert 0 < pen[1].median < pen[2].median, pen
    r = one.recommend(N, D, batch=2 * b_star)
    best = float(one.predict(N=N, D=D, batch=2 * b_star)["lr_opt_at_batch"][0])
    assert r.recommended["lr"].value == pytest.approx(best, rel=0.005)
    assert r.recommended["batch"].value == 2 * b_star


@pytest.mark.slow
def test_constraints_and_a_users_choice(surface_fit):
    f, _ = surface_fit
    free = f.recommend(N, D)
    capped = f.recommend(N, D, max_batch=free.recommended["batch"].value / 4)
    assert capped.recommended["batch"].value <= free.recommended["batch"].value / 4 * (1 + 1e-9)
    assert capped.expected_excess.mean > free.expected_excess.mean
    assert capped.recommended["batch"].hi <= free.recommended["batch"].value / 4 * (1 + 1e-9)
    # the user's own choice: the recommended point is no worse in expectation than 2x its LR
    lr = free.recommended["lr"].value
    mine = f.recommend(N, D, lr=2 * lr).choice
    assert mine["excess"].mean > free.expected_excess.mean and 0 <= mine["prob_near_optimal"] <= 1


@pytest.mark.slow
@pytest.mark.parametrize("kw, what", [({"N": -1.0}, "N"), ({"batch": 1e5, "max_batch": 1e6}, "not both"),
                                      ({"prob": 1.5}, "prob"), ({"lr": float("nan")}, "lr")])
def test_bad_arguments_are_typed_errors(surface_fit, kw, what):
    from scalinfer.errors import ModelError

    f, _ = surface_fit
    args = {"N": N, "D": D, **kw}
    with pytest.raises(ModelError, match=what):
        f.recommend(args.pop("N"), args.pop("D"), **args)


@pytest.mark.slow
def test_cli_recommend_json(surface_fit):
    _, path = surface_fit
    r = run_cli("recommend", path, "--N", N, "--D", D, "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert {"recommended", "median_optimum", "near_optimal", "expected_excess", "batch_penalty",
            "warnings"} <= set(out)
    quantities = [*out["recommended"].values(), *out["median_optimum"].values(), out["expected_excess"],
                  out["batch_penalty"], out["batch_largest_near_optimal"]]
    for q in quantities:
        assert {"median", "lo", "hi", "unit", "definition"} <= set(q) and q["definition"], q
    assert {"value"} <= set(out["recommended"]["lr"]) and {"mean"} <= set(out["expected_excess"])
    assert out["near_optimal"]["excess"] == 0.005 and out["near_optimal"]["prob"] == 0.9
    r = run_cli("recommend", path, "--N", N, "--D", D, "--batch", 2 ** 19, "--lr", 3e-4, "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["recommended"]["batch"]["value"] == 2 ** 19 and out["choice"]["batch"] == 2 ** 19
    assert out["batch_largest_near_optimal"] is None
    r = run_cli("recommend", path, "--N", N, "--D", D)
    assert r.code == 0 and "recommended lr" in r.out and "near-optimal lr" in r.out, r.err
    r = run_cli("recommend", path, "--N", N, "--D", D, "--batch", 1e5, "--max-batch", 1e6)
    assert r.code == 2 and "not allowed with" in r.err


@pytest.mark.slow
def test_predict_names_each_quantity_and_keeps_the_old_batch_name(surface_fit):
    f, path = surface_fit
    p = f.predict(N=N, D=D)
    d = p.to_dict()
    for name in ("lr_opt", "batch_opt", "batch_loss_opt", "loss_opt"):
        assert {"median", "lo", "hi", "unit", "definition"} <= set(d[name]) and d[name]["definition"], name
    assert d["batch_opt"]["alias_of"] == "batch_loss_opt" and d["batch_opt"]["definition"].startswith("alias of")
    assert "alias_of" not in d["batch_loss_opt"] and d["batch_loss_opt"]["unit"] == "tokens/step"
    assert d["batch_opt"]["median"] == d["batch_loss_opt"]["median"]
    assert np.array_equal(p["batch_loss_opt"], p["batch_opt"])
    text = run_cli("predict", path, "--N", N, "--D", D)
    assert text.code == 0 and "batch_loss_opt" in text.out and "alias of batch_loss_opt" in text.out


def test_batch_names_by_model():
    """``batch_opt`` means the loss-optimal batch in surface and classic, the token-optimal one in the batch
    models; ``batch_crit`` is the 2x-overhead point only under OpenAI's model."""
    from scalinfer.predict import Prediction
    from scalinfer.quantities import describe

    assert describe("batch_opt", "classic").alias_of == "batch_loss_opt"
    for model in ("batch-wsd", "batch-floor"):
        assert describe("batch_opt", model).alias_of == "batch_token_opt"
        assert "not" in describe("batch_crit", model).definition
    assert "2x-overhead point: at B_crit" in describe("batch_crit", "batch-openai").definition
    p = Prediction(draws={"batch_opt": np.array([1.0, 2.0, 3.0]), "batch_crit": np.array([2.0, 4.0, 6.0])},
                   units={"batch_opt": "tokens/step", "batch_crit": "tokens/step"}, targets={}, extrapolation={},
                   model="batch-floor")
    d = p.to_dict()
    assert d["batch_opt"]["alias_of"] == "batch_token_opt" and d["batch_token_opt"]["median"] == 2.0
    assert "alias_of" not in d["batch_crit"]


def test_batch_crit_under_the_noise_floor_is_not_the_2x_point():
    """What the registry and laws/batch.py say: under the noise floor, E_min / S_min ~ 2.13 B_opt at alpha = 0.7,
    where the steps and the tokens are both ~1.36x their minima (not 2x)."""
    from scalinfer.laws.batch import batch_opt_floor, tokens_min_floor, tokens_to_target_floor
    from scalinfer.runtime import float64

    @float64
    def ratios(alpha):
        E_min = tokens_min_floor(1.0, 1.0, alpha)  # B_min = S_min = 1: L* - L_inf = c = a
        B_crit = E_min / 1.0
        tokens = tokens_to_target_floor(B_crit, 2.0, 1.0, 1.0, alpha, 1.0)
        return B_crit / batch_opt_floor(1.0, alpha), tokens / B_crit, tokens / E_min  # steps over S_min = 1

    crit_over_opt, steps_ratio, tokens_ratio = (float(v) for v in ratios(0.7))
    assert crit_over_opt == pytest.approx(2.134, abs=0.001)
    assert steps_ratio == pytest.approx(1.358, abs=0.001) and tokens_ratio == pytest.approx(1.358, abs=0.001)


def _prior_draws(model, constants, kwargs, n: int = 2) -> dict[str, np.ndarray]:
    """`n` draws of every latent site from the model's prior (traced eagerly: no compilation, no fit)."""
    from numpyro import handlers

    traces = [handlers.trace(handlers.seed(model.model, i)).get_trace(**kwargs) for i in range(n)]
    return {k: np.stack([np.asarray(t[k]["value"]) for t in traces]) for k, s in traces[0].items()
            if s["type"] in ("sample", "deterministic") and not s.get("is_observed")}


#: each model's targets: every kind of answer its predict gives (C: the compute-optimal allocation)
_TARGETS = {"chinchilla": [{"N": 1e9, "D": 2e10}, {"C": 1e21}],
            "surface": [{"N": 1e9, "D": 2e10, "lr": 1e-3, "batch": 2.0 ** 19}],
            "classic": [{"N": 1e9, "D": 2e10}]}


@pytest.mark.slow
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_models_predict_json_names_unit_and_definition(name):
    """Every quantity in every model's predict JSON has a unit and a definition (scalinfer.quantities), and an
    old batch name says what it is an alias of. Draws from each model's prior (the bootstrap model: its fit),
    so no sampler runs; slow for the eager prior trace and the simulated table (~5-30 s per model at load)."""
    from scalinfer.models import get_model
    from scalinfer.predict import Prediction

    m = get_model(name)
    runs = scalinfer.simulate(name, seed=0)
    if m.default_method != "nuts":
        f = scalinfer.fit(runs, model=name, quiet=True)
        draws, constants = f.draws(), f.constants
    else:
        data, constants = m.prepare(runs)
        kwargs = {k: (None if k in m.observed else v) for k, v in m.model_kwargs(data, constants).items()}
        draws = _prior_draws(m, constants, kwargs)
    for targets in _TARGETS.get(name, [{"N": 1e9, "target_loss": 3.0, "batch": 2.0 ** 19}]):
        out = m.predict(draws, constants, **targets)
        p = Prediction(draws=out, units={k: m.predicts.get(k, "") for k in out}, targets=targets, extrapolation={},
                       model=name)
        d = p.to_dict()
        names = [k for k, v in d.items() if isinstance(v, dict) and "median" in v]
        assert set(out) <= set(names), (name, targets, names)
        for k in names:
            assert d[k]["unit"] and d[k]["definition"], (name, k, d[k])
            if k == "batch_opt":
                assert d[k]["alias_of"] in names and d[k]["definition"].startswith("alias of"), (name, d[k])
        text = p.to_text()
        assert all(d[k]["unit"] in text for k in names), text


@pytest.fixture(scope="module")
def diverging_fit():
    """A Laplace fit of 240 simulated runs whose LR sweeps reach 11x above the optimum: the truth diverges a run
    whose log LR lies more than 1.5 above the best LR at its batch (35 of 240 runs). ~10 s alone (~35 s at load
    14): the Laplace fit of the surface, compiled."""
    import pandas as pd

    from scalinfer.models.surface import MODEL
    from scalinfer.runs.schema import validate

    rows = [(n, n * t, 2.0 ** (a / 2), 2.0 ** b) for n in (2e8, 6e8) for t in (20.0, 80.0)
            for a in range(-26, -11) for b in range(16, 20)]
    df = MODEL.simulate(MODEL.true_params(), pd.DataFrame(rows, columns=["N", "D", "lr", "batch_tokens"]), seed=3)
    assert MODEL.true_params()["diverge_above"] == 1.5 and df["diverged"].sum() > 20
    runs = validate(df.drop(columns=[c for c in df.columns if c.startswith("true_")]), source="simulated",
                    kind="runs")
    return scalinfer.fit(runs, model="surface", method="laplace", size_scatter=False, seed=0, quiet=True)


def test_divergence_model_recovers_a_known_boundary(diverging_fit):
    """The truth's boundary is a hard one at lr / lr*_B = e^1.5 = 4.48; the LR grid steps by sqrt 2 (0.35 in log),
    so the data place it to within that step. The fitted logistic's midpoint interval holds it and is narrower
    than 2x; the risk at the recommended LR is small, and at 8x the best LR (beyond the boundary) large."""
    f = diverging_fit
    lr_opt = float(np.median(f.predict(N=1e9, D=4e10, sensitivity=False)["lr_opt"]))
    r = f.recommend(1e9, 4e10, lr=8 * lr_opt, max_draws=500, n_lr=41, n_batch=11)  # coarse: the risk is smooth
    d = r.divergence
    assert d is not None and d["n_diverged"] > 20
    b = d["boundary"]
    assert b.lo <= np.exp(1.5) <= b.hi and b.hi / b.lo < 2.0, b
    assert d["recommended"].mean < 0.05 and d["choice"].mean > 0.5, d
    out = r.to_dict()["divergence"]
    assert out["boundary"]["unit"] == "ratio to the best LR at the batch" and "mean" in out["choice"]
    assert "divergence risk" in r.to_text()


def test_divergence_model_on_a_fixed_batch_fit():
    """A reduced-design fit (one batch) leaves the batch sites out of its posterior; the divergence model fills
    them in (it raised KeyError before). The committed fit of data/module_lr/'s hidden-matrix LR valley
    (data/module_lr/fit_valleys.py) censors 4 runs: x30 at every size and x9.7 at d64, where every size kept
    x3.1 and two kept x9.7, and the group's best LR is 0.85-0.95x the base. So the even-odds boundary, as a
    ratio to each size's best LR, must lie past ~3 and below ~35, and the risk must grow with the LR
    (c1 > 0). 11 s at load ~10 on 2 cores, nearly all of it reading the fit file; the model itself < 1 s."""
    from conftest import ROOT
    from scalinfer.decide import divergence_model

    c0, c1 = divergence_model(scalinfer.load_fit(ROOT / "data" / "module_lr" / "fits" / "hidden.nc"))
    assert c0.shape == c1.shape == (2000,) and np.all(np.isfinite(c0)) and np.all(np.isfinite(c1))
    assert np.median(c1) > 0
    assert 3.0 < float(np.exp(np.median(-c0 / c1))) < 35.0  # the median of the log: no exp of a draw overflows
