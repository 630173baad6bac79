"""``suggest`` (scalinfer.suggest): the preposterior value of a candidate run, per FLOP.

The statistical checks use a posterior whose uncertainty is known by construction: the mode of a fit to
simulated runs (the truth: `Surface.true_params`), with every parameter at the mode except the LR law's N
slope a_N, which varies over 800 draws (sd 0.15 in scaled units), and no setting scatter (tau = 0). Then log
lr_opt at a target of scaled size n varies as n a_N only: a run at n = 0 (the data's middle size) cannot inform
it, a run at the target's size informs it most, and nothing else in the posterior is uncertain. No NUTS: the
module's one fit is a MAP on the 96-run tiny design (the module's setup: ~15 s alone, ~60 s at load 14, mostly
compilation; each test a few seconds).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import scalinfer
from conftest import run_cli
from scalinfer.suggest import default_candidates, suggest
from support.designs import surface_design

#: the target: 4x the largest simulated size, 40 tokens per parameter
N, D = 2.4e9, 9.6e10
S = 800


@pytest.fixture(scope="module")
def mode_fit(tmp_path_factory):
    from scalinfer.models.surface import MODEL
    from scalinfer.runs.schema import validate

    df = MODEL.simulate(MODEL.true_params(), surface_design("tiny"), seed=3)
    runs = validate(df.drop(columns=[c for c in df.columns if c.startswith("true_")]), source="simulated",
                    kind="runs")
    return scalinfer.fit(runs, model="surface", method="map", size_scatter=False, seed=0, quiet=True)


def _posterior(fit, sd_a_N: float = 0.15, **fixed: float):
    """`fit`'s mode as S draws, a_N ~ N(mode, sd_a_N), tau_* = 0, and any parameter in `fixed` at that value."""
    from scalinfer.inference.fit import Fit

    tree = fit.tree.copy(deep=True)
    post = tree["posterior"].to_dataset().isel(chain=[0], draw=[0] * S)
    post = post.assign_coords(draw=np.arange(S))
    rng = np.random.default_rng(0)
    post["a_N"] = post["a_N"] + sd_a_N * rng.standard_normal((1, S))
    for k in ("tau_lr", "tau_b", "tau_loss"):
        post[k] = post[k] * 0.0
    for k, v in fixed.items():
        post[k] = post[k] * 0.0 + v
    tree["posterior"] = post
    tree.attrs["method"] = "nuts"
    return Fit(tree)


def _candidates(fit, sizes, lr_factor=2.0):
    """One run per size N_c (at 40 tokens per parameter, as the target) at the median B* there, at `lr_factor` x
    the median best LR (above the optimum, where the loss is steep in LR: informative about the optimum's place)."""
    rows = []
    for n_c in sizes:
        d_c = 40 * n_c
        p = fit.predict(N=n_c, D=d_c, sensitivity=False)
        b = float(np.median(p["batch_opt"]))
        lr = float(np.median(fit.predict(N=n_c, D=d_c, batch=b, sensitivity=False)["lr_opt_at_batch"]))
        rows.append((n_c, d_c, lr_factor * lr, b))
    return rows


def test_a_run_that_cannot_inform_the_target_scores_zero_and_one_at_the_target_scores_most(mode_fit):
    """At the data's middle size (scaled n = 0) log lr_opt does not depend on a_N, the only uncertain parameter:
    its variance cut is ~0, within 5% of Var(g) (the Monte Carlo noise of 200 simulated outcomes reweighting
    800 draws, leave-one-out and corrected for the weights' effective size, is ~1-2%). A run at the target's size
    cuts more than one at the smallest fitted size (the information about a_N grows as n^2)."""
    fit = _posterior(mode_fit)
    c = fit.constants
    middle = math.exp(c["m_N"])
    small = 2e8
    s = suggest(fit, N, D, _candidates(fit, [middle, small, N]))
    by_n = {round(r.N): r for r in s.table.itertuples()}
    assert s.variance > 0.01, s.variance  # the target is uncertain: (n_target sd)^2
    assert abs(by_n[round(middle)].variance_reduction) < 0.05 * s.variance, s.table
    at_target, far = by_n[round(N)].variance_reduction, by_n[round(small)].variance_reduction
    assert at_target > far > 0.05 * s.variance, s.table
    assert by_n[round(N)].setting == "target" and by_n[round(N)].width_after < s.width_now
    # ranked by variance cut per FLOP (6 N D)
    assert np.all(np.diff(s.table["score"].to_numpy()) <= 0)
    assert np.allclose(s.table["flops"], 6 * s.table["N"] * s.table["D"])


