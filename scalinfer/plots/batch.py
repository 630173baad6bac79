"""Figures of the batch models (MATH.md section 5) and of the batch-size schedule.

=====================  ===================================================================================
kind                   figure
=====================  ===================================================================================
``batch-steps``        steps and tokens to the target against the batch, per (N, L*) unit: the data (censored
                       cells as open triangles at their bound) and the posterior median with 90% band
``batch-sizes``        B_min, B_opt, B_crit (those the model defines) against the target loss, per model size
``batch-curves``       ``batch-floor`` on loss curves: loss against tokens per run, data and posterior
``batch-schedule``     the batch-size schedule over tokens with B_opt and B_min along the run, the expected loss,
                       and the WSD learning rate (options ``N``, ``D``, ``max_batch`` or a ``schedule``)
=====================  ===================================================================================
"""

from __future__ import annotations

import numpy as np

from scalinfer.errors import ModelError
from scalinfer.plots.style import COLORS, band, label_axes, new_figure

__all__ = ["KINDS", "plot_steps", "plot_sizes", "plot_curves", "plot_schedule"]

_BATCH_NAMES = {"batch_min": "B_min (smallest that reaches L*)", "batch_opt": "B_opt (fewest tokens)",
                "batch_crit": "B_crit (OpenAI, E_min / S_min)"}


def _need_table(fit):
    if not fit.model.name.startswith("batch-"):
        raise ModelError(f"figure kinds batch-* need a batch model fit, not {fit.model.name!r}")
    if fit.constants.get("curves", 0.0) > 0.5:
        raise ModelError("this batch-floor fit is of loss curves: use the figure kind 'batch-curves'")


def _cells(fit):
    """The fitted steps-to-target cells, read back from the fit's own data (also when it was fit to curves,
    whose derived table is not among its runs): N, target_loss, batch_tokens, steps (the observed steps,
    or the bound of a censored cell) and censored."""
    import pandas as pd

    c = fit.constants
    cd = fit.tree["constant_data"].to_dataset()
    unit = cd["unit"].values.astype(int)
    log_steps = fit.tree["observed_data"].to_dataset()["log_steps"].values
    return pd.DataFrame({
        "N": [c[f"unit_N_{k}"] for k in unit], "target_loss": [c[f"unit_L_{k}"] for k in unit],
        "batch_tokens": np.exp(cd["log_b"].values + c["m_B"]), "steps": np.exp(log_steps + c["m_S"]),
        "censored": cd["censored"].values.astype(bool)})


def plot_steps(fit, ci: float = 0.9):
    """Steps and tokens to the target vs batch, per unit: data and posterior median with a `ci` band."""
    _need_table(fit)
    cells = _cells(fit)
    fig, axes = new_figure(ncols=2, width=5.2, height=3.9)
    axes = np.ravel(axes)
    units = cells[["N", "target_loss"]].drop_duplicates().sort_values(["N", "target_loss"]).to_numpy()
    b_lo, b_hi = cells["batch_tokens"].min() / 2, cells["batch_tokens"].max() * 2
    grid = np.geomspace(b_lo, b_hi, 60)
    draws, constants = fit.draws(), fit.constants
    for i, (N, L) in enumerate(units):
        color = COLORS[i % len(COLORS)]
        pred = fit.model.predict(draws, constants, N=N, target_loss=L, batch=grid)
        rows = cells[(cells["N"] == N) & (cells["target_loss"] == L)]
        reached = ~rows["censored"].to_numpy()
        label = f"N={N:.3g}, L*={L:.3g}"
        for ax, q in ((axes[0], "steps_to_target"), (axes[1], "tokens_to_target")):
            d = np.asarray(pred[q], float)
            finite = np.isfinite(d).mean(axis=0) > 0.5
            d = np.where(np.isfinite(d), d, np.nan)
            ax.plot(grid[finite], np.nanmedian(d[:, finite], axis=0), color=color, lw=1.6, label=label)
            lo, hi = np.nanquantile(d[:, finite], [(1 - ci) / 2, (1 + ci) / 2], axis=0)
            ax.fill_between(grid[finite], lo, hi, color=color, alpha=0.18, lw=0)
            B = rows["batch_tokens"].to_numpy(float)
            y = rows["steps"].to_numpy(float) * (1.0 if q == "steps_to_target" else B)
            ax.scatter(B[reached], y[reached], color=color, s=16, zorder=3)
            if (~reached).any():
                ax.scatter(B[~reached], y[~reached], facecolors="none", edgecolors=color, marker="^", s=28,
                           zorder=3)
    label_axes(axes[0], "batch B (tokens/step)", "steps to target S", "steps to reach the target loss")
    label_axes(axes[1], "batch B (tokens/step)", "tokens to target E = B S (tokens)", "tokens to reach it")
    axes[0].legend(loc="upper right", frameon=False, fontsize=7)
    axes[1].text(0.02, 0.97, f"{fit.model.name}: median, {int(ci * 100)}% band; dots: data, "
                 f"open triangles: never reached (lower bound)", transform=axes[1].transAxes, fontsize=7, va="top")
    return fig


