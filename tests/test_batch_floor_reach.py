"""Where the batch-floor posterior is finite: `predict` and the ``batch-vs-N`` figure say the same (#23 item 3).

A draw whose floor L_inf(N) is at or above the target reaches it with no batch: its batch sizes are +inf
(`BatchFloor.out_of_reach`). `predict` counts such draws as +inf in its quantiles and names them in a warning
(`BatchFloor.predict_warnings`); the figure draws `predict`'s quantiles and says where they stop being finite.

No fit: hand-made posterior draws whose floors are known, so the share of draws out of reach at each N is known
exactly (a fit's, through `Fit.predict` and the CLI, is checked on test_batch_fits.py's shared floor fit).
"""

from __future__ import annotations

import math
import types

import numpy as np
import pandas as pd
import pytest

from scalinfer.models.batch import FLOOR
from scalinfer.plots.batch import plot_vs_N
from scalinfer.predict import interval
from scalinfer.runs.schema import validate

N_DRAWS = 40


@pytest.fixture(scope="module")
def floor_posterior():
    """(stand-in fit, floors): batch-floor's constants for a 2-size table (targets 3.3 at N = 1e8, 3.0 at 4e8,
    so the figure's L*(N) = 3.3 (N / 1e8)^-0.0688) and 40 draws alike but for their floor L_inf, 1.6 to 3.2
    nats at every N (no slope in N, no scatter between sizes): draw i cannot reach L* wherever
    L*(N) <= its floor."""
    rows = [{"N": N, "target_loss": L, "batch_tokens": B, "steps_to_target": S * (N / 1e8) ** 0.3}
            for N, L in ((1e8, 3.3), (4e8, 3.0))
            for B, S in ((32768, 40000), (131072, 11000), (524288, 4000), (2097152, 2500))]
    runs = validate(pd.DataFrame(rows), "hand-made table", "steps_to_target", row_offset=None)
    data, c = FLOOR.prepare(runs)
    n, alpha = N_DRAWS, 0.7
    floors = np.linspace(1.6, 3.2, n)
    zero, col = np.zeros(n), lambda v: np.tile(np.asarray(v, float)[:, None], (1, 2))  # noqa: E731
    draws = {"alpha": np.full(n, alpha), "l0": np.log(floors), "l_N": zero, "tau_l": np.full(n, 1e-12),
             "a0": np.full(n, math.log(100.0) - alpha * c["m_S"]), "a_N": zero, "tau_a": np.full(n, 1e-12),
             "c0": np.full(n, math.log(4000.0) - c["m_B"]), "c_N": zero, "tau_c": np.full(n, 1e-12),
             "log_L_inf": col(np.log(floors)), "log_a": col(np.full(n, math.log(100.0) - alpha * c["m_S"])),
             "log_c": col(np.full(n, math.log(4000.0) - c["m_B"]))}
    fit = types.SimpleNamespace(model=FLOOR, constants=c, draws=lambda: draws)  # what the figure reads of a Fit
    return fit, floors


def test_out_of_reach_is_the_draws_whose_floor_is_at_or_above_the_target(floor_posterior):
    fit, floors = floor_posterior
    N = np.array([1e8, 1e9, 1e10, 1e11])
    L = 3.3 * (N / 1e8) ** (math.log(3.0 / 3.3) / math.log(4.0))
    answer = FLOOR.predict(fit.draws(), fit.constants, N=N, target_loss=L)
    got = FLOOR.out_of_reach(answer)
    np.testing.assert_array_equal(got, floors[:, None] >= L[None, :])
    for q in ("batch_min", "batch_opt", "batch_crit"):  # every batch size is infinite exactly there
        np.testing.assert_array_equal(~np.isfinite(answer[q]), got)
    (said,) = FLOOR.predict_warnings(fit.constants, answer=answer, N=N, target_loss=L)
    assert not got[:, 0].any() and got[:, 1:].any(axis=0).all()  # the first target with some: N = 1e9
    assert f"target loss {L[1]:.4g} at N = 1e+09 (and 2 other targets of the grid)" in said
    assert f"in {int(got[:, 1].sum())} of {N_DRAWS} draws" in said
    assert FLOOR.predict_warnings(fit.constants, answer=FLOOR.predict(fit.draws(), fit.constants, N=N, target_loss=4.0),
                                  N=N, target_loss=4.0) == []  # above every floor: nothing to say
    assert FLOOR.predict_warnings(fit.constants, N=N, target_loss=L) == []  # no answer given