def test_a_run_drowned_in_noise_scores_zero(mode_fit):
    """With a noise scale of 10 in log loss (sigma0; the losses differ by < 1 across the grid) no outcome moves
    the posterior: every candidate's cut is within 5% of Var(g) of 0, even a duplicate of a fitted run."""
    fit = _posterior(mode_fit, sigma0=10.0)
    first = fit.runs.iloc[0]
    cands = _candidates(fit, [2e8, N]) + [(first["N"], first["D"], first["lr"], first["batch_tokens"])]
    s = suggest(fit, N, D, cands)
    assert np.all(np.abs(s.table["variance_reduction"]) < 0.05 * s.variance), s.table
    assert "fitted" in set(s.table["setting"])


def test_picks_are_chosen_given_the_ones_before(mode_fit):
    """Two copies of the run at the target's size and one at the smallest fitted size, all three picked in turn:
    the first pick is the best alone (per FLOP: the small run), with its cut given no picks equal to its cut
    alone; the copy picked last, given the other copy, cuts much less than alone: the same look at a_N bought
    twice. (For a Gaussian a second equal look cuts 1 / (1 + 2a) of the first's, a = the look's information x
    the variance, so less than the first whatever a. Measured: each run alone cuts ~92% of Var(g) = 0.28; given
    the small run the first copy cuts 0.019 and the last 0.001. The bound 0.7 is far from both and from the ~1-2%
    Monte Carlo noise.) With the default picks = 1 the table is the ranking alone, without the two columns."""
    fit = _posterior(mode_fit)
    copy = _candidates(fit, [N])
    cands = copy + copy + _candidates(fit, [2e8])
    alone = suggest(fit, N, D, cands)
    assert "pick" not in alone.table
    s = suggest(fit, N, D, cands, picks=3)
    t = s.table
    assert list(t["pick"]) == [1, 2, 3]
    assert t.loc[0, "N"] == alone.table.loc[0, "N"] == 2e8
    assert t.loc[0, "variance_reduction_given_picks"] == t.loc[0, "variance_reduction"]
    assert np.allclose(np.sort(t["variance_reduction"]), np.sort(alone.table["variance_reduction"]))
    last_copy = t.iloc[2]
    assert last_copy.N == N and last_copy.variance_reduction_given_picks < 0.7 * last_copy.variance_reduction, t
    # two believed picks that each cut ~92% of Var(g) leave few effective draws: the answer says so
    assert any("effective sample size" in w and "later picks" in w for w in s.warnings), s.warnings
    with pytest.raises(scalinfer.errors.ModelError, match="only 3 candidates"):
        suggest(fit, N, D, cands, picks=4)


def test_default_candidates_and_the_cli(mode_fit, tmp_path):
    """~10 s alone (~40 s at load 14): writing and reading the fit file."""
    fit = _posterior(mode_fit)
    path = fit.save(tmp_path / "fit.nc")
    cands = tmp_path / "c.csv"
    cands.write_text("N,D,lr,batch\n" + "\n".join(",".join(map(str, r)) for r in _candidates(fit, [2e8, N])))
    r = run_cli("suggest", path, "--N", N, "--D", D, "--candidates", cands, "--json", "--out", tmp_path / "r.csv")
    assert r.code == 0, r.err
    out = r.json()
    assert out["quantity"] == "lr_opt" and len(out["candidates"]) == 2
    assert out["candidates"][0]["score"] >= out["candidates"][1]["score"]
    assert (tmp_path / "r.csv").read_text().startswith("N,D,lr,batch,flops")
    text = suggest(fit, N, D, _candidates(fit, [2e8, N]), n_outcomes=20).to_text(1)
    assert "rank" in text and sum(not ln.startswith("warning") for ln in text.splitlines()) == 3, text
    # the default grid: 5 LRs x 3 batches at each fitted setting and at one size step beyond
    grid = default_candidates(fit, N, D)
    settings = fit.runs[["N", "D"]].drop_duplicates()
    assert len(grid) == 15 * (len(settings) + 1) and grid["N"].max() == 2 * settings["N"].max()
    bad = tmp_path / "bad.csv"
    bad.write_text("N,D,lr\n1e8,2e9,1e-3\n")
    r = run_cli("suggest", path, "--N", N, "--D", D, "--candidates", bad)  # refused before the fit is read
    assert r.code == 2 and "lack column(s) batch" in r.err


