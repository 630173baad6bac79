"""Fits that go wrong are reported, never hidden: divergences, R-hat, a posterior piled against a bound; and the
warnings an answer carries (issue #21 item 4, `scalinfer.inference.checks`), bad targets (issue #25), ``--strict``.

We take a healthy small fit and damage copies of its posterior in known ways; each damage must show up in
`Fit.warnings()`, in `scalinfer summary --json` and in `scalinfer predict --json` (the fit's warnings reach every
answer). The answer's own checks are tested on hand-made constants and draws (`answer_warnings` is a pure
function of them, so each test states exactly where the line is), then through a surface MAP fit of a small
simulated Step-Law-shaped grid (a point estimate is enough to place an optimum) and the CLI.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import scalinfer
from conftest import run_cli
from scalinfer.errors import ModelError
from scalinfer.inference.checks import EXTRAPOLATION_MAX, answer_warnings, check_targets
from scalinfer.models.base import tried_at, tried_ranges


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    runs = scalinfer.simulate("chinchilla", seed=6)
    # a careful fit (warmup 500, target acceptance 0.95): at 2 x (300 + 400) and the model's 0.9 this seed's
    # chains diverged twice once their start came from another compiled program (another path through the
    # floating point, the same target), and the baseline must not
    f = scalinfer.fit(runs, model="chinchilla", chains=2, warmup=500, samples=500, seed=6, target_accept=0.95)
    # short chains may already be flagged for low ESS; each test checks that its own damage shows up where it
    # was absent before (no divergences, nothing piled against a bound, no R-hat flag on alpha)
    assert f.divergences == 0 and not any("piles" in w or ("R-hat" in w and "alpha:" in w)
                                          for w in f.warnings()), f.warnings()
    return f


def _copy(fit):
    return scalinfer.Fit(fit.tree.copy(deep=True))


def _both_outputs(fit, tmp_path):
    path = fit.save(tmp_path / "f.nc")
    s = run_cli("summary", path, "--json").json()["warnings"]
    p = run_cli("predict", path, "--N", "1e10", "--D", "1e11", "--json").json()["warnings"]
    return s, p


def test_divergences_reported(healthy, tmp_path):
    f = _copy(healthy)
    f.tree["sample_stats"]["diverging"].values[0, :7] = True
    assert any("7 divergent transitions" in w for w in f.warnings())
    s, p = _both_outputs(f, tmp_path)
    assert any("divergent" in w for w in s) and any("divergent" in w for w in p)


def test_chains_that_disagree_raise_rhat(healthy, tmp_path):
    f = _copy(healthy)
    alpha = f.tree["posterior"]["alpha"].values
    alpha[0] += 5 * alpha.std()  # chain 0 stuck in another mode
    ws = f.warnings()
    assert any("R-hat above 1.01" in w and "worst alpha:" in w for w in ws), ws
    s, p = _both_outputs(f, tmp_path)
    assert any("R-hat" in w for w in s) and any("R-hat" in w for w in p)


def test_posterior_piled_against_bound(healthy, tmp_path):
    f = _copy(healthy)
    sigma = f.tree["posterior"]["sigma"].values
    v = np.abs(np.random.default_rng(0).normal(0, 0.01, size=sigma.shape))
    v.ravel()[: v.size // 3] = 1e-9  # a third of the draws stuck at the edge of the support
    sigma[...] = v
    ws = f.warnings()
    assert any("sigma piles against its lower bound 0" in w for w in ws), ws
    s, _ = _both_outputs(f, tmp_path)
    assert any("piles against" in w for w in s)


def test_healthy_half_normal_not_flagged(healthy):
    # the detector must not fire on an ordinary posterior near zero: |N(0, s)| puts ~4% of draws within 2% of
    # its 99th percentile, below the 10% threshold
    f = _copy(healthy)
    sigma = f.tree["posterior"]["sigma"].values
    sigma[...] = np.abs(np.random.default_rng(1).normal(0, 0.01, size=sigma.shape))
    assert not any("piles against" in w for w in f.warnings())


# ==== the answer's warnings ==================================================================================
SIZES = (1e8, 3e8, 1e9)
LRS = (1e-3, 2e-3, 4e-3, 8e-3)
BATCHES = (2.0 ** 17, 2.0 ** 19, 2.0 ** 21)


def _constants(seq_len: float | None = 2048.0, batches=BATCHES) -> dict[str, float]:
    rows = [(n, 20 * n, lr, b) for n in SIZES for lr in LRS for b in batches]
    df = pd.DataFrame(rows, columns=["N", "D", "lr", "batch_tokens"])
    if seq_len:
        df["seq_len"] = seq_len
    return {"max_N": max(SIZES), "min_N": min(SIZES), "max_D": 20 * max(SIZES), **tried_ranges(df)}


def _draws(lr=3e-3, batch=2.0 ** 19, spread=1.0, n=400) -> dict[str, np.ndarray]:
    """Log-normal draws around the medians; `spread` is the 90% interval's half-width as a factor."""
    z = np.random.default_rng(0).normal(size=n)
    z = z / np.quantile(np.abs(z), 0.9)  # the 90% interval is exactly [median / spread, median * spread]
    z = z - np.median(z)
    return {"lr_opt": lr * spread ** z, "batch_opt": batch * spread ** z, "loss_opt": np.full(n, 2.5)}


