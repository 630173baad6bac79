"""Figures of the ``chinchilla`` model: L(N, D) curves with credible bands, extrapolation, predictive check."""

from __future__ import annotations

import numpy as np

from scalinfer.plots.style import COLORS, band, label_axes, new_figure, shade_extrapolation

__all__ = ["KINDS", "loss_vs_D", "loss_vs_N", "ppc"]


def _check(fit):
    from scalinfer.errors import ModelError

    if fit.model.name != "chinchilla":
        raise ModelError(f"this figure is for chinchilla fits, not {fit.model.name!r}")


def loss_vs_D(fit, N=None, D_max_ratio: float = 30.0, n_draws: int = 1000):
    """Loss against training tokens at a few model sizes: posterior median and 50/90% bands, the data
    nearest each size, and the extrapolation region beyond the largest fitted D shaded."""
    _check(fit)
    runs, c = fit.runs, fit.constants
    sizes = np.asarray(N if N is not None else np.quantile(runs["N"], [0.1, 0.5, 0.95]), float)
    D = np.geomspace(runs["D"].min(), c["max_D"] * D_max_ratio, 120)
    draws = {k: v[:n_draws] for k, v in fit.draws().items()}
    fig, ax = new_figure(width=6.0, height=4.0)
    log_N_runs = np.log(runs["N"].to_numpy())
    for i, n in enumerate(sizes):
        color = COLORS[i % len(COLORS)]
        loss = fit.model.predict(draws, c, N=np.full_like(D, n), D=D)["loss"]
        band(ax, D, loss, color=color, label=f"N = {n:.2g}", label_bands=i == len(sizes) - 1)
        near = np.abs(log_N_runs - np.log(n)) < 0.1
        ax.scatter(runs["D"][near], runs["loss"][near], s=14, color=color, edgecolor="white", lw=0.5, zorder=3)
    label_axes(ax, "training tokens D", "final loss (nats/token)", "L(D) at fixed model size", logy=False)
    shade_extrapolation(ax, c["max_D"])
    ax.legend(loc="upper right")
    return fig


def loss_vs_N(fit, n_draws: int = 1000):
    """Loss against model size along the data's isoFLOP lines (C = 6 N D), with bands and the data."""
    _check(fit)
    runs, c = fit.runs, fit.constants
    C = 6 * runs["N"].to_numpy() * runs["D"].to_numpy()
    budgets = np.unique(np.round(np.log10(C), 1))
    budgets = budgets[np.linspace(0, len(budgets) - 1, min(6, len(budgets))).astype(int)]
    draws = {k: v[:n_draws] for k, v in fit.draws().items()}
    fig, ax = new_figure(width=6.0, height=4.0)
    for i, b in enumerate(budgets):
        color = COLORS[i % len(COLORS)]
        sel = np.abs(np.log10(C) - b) < 0.05
        n_lo, n_hi = runs["N"][sel].min() / 2, runs["N"][sel].max() * 2
        N = np.geomspace(n_lo, n_hi, 80)
        loss = fit.model.predict(draws, c, N=N, D=10 ** b / (6 * N))["loss"]
        band(ax, N, loss, color=color, label=f"C = 1e{b:.1f} FLOPs", label_bands=i == len(budgets) - 1)
        ax.scatter(runs["N"][sel], runs["loss"][sel], s=14, color=color, edgecolor="white", lw=0.5, zorder=3)
    label_axes(ax, "parameters N", "final loss (nats/token)", "isoFLOP profiles (C = 6ND)", logy=False)
    shade_extrapolation(ax, c["max_N"])
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def ppc(fit, ci: float = 0.9):
    """Posterior predictive check: each run's observed loss against the fit's prediction (median and
    `ci` interval of the law, without observation noise), and the residuals against N."""
    _check(fit)
    runs, c = fit.runs, fit.constants
    pred = fit.model.predict(fit.draws(), c, N=runs["N"].to_numpy(), D=runs["D"].to_numpy())["loss"]
    med = np.median(pred, axis=0)
    lo, hi = np.quantile(pred, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
    fig, axes = new_figure(ncols=2, width=4.6, height=3.8)
    ax1, ax2 = axes[0]
    ax1.errorbar(med, runs["loss"], xerr=[med - lo, hi - med], fmt="o", ms=3, color=COLORS[0], ecolor="#9ecae1",
                 elinewidth=1, label=f"runs (median, {int(ci * 100)}% interval of the law)")
    lims = [min(runs["loss"].min(), lo.min()), max(runs["loss"].max(), hi.max())]
    ax1.plot(lims, lims, color="k", lw=0.8, ls="--", label="y = x")
    label_axes(ax1, "predicted loss (nats/token)", "observed loss (nats/token)", "observed vs predicted",
               logx=False, logy=False)
    ax1.legend(loc="upper left")
    resid = np.log(runs["loss"].to_numpy()) - np.log(med)
    ax2.scatter(runs["N"], 100 * resid, s=10, color=COLORS[0])
    ax2.axhline(0, color="k", lw=0.8)
    label_axes(ax2, "parameters N", "residual of log loss (%)", "residuals", logy=False)
    return fig


KINDS = {"loss-vs-D": loss_vs_D, "loss-vs-N": loss_vs_N, "chinchilla-ppc": ppc}