def plot_sizes(fit, ci: float = 0.9, n_points: int = 40):
    """B_min, B_opt, B_crit (as defined by the model) vs the target loss, one line per fitted model size."""
    _need_table(fit)
    constants, draws = fit.constants, fit.draws()
    sizes = [constants[f"size_N_{k}"] for k in range(int(constants["n_sizes"]))]
    cells = _cells(fit)
    qs = [q for q in ("batch_min", "batch_opt", "batch_crit") if q in fit.model.predicts]
    fig, axes = new_figure(ncols=len(qs), width=4.2, height=3.6)
    axes = np.ravel(axes)
    for i, N in enumerate(sizes):
        Ls = cells.loc[cells["N"] == N, "target_loss"].to_numpy(float)
        lo, hi = Ls.min(), Ls.max()
        grid = np.linspace(lo * 0.97, hi * 1.03, n_points)
        pred = fit.model.predict(draws, constants, N=np.full_like(grid, N), target_loss=grid)
        for ax, q in zip(axes, qs):
            d = np.where(np.isfinite(pred[q]), pred[q], np.nan)
            band(ax, grid, d, color=COLORS[i % len(COLORS)], label=f"N={N:.3g}" if ax is axes[0] else None,
                 cis=(ci,))
    for ax, q in zip(axes, qs):
        label_axes(ax, "target loss L* (nats/token)", f"{q} (tokens/step)", _BATCH_NAMES[q], logx=False)
    axes[0].legend(frameon=False, fontsize=7)
    return fig


def plot_curves(fit, ci: float = 0.9, max_runs: int = 12):
    """`batch-floor` on loss curves: loss vs tokens per run (dots) and the posterior of L(S; B) (lines)."""
    if fit.model.name != "batch-floor" or fit.attrs.get("table_kind") != "curves":
        raise ModelError("'batch-curves' is the figure of a batch-floor fit to loss curves")
    runs = fit.runs
    fig, ax = new_figure(width=6.4, height=4.4)
    draws, constants = fit.draws(), fit.constants
    ids = list(dict.fromkeys(runs["run_id"]))[:max_runs]
    batches = sorted(runs["batch_tokens"].unique())
    sizes = sorted(runs["N"].unique())
    styles = ("-", "--", ":", "-.")
    for rid in ids:
        r = runs[runs["run_id"] == rid].sort_values("step")
        N, B = float(r["N"].iloc[0]), float(r["batch_tokens"].iloc[0])
        S = r["step"].to_numpy(float)
        grid = np.geomspace(S.min(), S.max(), 50)
        d = fit.model.loss(draws, constants, N, grid, B)
        color = COLORS[batches.index(B) % len(COLORS)]
        ls = styles[sizes.index(N) % len(styles)]
        lo, hi = np.quantile(d, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
        ax.fill_between(grid * B, lo, hi, color=color, alpha=0.2, lw=0)
        ax.plot(grid * B, np.median(d, axis=0), color=color, ls=ls, lw=1.4)
        ax.scatter(S * B, r["loss"], color=color, s=9, zorder=3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=COLORS[i % len(COLORS)], label=f"B = {b:.3g} tokens") for i, b in enumerate(batches)]
    handles += [Line2D([], [], color="0.3", ls=styles[i % len(styles)], label=f"N = {n:.3g}") for i, n in enumerate(sizes)]
    handles.append(Line2D([], [], color="0.3", marker="o", ls="", ms=3, label="data"))
    label_axes(ax, "tokens seen (tokens)", "loss (nats/token)",
               f"noise-floor surface L(S; B): median, {int(ci * 100)}% band")
    ax.legend(handles=handles, frameon=False, fontsize=7, ncol=2)
    if len(ids) < runs["run_id"].nunique():
        ax.text(0.98, 0.98, f"first {len(ids)} of {runs['run_id'].nunique()} runs", transform=ax.transAxes,
                ha="right", va="top", fontsize=7)
    return fig