def _only(warnings: list[str], phrase: str) -> list[str]:
    return [w for w in warnings if phrase in w]


# ---- what the runs tried --------------------------------------------------------------------------------------
def test_tried_ranges_and_nearest_size():
    c = _constants()
    t = tried_at(c, 2.5e8)  # nearer 3e8 than 1e8 in log N
    assert t["N"] == 3e8
    assert t["lr"] == pytest.approx((1e-3, np.sqrt(2) * 1e-3, np.sqrt(32) * 1e-3, 8e-3))
    assert t["batch"][0] == 2.0 ** 17 and t["batch"][3] == 2.0 ** 21
    assert c["seq_len"] == 2048
    assert tried_at({"max_N": 1e9}, 1e9) is None  # a fit written before the ranges were recorded


# ---- one test per warning -------------------------------------------------------------------------------------
def test_clean_answer_has_no_warning():
    assert answer_warnings(_constants(), _draws(spread=1.2), {"N": 3e8, "D": 6e9}) == []


@pytest.mark.parametrize("target", ["N", "D"])
def test_beyond_10x_the_data(target):
    c = _constants()
    t = {"N": 1e9, "D": 2e10}
    at_limit = answer_warnings(c, _draws(), {**t, target: EXTRAPOLATION_MAX * c[f"max_{target}"]})
    assert not _only(at_limit, "in the data")  # 10x is the limit, not beyond it
    w = _only(answer_warnings(c, _draws(), {**t, target: 11 * c[f"max_{target}"]}), "in the data")
    assert len(w) == 1 and w[0].startswith(f"{target} = ") and "11x" in w[0]


def test_below_the_smallest_size():
    c = _constants()
    assert not _only(answer_warnings(c, _draws(), {"N": 0.999 * min(SIZES), "D": 2e9}), "below the smallest")
    w = _only(answer_warnings(c, _draws(), {"N": 0.5 * min(SIZES), "D": 1e9}), "below the smallest")
    assert len(w) == 1 and "extrapolation too" in w[0]


def test_optimum_outside_the_lrs_tried():
    w = _only(answer_warnings(_constants(), _draws(lr=5e-4), {"N": 1e9, "D": 2e10}), "lr_opt")
    assert len(w) == 1 and "below every LR tried" in w[0] and "N = 1e+09" in w[0]
    w = _only(answer_warnings(_constants(), _draws(lr=2e-2), {"N": 1e9, "D": 2e10}), "lr_opt")
    assert len(w) == 1 and "above every LR tried" in w[0]