def test_bad_inputs_are_typed_errors(mode_fit):
    from scalinfer.errors import ModelError

    with pytest.raises(ModelError, match="has 1"):  # a point estimate has no posterior variance to cut
        suggest(mode_fit, N, D)
    fit = _posterior(mode_fit)
    with pytest.raises(ModelError, match="row 0 has lr"):
        suggest(fit, N, D, [(1e8, 2e9, -1.0, 2**18)])
    with pytest.raises(ModelError, match="target must be"):
        suggest(fit, N, D, target="loss")


def test_a_run_with_decay_branches_is_valued_for_all_its_records_and_priced_with_them(mode_fit, tmp_path):
    """With branches = K each candidate is a WSD run to D that also reports at D/2, ..., D/2^K: its FLOPs are
    6 N D (1 + 0.2 (1 - 2^-K)) (plan's decay fraction 0.2: branch k decays over a fifth of its D 2^-k tokens),
    and its outcomes are simulated and weighed together. Here a_N is the only uncertain parameter and every
    record of a run shares its N, so a run with 3 branches is 4 looks at a_N where a run alone is 1: for a
    Gaussian the variance left falls from 1/(1 + a) to 1/(1 + 4a) of Var(g), a = one look's information x the
    variance. Measured: the small run alone leaves 7.8% of Var(g) (a ~ 12), with 3 branches 2.1% (theory 2.1%);
    the bound 0.5 on their ratio is far from the measured 0.27 and from the ~1-2% Monte Carlo noise. At the
    data's middle size branches cannot help (a_N does not act there), and in noise they teach nothing."""
    from scalinfer.errors import ModelError
    from scalinfer.suggest import DECAY_FRACTION
    from scalinfer.sweep.plan import PlanSpec

    assert DECAY_FRACTION == PlanSpec.__dataclass_fields__["decay_fraction"].default
    fit = _posterior(mode_fit)
    middle = math.exp(fit.constants["m_N"])
    cands = _candidates(fit, [middle, 2e8])
    alone, branched = suggest(fit, N, D, cands), suggest(fit, N, D, cands, branches=3)
    assert "branches" not in alone.table and set(branched.table["branches"]) == {3}
    assert np.allclose(branched.table["flops"], 6 * branched.table["N"] * branched.table["D"] * 1.175)
    left = {K: {round(r.N): s.variance - r.variance_reduction for r in s.table.itertuples()}
            for K, s in ((0, alone), (3, branched))}
    assert left[3][round(2e8)] < 0.5 * left[0][round(2e8)], left
    assert abs(left[3][round(middle)] - branched.variance) < 0.05 * branched.variance, branched.table
    drowned = suggest(_posterior(mode_fit, sigma0=10.0), N, D, cands, branches=3)
    assert np.all(np.abs(drowned.table["variance_reduction"]) < 0.05 * drowned.variance), drowned.table
    for bad in ({"branches": -1}, {"branches": 1.5}, {"branches": 11}, {"branches": 2, "decay_fraction": 1.0}):
        with pytest.raises(ModelError, match="branches must be|decay_fraction must be"):
            suggest(fit, N, D, cands, **bad)
    path = fit.save(tmp_path / "fit.nc")
    r = run_cli("suggest", path, "--N", N, "--D", D, "--branches", "2", "--json", "--top", "1")
    assert r.code == 0, r.err
    assert r.json()["candidates"][0]["branches"] == 2
    r = run_cli("suggest", path, "--N", N, "--D", D, "--branches", "11")
    assert r.code == 2 and "branches" in r.err and "Traceback" not in r.err