def test_batch_vs_N_draws_predicts_intervals_and_says_where_they_stop_being_finite(floor_posterior):
    """The figure's medians are `predict`'s (a median infinite: no line), and its note names the first N where
    some draws are out of reach, where the 90% band opens above and where the median is infinite: on the
    hand-made floors these are known (floors 1.6-3.2, L*(N) falls from 3.38 to 2.05 over the grid)."""
    fit, floors = floor_posterior
    fig = plot_vs_N(fit, N_max=1e11, n_points=15)
    ax_L, ax = fig.axes[:2]
    grid, L = (np.asarray(v, float) for v in ax_L.lines[0].get_data())  # the figure's N grid and L*(N)
    answer = FLOOR.predict(fit.draws(), fit.constants, N=grid, target_loss=L)
    share = np.mean(floors[:, None] >= L[None, :], axis=0)
    # the cases the note is about all occur on this grid: none out of reach at first, then more than the
    # upper tail, then more than half
    assert share[0] == 0 and (share > 0.05).any() and share[-1] >= 0.5
    lines = {line.get_label().split(" ")[0]: line for line in ax.lines}
    with np.errstate(invalid="ignore"):
        for q, name in (("batch_min", "B_min"), ("batch_opt", "B_opt"), ("batch_crit", "B_crit")):
            med = interval(answer[q], 0.9)[0]
            y = lines[name].get_ydata()
            assert np.isfinite(med[0]) and not np.isfinite(med[-1])
            np.testing.assert_allclose(y[np.isfinite(med)], med[np.isfinite(med)], rtol=1e-12)
            assert np.all(np.isnan(y[~np.isfinite(med)]))
        med, _, hi = interval(answer["batch_min"], 0.9)
    note = ax.texts[-1].get_text()
    first = lambda mask: grid[np.flatnonzero(mask)[0]]  # noqa: E731
    assert f"no batch reaches L*(N) in some draws from N = {first(share > 0):.3g}" in note
    assert f"90% band open above from N = {first(~np.isfinite(hi)):.3g}" in note
    assert f"median infinite from N = {first(~np.isfinite(med)):.3g}" in note


def test_interval_of_draws_partly_out_of_reach_is_infinite_not_nan():
    # NumPy interpolates a quantile between a finite and an infinite draw as inf - inf = NaN: predict then said
    # "batch_opt = nan tokens" where most draws were out of reach; the exact quantiles are +-inf (or the finite
    # neighbour where the quantile falls on it)
    med, lo, hi = interval(np.r_[np.arange(1.0, 40.0), np.full(61, np.inf)])
    assert med == math.inf and hi == math.inf and lo == pytest.approx(np.quantile(np.arange(1.0, 40.0), 0.05 * 99 / 38))
    med, lo, hi = interval(np.r_[np.full(10, -np.inf), np.arange(1.0, 91.0)])
    assert lo == -math.inf and np.isfinite(med) and np.isfinite(hi)
    assert all(np.isnan(v) for v in interval(np.r_[np.arange(1.0, 100.0), np.nan]))  # a NaN draw stays NaN
    assert interval(np.arange(1.0, 101.0)) == pytest.approx((50.5, 5.95, 95.05))  # finite draws: as before


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 999, 4000])
def test_interval_of_finite_draws_is_numpys_linear_quantile_to_the_bit(n):
    # interval sorts once instead of calling np.quantile (three times faster on a grid of targets): on finite
    # draws it must give NumPy's default ("linear") quantiles exactly, over any axis, at any credible mass
    x = np.random.default_rng(n).lognormal(size=(n, 3, 4))
    for ci in (0.5, 0.8, 0.9, 0.95, 0.99):
        for axis in (0, 1):
            y = np.moveaxis(x, 0, axis)
            want = np.quantile(y, [0.5, (1 - ci) / 2, (1 + ci) / 2], axis=axis)
            for got, w in zip(interval(y, ci, axis=axis), want):
                np.testing.assert_array_equal(got, w)


def test_text_answer_says_inf_where_the_json_says_null():
    # JSON has no infinity (null there); the text answer names it, not "nan" (a NaN draw still reads nan)
    from scalinfer.predict import Prediction

    p = Prediction(draws={"batch_min": np.r_[np.arange(1.0, 40.0), np.full(61, np.inf)]}, units={"batch_min": "tokens"},
                   targets={"N": 1e9}, extrapolation={}, model="batch-floor")
    assert "batch_min: inf  [5.95, inf]" in p.to_text()
    assert p.to_dict()["batch_min"]["median"] is None and p.to_dict()["batch_min"]["hi"] is None