def test_optimum_at_the_edge_of_the_batches_tried():
    # 2^17.4 is nearer 2^17 (the smallest batch tried) than 2^19: the edge; 2^18.1 is nearer 2^19: inside
    w = _only(answer_warnings(_constants(), _draws(batch=2.0 ** 17.4), {"N": 1e9, "D": 2e10}), "batch_opt")
    assert len(w) == 1 and "at the edge of the batches tried" in w[0] and "smallest batch" in w[0]
    assert not _only(answer_warnings(_constants(), _draws(batch=2.0 ** 18.1), {"N": 1e9, "D": 2e10}), "batch_opt")


def test_interval_beyond_the_lrs_tried():
    w = _only(answer_warnings(_constants(), _draws(lr=3e-3, spread=4.0), {"N": 1e9, "D": 2e10}), "lr_opt")
    assert len(w) == 1 and "90% interval" in w[0] and "reaches beyond the LRs tried" in w[0]


def test_one_batch_tried_brackets_nothing():
    c = _constants(batches=(2.0 ** 20,))
    w = _only(answer_warnings(c, _draws(batch=2.0 ** 20), {"N": 1e9, "D": 2e10}), "batch_opt")
    assert len(w) == 1 and "only one batch" in w[0]


def test_batch_below_one_sequence():
    w = _only(answer_warnings(_constants(seq_len=128), _draws(batch=70.0), {"N": 1e9, "D": 2e10}), "sequence")
    assert len(w) == 1 and "70 tokens is less than one sequence (128 tokens)" in w[0]
    # the table gives no sequence length: nothing is said about sequences
    assert not _only(answer_warnings(_constants(seq_len=None), _draws(batch=70.0), {"N": 1e9, "D": 2e10}),
                     "sequence")


def test_absurd_lr_and_batch_above_D():
    w = answer_warnings(_constants(), _draws(lr=758.0, batch=2.0 ** 19), {"N": 1e9, "D": 1e5})
    assert len(_only(w, "a peak LR above 1")) == 1
    assert len(_only(w, "exceeds the whole run (D = 1e+05 tokens)")) == 1


def test_a_fit_without_the_ranges_skips_the_range_check():
    c = {k: v for k, v in _constants().items() if not k.startswith("tried_")}
    assert answer_warnings(c, _draws(lr=5e-4), {"N": 1e9, "D": 2e10}) == []


def test_a_grid_gets_one_warning_per_kind_with_a_count():
    N = np.array([1e9, 2e10, 3e10])
    draws = {k: np.broadcast_to(v[:, None], (v.size, 3)) for k, v in _draws().items()}
    w = _only(answer_warnings(_constants(), draws, {"N": N, "D": 2e10}), "the largest N in the data")
    assert len(w) == 1 and w[0].startswith("N = 2e+10") and "(and 1 other target of the grid)" in w[0]


# ---- targets no model can take: errors, not warnings -------------------------------------------------------
@pytest.mark.parametrize("bad", [0.0, -7e9, float("nan"), float("inf"), [1e9, -1.0]])
def test_bad_targets_are_errors(bad):
    with pytest.raises(ModelError, match="target N must be a positive finite number"):
        check_targets({"N": bad, "D": 1e9}, ("N", "D"))


# ---- through real fits ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def surface_map(tmp_path_factory):
    """A surface MAP fit of a simulated grid: 3 sizes x 1 D x 7 LRs x 5 batches, sequences of 2048 tokens."""
    import scalinfer
    from scalinfer.models.surface import MODEL
    from scalinfer.runs.schema import validate

    rows = [(n, 50 * n, lr, b) for n in (2.1e8, 3.4e8, 5.4e8) for lr in 2.0 ** np.arange(-12, -5)
            for b in 2.0 ** np.arange(17, 22)]
    design = pd.DataFrame(rows, columns=["N", "D", "lr", "batch_tokens"])
    df = MODEL.simulate(MODEL.true_params(), design, seed=0).assign(seq_len=2048)
    runs = validate(df[["N", "D", "lr", "batch_tokens", "seq_len", "loss", "diverged"]], source="sim.csv")
    f = scalinfer.fit(runs, model="surface", method="map", size_scatter=False)
    path = tmp_path_factory.mktemp("warnings") / "surface_map.nc"
    f.save(path)
    return f, path


