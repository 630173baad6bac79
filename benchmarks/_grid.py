"""Held-out LR (x batch) grids as the benchmarks score them: the grid's cells and best cell, the regret of a
proposed point, and the posterior predictive distribution of which cell wins.

A *cell* is one (peak LR, batch) point of a sweep at one setting (N, D[, group]). Repeated runs of a cell
(the same LR to 3 significant digits and the same batch) are one cell whose loss is their mean and whose LR
is their geometric mean; a cell with one run is that run. The grid's *best cell* is the argmin of the
cells' losses: a noisy argmin over a coarse grid, not the continuous optimum the laws describe.

Used by ``benchmarks/steplaw_lr.py`` and ``benchmarks/backtest.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["cells", "grid_truth_at", "regret", "nearest_cell", "winner_draws", "grid_winner"]


def cells(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell of a sweep's runs (finite losses): ``lr`` (geometric mean of its runs' LRs),
    ``batch_tokens``, ``loss`` (mean of its runs' losses), ``n_runs``; in the runs' order of first
    appearance."""
    g = runs[np.isfinite(runs["loss"])]
    key = g["lr"].map(lambda v: float(f"{v:.3g}"))
    grouped = g.assign(_lr_key=key, _log_lr=np.log(g["lr"])).groupby(["_lr_key", "batch_tokens"], sort=False)
    out = grouped.agg(lr=("lr", "first"), log_lr=("_log_lr", "mean"), loss=("loss", "mean"),
                      n_runs=("loss", "size")).reset_index()
    lr = np.where(out["n_runs"] == 1, out["lr"], np.exp(out["log_lr"]))  # a single run's LR exactly
    return pd.DataFrame({"lr": lr, "batch_tokens": out["batch_tokens"].astype(float),
                         "loss": out["loss"], "n_runs": out["n_runs"]})


def grid_truth_at(full: pd.DataFrame, N: float, D: float, group: str | None = None) -> dict:
    """The grid at (N, D) (and ``group``, where one (N, D) holds several sweeps): its cells
    (``"grid"``, see `cells`) and its best cell (``best_lr``, ``best_batch``, ``best_loss``)."""
    g = full[(full["N"] == N) & (full["D"] == D)]
    if group is not None:
        g = g[g["group"] == group]
    c = cells(g)
    best = c.loc[c["loss"].idxmin()]
    return {"grid": c, "best_lr": float(best["lr"]), "best_batch": float(best["batch_tokens"]),
            "best_loss": float(best["loss"])}


def nearest_cell(grid: pd.DataFrame, lr: float, batch: float) -> int:
    """Index label of the cell nearest in (log lr, log batch) to the point."""
    d = (np.log(grid["lr"]) - np.log(lr)) ** 2 + (np.log(grid["batch_tokens"]) - np.log(batch)) ** 2
    return d.idxmin()


def regret(truth: dict, lr: float, batch: float) -> tuple[float, float, float]:
    """(regret %, lr, batch) of the grid cell nearest in (log lr, log batch) to the proposal: 100 (its loss /
    the best cell's loss - 1)."""
    near = truth["grid"].loc[nearest_cell(truth["grid"], lr, batch)]
    return 100.0 * (float(near["loss"]) / truth["best_loss"] - 1.0), float(near["lr"]), float(near["batch_tokens"])


def winner_draws(fit, prediction, seed: int = 0) -> np.ndarray:
    """Which cell wins, per posterior draw of a ``surface`` fit: position of the argmin of the grid's
    simulated log losses, from ``prediction = fit.predict(N=N, D=D, lr=cell LRs, batch=cell batches)``.

    For every draw, the grid's losses as the model predicts them for a new setting at (N, D) (one draw of the
    setting's offsets shared by all its cells), plus the model's own run-to-run noise on log loss (Student-t
    with ``nu`` degrees of freedom, scale sigma0 + sigma1 * (log loss - log loss_opt)). A cell whose simulated
    loss is not a number (an overflowing draw) does not win; a draw in which no cell has a finite loss is left
    out (the result can be shorter than the draws).
    """
    from scalinfer.models.surface.design import design_of, fill_left_out

    d = fit.draws(["sigma0", "sigma1", *(["nu"] if "nu" in fit.posterior else [])])
    d = fill_left_out(d, design_of(fit.constants), np.zeros_like(d["sigma0"]))  # a reduced design fixes nu
    # the setting's loss at its optimum: of the whole surface, or along the one batch (LR) a reduced design has
    opt = next(q for q in ("loss_opt", "loss_opt_at_batch", "loss_opt_at_lr") if q in prediction.draws)
    log_loss, log_opt = np.log(prediction["loss"]), np.log(prediction[opt])  # both (draws, cells)
    scale = d["sigma0"][:, None] + d["sigma1"][:, None] * (log_loss - log_opt)
    rng = np.random.default_rng(seed)
    with np.errstate(invalid="ignore"):
        y = log_loss + scale * rng.standard_t(d["nu"][:, None], size=log_loss.shape)
    y = np.where(np.isnan(y), np.inf, y)
    return np.argmin(y[np.isfinite(y).any(axis=1)], axis=1)


def grid_winner(fit, truth: dict, N: float, D: float, ci: float, seed: int = 0) -> dict:
    """The posterior predictive distribution of *which grid LR wins* at (N, D) (`winner_draws`, then the LR
    of the winning cell). The grid's best LR is a noisy argmin over LRs sqrt 2 apart, a different quantity
    from the continuous optimum that ``lr_opt`` describes; this says how probable the observed winner was
    under the model, and whether it lies in the model's central `ci` set of winners."""
    g = truth["grid"]
    lrs, bs = g["lr"].to_numpy(float), g["batch_tokens"].to_numpy(float)
    win = lrs[winner_draws(fit, fit.predict(N=N, D=D, lr=lrs, batch=bs), seed)]
    values, counts = np.unique(win, return_counts=True)
    prob = dict(zip(values.tolist(), (counts / counts.sum()).tolist()))
    order = sorted(prob, key=prob.get, reverse=True)
    kept, mass = [], 0.0
    for v in order:  # the most probable winners until they hold `ci` of the mass
        if mass >= ci:
            break
        kept.append(v)
        mass += prob[v]
    return {"p_observed_winner": prob.get(truth["best_lr"], 0.0), "winner_set": sorted(kept),
            "observed_in_set": truth["best_lr"] in kept, "probabilities": {f"{k:.4g}": v for k, v in prob.items()}}