def plot_schedule(fit, N: float | None = None, D: float | None = None, max_batch: float | None = None,
                  schedule=None, ci: float = 0.9, **options):
    """The batch schedule over tokens with the posterior of B_opt and B_min along the run, the expected
    loss, and the learning rate. Defaults: the largest fitted N and 20 tokens per parameter."""
    from scalinfer.schedule import batch_schedule

    if schedule is None:
        N = fit.constants["max_N"] if N is None else N
        D = 20.0 * N if D is None else D
        schedule = batch_schedule(fit, N=N, D=D, max_batch=max_batch, **options)
    N, D = schedule.N, schedule.D
    T = np.geomspace(D * 1e-3, D, 80)
    draws, constants = fit.draws(), fit.constants
    loss_d = fit.model.loss_at_tokens(draws, constants, N, T)
    loss = np.median(loss_d, axis=0)
    pred = fit.model.predict(draws, constants, N=np.full_like(T, N), target_loss=loss)
    fig, axes = new_figure(ncols=3, width=4.4, height=3.6)
    axes = np.ravel(axes)
    ax = axes[0]
    band(ax, T, np.where(np.isfinite(pred["batch_opt"]), pred["batch_opt"], np.nan), color=COLORS[0],
         label="B_opt at the expected loss", cis=(ci,))
    band(ax, T, np.where(np.isfinite(pred["batch_min"]), pred["batch_min"], np.nan), color=COLORS[2],
         label="B_min", cis=(ci,))
    xs, ys = [], []
    for s in schedule.segments:
        xs += [max(s.from_tokens, T[0]), s.to_tokens]
        ys += [s.batch_tokens, s.batch_tokens]
    ax.plot(xs, ys, color="k", lw=2.0, drawstyle="default", label="schedule")
    if schedule.max_batch is not None:
        ax.axhline(schedule.max_batch, color="0.4", ls=":", lw=1, label="max batch")
    label_axes(ax, "tokens seen (tokens)", "batch (tokens/step)", f"batch schedule, N={N:.3g}")
    ax.legend(frameon=False, fontsize=7)
    ax = axes[1]
    band(ax, T, loss_d, color=COLORS[1], label="expected loss (token-efficient path)", cis=(ci,))
    label_axes(ax, "tokens seen (tokens)", "loss (nats/token)", "expected loss along the run", logy=False)
    ax.legend(frameon=False, fontsize=7)
    ax = axes[2]
    if schedule.lr is not None:
        from scalinfer.train.optimizer import wsd_schedule  # the trainer's own schedule, so the figure is what runs

        lr = schedule.lr
        fn = wsd_schedule(lr["peak"], lr["total_tokens"], lr["warmup_tokens"],
                          lr["total_tokens"] - lr["decay_start_tokens"], lr["decay_shape"], lr["final_fraction"])
        t = np.linspace(0, D, 400)
        y = np.array([float(fn(v)) for v in t])
        ax.plot(t, y, color=COLORS[3], lw=1.8)
        label_axes(ax, "tokens seen (tokens)", "learning rate", "WSD learning rate", logx=False, logy=False)
    else:
        ax.text(0.5, 0.5, "no LR schedule\n(give --lr)", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    return fig


KINDS = {"batch-steps": plot_steps, "batch-sizes": plot_sizes, "batch-curves": plot_curves,
         "batch-schedule": plot_schedule}