def test_predict_carries_the_answer_warnings(surface_map):
    f, _ = surface_map
    inside = f.predict(N=3.4e8, D=1.7e10, sensitivity=False)
    assert not [w for w in inside.warnings if "tried" in w or "in the data" in w]
    far = f.predict(N=20 * 5.4e8, D=1.7e10, sensitivity=False)
    assert _only(list(far.warnings), "the largest N in the data")
    assert far.to_dict()["warnings"] == list(far.warnings)  # in the JSON answer too
    with pytest.raises(ModelError, match="target D must be a positive finite number, got nan"):
        f.predict(N=1e9, D=float("nan"))


def test_predict_strict_exits_3_on_a_warned_answer(surface_map):
    _, path = surface_map
    r = run_cli("predict", path, "--N", 1e10, "--D", 1.7e10, "--json", "--strict")
    assert r.code == 3, r.err
    out = json.loads(r.out)  # the answer is printed before the exit code says it is doubtful
    assert _only(out["warnings"], "the largest N in the data") and "lr_opt" in out
    assert run_cli("predict", path, "--N", 1e10, "--D", 1.7e10, "--json").code == 0  # warnings alone: 0


@pytest.mark.parametrize("value", ["-7e9", "0", "nan", "inf", "-inf"])
def test_cli_bad_numbers_are_one_line_errors(surface_map, value):
    _, path = surface_map
    r = run_cli("predict", path, "--N", value, "--D", 1e9)
    assert r.code == 2
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "--N" in lines[0] and "positive finite" in lines[0], r.err
    assert "expected one argument" not in r.err




def _shuffled(fit):
    """The same posterior with its draws in a random order, the same order in every group: independent draws of
    it, so that R-hat and ESS are those of independent draws (what a long, well-mixed run gives)."""
    f = _copy(fit)
    post = f.tree["posterior"]
    n = post.sizes["chain"] * post.sizes["draw"]
    perm = np.random.default_rng(0).permutation(n)
    for g in ("posterior", "sample_stats", "log_likelihood", "log_prior"):
        if g in f.tree.children:
            for v in f.tree[g].data_vars.values():
                v.values[...] = v.values.reshape(n, *v.shape[2:])[perm].reshape(v.shape)
    return f


def test_predict_strict_exits_0_on_a_clean_answer(healthy, tmp_path):
    f = _shuffled(healthy)
    assert f.warnings() == [], f.warnings()  # the premise: a fit with nothing to say
    path = f.save(tmp_path / "clean.nc")
    r = run_cli("predict", path, "--N", 1e9, "--D", 2e10, "--strict")
    assert r.code == 0 and "warning" not in r.out, r.out + r.err
    r = run_cli("predict", path, "--N", 1e12, "--D", 2e10, "--strict")  # 200x the largest size: warned
    assert r.code == 3 and "warning: N = 1e+12 is 200x the largest N in the data" in r.out, r.out
    assert run_cli("summary", path, "--strict").code == 0


def test_quantities_of_different_shapes():
    # a multi-batch answer: lr_opt and batch_opt at the target, lr_opt_at_batch per batch (the second above 1)
    d = _draws(batch=2.0 ** 30)
    d["lr_opt_at_batch"] = np.stack([d["lr_opt"], 1e3 * d["lr_opt"]], axis=1)
    w = answer_warnings(_constants(), d, {"N": 1e9, "D": 1e8, "batch": [2.0 ** 19, 2.0 ** 20]})
    assert _only(w, "a peak LR above 1") == _only(w, "lr_opt_at_batch = 3: ")  # the second batch's, only it
    assert len(_only(w, "a peak LR above 1")) == 1
    assert _only(w, "exceeds the whole run (D = 1e+08 tokens) (and 1 other target of the grid)")
