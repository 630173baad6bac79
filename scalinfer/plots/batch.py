"""Figures of the batch models (docs/laws.md section 5) and of the batch-size schedule.

=====================  ===================================================================================
kind                   figure
=====================  ===================================================================================
``batch-steps``        steps and tokens to the target against the batch, per (N, L*) unit: the data (censored
                       cells as open triangles at their bound) and the posterior median with 90% band
``batch-sizes``        B_min, B_opt, B_crit (those the model defines) against the target loss, per model size
``batch-vs-N``         B_min, B_opt, B_crit against the model size N at a target loss L*(N) (by default the power
                       law through the data's targets), extrapolation beyond the largest fitted size shaded
``batch-curves``       ``batch-floor`` on loss curves: loss against tokens per run, data and posterior
``batch-schedule``     the batch-size schedule over tokens with B_opt and B_min along the run, the expected loss,
                       and the WSD learning rate (options ``N``, ``D``, ``max_batch`` or a ``schedule``)
=====================  ===================================================================================

The batch sizes' medians and bands are `predict`'s: its quantiles (`scalinfer.predict.interval`) of the model's
draws, where a draw in which no batch reaches the target (``batch-floor`` where L* is at or below the floor
L_inf) is +inf and sorts to the top. So a line stops where `predict`'s median is infinite, and a band is open
above (filled to the top of the axes) where `predict`'s upper bound is.
"""

from __future__ import annotations

import numpy as np

from scalinfer.errors import ModelError
from scalinfer.plots.style import (COLORS, EXTRAPOLATION_COLOR, band, label_axes, new_figure,
                                   shade_extrapolation)
from scalinfer.predict import interval

__all__ = ["KINDS", "plot_steps", "plot_sizes", "plot_vs_N", "plot_curves", "plot_schedule"]

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


_MARKS = {"batch_opt": ("--", "B_opt (median)"), "batch_min": (":", "B_min (median)"),
          "batch_crit": ("-.", "B_crit (median)")}


def _default_marks(model) -> tuple[str, ...]:
    """B_min and B_opt where the model has them, else its B_crit."""
    if "batch_opt" in model.predicts:
        return tuple(q for q in ("batch_min", "batch_opt") if q in model.predicts)
    return tuple(q for q in ("batch_crit",) if q in model.predicts)


def plot_steps(fit, ci: float = 0.9, mark: tuple[str, ...] | None = None):
    """Steps and tokens to the target vs batch, per unit: data and posterior median with a `ci` band.

    `mark`: batch sizes to mark per unit with a vertical line at their posterior median (``batch_min``,
    ``batch_opt``, ``batch_crit``; default B_min and B_opt where the model has them, else B_crit). The
    batch axis widens to show them; batches outside those tried are shaded. Where a draw cannot reach the
    target (at or below its B_min) its steps are infinite: the band then runs off the top of the axes.
    """
    from matplotlib.lines import Line2D

    _need_table(fit)
    cells = _cells(fit)
    mark = _default_marks(fit.model) if mark is None else tuple(mark)
    unknown = [q for q in mark if q not in _MARKS or q not in fit.model.predicts]
    if unknown:
        raise ModelError(f"model {fit.model.name!r} cannot mark {', '.join(unknown)} "
                         f"(it predicts {', '.join(q for q in _MARKS if q in fit.model.predicts) or 'none of them'})")
    fig, axes = new_figure(ncols=2, width=5.4, height=4.2)
    axes = np.ravel(axes)
    units = cells[["N", "target_loss"]].drop_duplicates().sort_values(["N", "target_loss"]).to_numpy()
    draws, constants = fit.draws(), fit.constants
    marks = {}
    if mark:
        pred = fit.model.predict(draws, constants, N=units[:, 0], target_loss=units[:, 1])
        marks = {q: np.median(np.asarray(pred[q], float), axis=0) for q in mark}
    tried_lo, tried_hi = cells["batch_tokens"].min(), cells["batch_tokens"].max()
    shown = [v for m in marks.values() for v in m if np.isfinite(v) and v > 0]
    b_lo = min([tried_lo / 2] + [0.7 * v for v in shown])
    b_hi = max([tried_hi * 2] + [1.4 * v for v in shown])
    grid = np.geomspace(b_lo, b_hi, 120)
    ylims = []
    for ax, q in zip(axes, ("steps_to_target", "tokens_to_target")):
        y = cells["steps"].to_numpy(float) * (1.0 if q == "steps_to_target" else cells["batch_tokens"].to_numpy(float))
        ylims.append((y.min() / 2.0, y.max() * 4.0))
    for i, (N, L) in enumerate(units):
        color = COLORS[i % len(COLORS)]
        pred = fit.model.predict(draws, constants, N=N, target_loss=L, batch=grid)
        rows = cells[(cells["N"] == N) & (cells["target_loss"] == L)]
        reached = ~rows["censored"].to_numpy()
        label = f"N={N:.3g}, L*={L:.3g}"
        for ax, q, (_, y_hi) in zip(axes, ("steps_to_target", "tokens_to_target"), ylims):
            # unreachable draws (inf) sort to the top: cap them above the axes so quantiles stay honest
            d = np.minimum(np.where(np.isnan(pred[q]), np.inf, np.asarray(pred[q], float)), y_hi * 1e3)
            ax.plot(grid, np.median(d, axis=0), color=color, lw=1.6, label=label)
            lo, hi = np.quantile(d, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
            ax.fill_between(grid, lo, hi, color=color, alpha=0.18, lw=0)
            B = rows["batch_tokens"].to_numpy(float)
            y = rows["steps"].to_numpy(float) * (1.0 if q == "steps_to_target" else B)
            ax.scatter(B[reached], y[reached], color=color, s=16, zorder=3)
            if (~reached).any():
                ax.scatter(B[~reached], y[~reached], facecolors="none", edgecolors=color, marker="^", s=28,
                           zorder=3)
            for m, v in marks.items():
                if np.isfinite(v[i]) and v[i] > 0:
                    ax.axvline(v[i], color=color, ls=_MARKS[m][0], lw=1.1, alpha=0.85)
    label_axes(axes[0], "batch B (tokens/step)", "steps to target S (steps)", "steps to reach the target loss")
    label_axes(axes[1], "batch B (tokens/step)", "tokens to target E = B S (tokens)", "tokens to reach it")
    for ax, lims in zip(axes, ylims):
        ax.set_xlim(b_lo, b_hi)
        ax.set_ylim(*lims)
        if b_lo < tried_lo:
            ax.axvspan(b_lo, tried_lo, color=EXTRAPOLATION_COLOR, zorder=0)
        if tried_hi < b_hi:
            ax.axvspan(tried_hi, b_hi, color=EXTRAPOLATION_COLOR, zorder=0)
    handles = [Line2D([], [], color=COLORS[i % len(COLORS)], lw=1.6, label=f"N={N:.3g}, L*={L:.3g}")
               for i, (N, L) in enumerate(units)]
    handles += [Line2D([], [], color="0.3", lw=1.6, label=f"{fit.model.name}: median"),
                _patch(f"{int(ci * 100)}% credible band"),
                Line2D([], [], color="0.3", marker="o", ls="", ms=4, label="data")]
    if cells["censored"].any():
        handles.append(Line2D([], [], color="0.3", marker="^", mfc="none", ls="", ms=5,
                              label="never reached (lower bound)"))
    handles += [Line2D([], [], color="0.3", ls=_MARKS[m][0], lw=1.1, label=_MARKS[m][1]) for m in marks]
    if b_lo < tried_lo or tried_hi < b_hi:
        handles.append(_patch("batches not tried", color=EXTRAPOLATION_COLOR, alpha=1.0, edgecolor="0.6"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(5, len(handles)), frameon=False, fontsize=8)
    return fig


def _plain_ticks(axis):
    """Decimal tick labels on a log axis that spans less than a decade (a loss: 2.4 ... 3.5)."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    axis.set_major_locator(LogLocator(base=10, subs=np.arange(1, 10) / 10, numticks=20))
    axis.set_major_formatter(ScalarFormatter())
    axis.set_minor_formatter(NullFormatter())


def _patch(label: str, color: str = "0.3", alpha: float = 0.18, edgecolor: str | None = None):
    """A legend entry for a shaded area."""
    from matplotlib.patches import Patch

    return Patch(facecolor=color, alpha=alpha, edgecolor=edgecolor or "none", lw=0.6 if edgecolor else 0,
                 label=label)


def _band(ax, x, draws, color, ci: float, label=None) -> tuple:
    """Median line and `ci` band of `draws` (n_draws, len(x)) with `predict`'s quantiles (see the module
    docstring): the line stops where the median is infinite, the band where its lower end is; where only its
    upper end is, the band is open above (`_open_above` fills it to the top of the axes once they are final).
    Returns (median, lo, hi) and the open part, for `_open_above`."""
    med, lo, hi = interval(np.asarray(draws, float), ci)  # an out-of-reach draw is +inf, and so is a bound past it
    fin = np.isfinite
    ax.plot(x, np.where(fin(med), med, np.nan), color=color, lw=1.8, label=label)
    closed = fin(lo) & fin(hi)
    ax.fill_between(x, np.where(closed, lo, np.nan), np.where(closed, hi, np.nan), where=closed, color=color,
                    alpha=0.18, lw=0)
    return (med, lo, hi), (x, np.where(fin(lo), lo, np.nan), fin(lo) & ~fin(hi), color)


def _open_above(ax, parts) -> None:
    """Fill the open parts `_band` returned from their lower end to the top of the axes (from the point before
    each, so the band runs on), keeping the limits the finite values set."""
    bottom, top = ax.get_ylim()
    for x, lo, is_open, color in parts:
        where = is_open | np.append(is_open[1:], False)
        if is_open.any():
            ax.fill_between(x, np.where(where, lo, np.nan), top, where=where, color=color, alpha=0.18, lw=0)
    ax.set_ylim(bottom, top)


def _reach_note(N, pred, bands, ci: float) -> str | None:
    """Where along `N` some draws of `pred` (quantity -> (n_draws, len(N))) are infinite (the target out of
    reach), and where that makes `predict`'s upper bound and median (`bands`: quantity -> (median, lo, hi) from
    `_band`) infinite; None if nowhere."""
    out = np.mean(np.any([~np.isfinite(np.asarray(pred[q], float)) for q in bands], axis=0), axis=0)
    if not out.any():
        return None
    first = lambda mask: N[np.flatnonzero(mask)[0]]  # noqa: E731
    parts = [f"no batch reaches L*(N) in some draws from N = {first(out > 0):.3g} "
             f"({100 * out.max():.2g}% of draws at most)"]
    for k, what in ((2, f"{int(ci * 100)}% band open above"), (0, "median infinite")):
        gone = np.any([~np.isfinite(b[k]) for b in bands.values()], axis=0)
        if gone.any():
            parts.append(f"{what} from N = {first(gone):.3g}")
    return ";\n".join(parts)


def plot_sizes(fit, ci: float = 0.9, n_points: int = 40):
    """B_min, B_opt, B_crit (as defined by the model) vs the target loss, one line per fitted model size."""
    _need_table(fit)
    constants, draws = fit.constants, fit.draws()
    sizes = [constants[f"size_N_{k}"] for k in range(int(constants["n_sizes"]))]
    cells = _cells(fit)
    qs = [q for q in ("batch_min", "batch_opt", "batch_crit") if q in fit.model.predicts]
    fig, axes = new_figure(ncols=len(qs), width=4.2, height=3.6)
    axes = np.ravel(axes)
    opens = {q: [] for q in qs}
    for i, N in enumerate(sizes):
        Ls = cells.loc[cells["N"] == N, "target_loss"].to_numpy(float)
        lo, hi = Ls.min(), Ls.max()
        grid = np.linspace(lo * 0.97, hi * 1.03, n_points)
        pred = fit.model.predict(draws, constants, N=np.full_like(grid, N), target_loss=grid)
        for ax, q in zip(axes, qs):
            opens[q].append(_band(ax, grid, pred[q], COLORS[i % len(COLORS)], ci,
                                  label=f"N={N:.3g}" if ax is axes[0] else None)[1])
    for ax, q in zip(axes, qs):
        label_axes(ax, "target loss L* (nats/token)", f"{q} (tokens/step)", _BATCH_NAMES[q], logx=False)
        _open_above(ax, opens[q])
    axes[0].legend(frameon=False, fontsize=7)
    return fig


def _loss_along_N(fit, target_loss):
    """(function N -> target loss, label) for `plot_vs_N`: the data's own relation by default."""
    c = fit.constants
    units = np.array([(c[f"unit_N_{k}"], c[f"unit_L_{k}"]) for k in range(int(c["n_units"]))])
    if callable(target_loss):
        return target_loss, "given L*(N)"
    if target_loss is not None:
        L = float(target_loss)
        if not (np.isfinite(L) and L > 0):
            raise ModelError(f"target_loss must be a positive number of nats/token, got {target_loss!r}")
        return (lambda N: np.full(np.shape(N), L)), f"L* = {L:.3g} at every N"
    if np.unique(units[:, 0]).size < 2:
        raise ModelError("the fit has one model size, so it has no relation between N and the target loss to "
                         "follow: give target_loss (a number or a function of N)")
    k, a = np.polyfit(np.log(units[:, 0]), np.log(units[:, 1]), 1)
    label = f"L* = {np.exp(a):.3g} N^{k:.3f} (least squares on the data's targets)"
    return (lambda N: np.exp(a + k * np.log(N))), label


def plot_vs_N(fit, N_max: float | None = None, target_loss=None, ci: float = 0.9, n_points: int = 40,
              quantities: tuple[str, ...] | None = None):
    """B_min, B_opt, B_crit (those the model defines) against the model size N, at a target loss that moves
    with N, with the region beyond the largest fitted size shaded.

    Which target at each N: by default the power law L*(N) through the fitted (N, L*) units (log-log least
    squares; in Zhang et al.'s table each size's target is its Chinchilla-optimal loss), else a number
    (one target for every N) or a function of N. The left panel shows that relation and the data's targets;
    the right one the posterior medians with `ci` bands along it (a new size's deviation from the power laws
    included) and each fitted unit's own posterior (points, `ci` error bars). Options: `N_max` (default 10x
    the largest fitted N), `quantities` (default all three the model has).
    """
    from matplotlib.lines import Line2D

    _need_table(fit)
    c, draws = fit.constants, fit.draws()
    qs = tuple(q for q in _BATCH_NAMES if q in fit.model.predicts) if quantities is None else tuple(quantities)
    bad = [q for q in qs if q not in _BATCH_NAMES or q not in fit.model.predicts]
    if bad or not qs:
        raise ModelError(f"model {fit.model.name!r} has no {', '.join(bad) or 'batch size'} to draw "
                         f"(it predicts {', '.join(q for q in _BATCH_NAMES if q in fit.model.predicts)})")
    loss_of, relation = _loss_along_N(fit, target_loss)
    N_max = 10.0 * c["max_N"] if N_max is None else float(N_max)
    if not (np.isfinite(N_max) and N_max > c["min_N"]):
        raise ModelError(f"N_max must exceed the smallest fitted size {c['min_N']:.3g}, got {N_max!r}")
    grid = np.geomspace(c["min_N"] / 1.5, N_max, n_points)
    L_grid = loss_of(grid)
    pred = fit.model.predict(draws, c, N=grid, target_loss=L_grid)  # as `predict` at these targets
    units = np.array([(c[f"unit_N_{k}"], c[f"unit_L_{k}"]) for k in range(int(c["n_units"]))])
    at_units = fit.model.predict(draws, c, N=units[:, 0], target_loss=units[:, 1])
    fig, axes = new_figure(ncols=2, width=5.0, height=4.0)
    axes = np.ravel(axes)
    ax = axes[0]
    ax.plot(grid, L_grid, color="0.3", lw=1.6, label=relation)
    ax.scatter(units[:, 0], units[:, 1], color="k", s=18, zorder=3, label="the data's targets")
    label_axes(ax, "model size N (parameters)", "target loss L* (nats/token)", "the target at each size")
    _plain_ticks(ax.yaxis)
    ax.set_xlim(grid[0], grid[-1])
    shade_extrapolation(ax, c["max_N"], label=None)
    ax.legend(frameon=False, fontsize=7, loc="upper right")
    ax = axes[1]
    opens, bands = [], {}
    for j, q in enumerate(qs):
        color = COLORS[j % len(COLORS)]
        bands[q], part = _band(ax, grid, pred[q], color, ci, label=_BATCH_NAMES[q])
        opens.append(part)
        med, lo, hi = interval(np.asarray(at_units[q], float), ci)
        ok = np.isfinite(med)
        ax.errorbar(units[ok, 0], med[ok], yerr=[med[ok] - lo[ok], np.where(np.isfinite(hi), hi, med)[ok] - med[ok]],
                    fmt="o", color=color, ms=4, capsize=2, lw=1, zorder=3)
        if (ok & ~np.isfinite(hi)).any():  # an interval open above: an arrow up from the median
            ax.scatter(units[ok & ~np.isfinite(hi), 0], med[ok & ~np.isfinite(hi)] * 1.6, marker="^", color=color,
                       s=16, zorder=3)
    label_axes(ax, "model size N (parameters)", "batch (tokens/step)", f"batch sizes at L*(N), {fit.model.name}")
    for b in (c["min_batch"], c["max_batch"]):
        ax.axhline(b, color="0.45", ls=(0, (1, 2)), lw=1.0, zorder=1)
    ax.set_xlim(grid[0], grid[-1])
    _open_above(ax, opens)
    note = _reach_note(grid, pred, bands, ci)
    if note:  # e.g. batch-floor where L*(N) reaches the fitted floor in some draws
        ax.text(0.98, 0.02, note, transform=ax.transAxes, ha="right", va="bottom", fontsize=7)
    shade_extrapolation(ax, c["max_N"], label=None)
    handles, _ = ax.get_legend_handles_labels()
    handles += [Line2D([], [], color="0.3", marker="o", ls="", ms=4,
                       label=f"fitted sizes: median, {int(ci * 100)}% interval"),
                _patch(f"{int(ci * 100)}% credible band"),
                Line2D([], [], color="0.45", ls=(0, (1, 2)), lw=1.0, label="smallest and largest batch tried"),
                _patch("beyond the largest fitted size", color=EXTRAPOLATION_COLOR, alpha=1.0, edgecolor="0.6")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, frameon=False, fontsize=8)
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
    from scalinfer.schedules.batch import batch_schedule

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
    pct = f"{int(ci * 100)}%"
    opens = [_band(ax, T, pred["batch_opt"], COLORS[0], ci, label=f"B_opt at the expected loss (median, {pct})")[1],
             _band(ax, T, pred["batch_min"], COLORS[2], ci, label=f"B_min (median, {pct})")[1]]
    xs, ys = [], []
    for s in schedule.segments:
        xs += [max(s.from_tokens, T[0]), s.to_tokens]
        ys += [s.batch_tokens, s.batch_tokens]
    ax.plot(xs, ys, color="k", lw=2.0, drawstyle="default", label="schedule")
    if schedule.max_batch is not None:
        ax.axhline(schedule.max_batch, color="0.4", ls=":", lw=1, label="max batch")
    label_axes(ax, "tokens seen (tokens)", "batch (tokens/step)", f"batch schedule, N={N:.3g}")
    _open_above(ax, opens)
    ax.legend(frameon=False, fontsize=7)
    ax = axes[1]
    band(ax, T, loss_d, color=COLORS[1], label=f"expected loss, token-efficient path (median, {pct})", cis=(ci,))
    stable = [g for g in schedule.segments if np.isfinite(g.loss)]
    ax.scatter([g.at_tokens for g in stable], [g.loss for g in stable], color="k", s=14, zorder=3,
               label="where each batch was chosen")
    if "min_target_loss" in constants and "max_target_loss" in constants:
        # where the expected loss leaves the fitted targets, the E_min(L*) law is extrapolated
        ax.axhspan(constants["min_target_loss"], constants["max_target_loss"], color="0.6", alpha=0.18, lw=0,
                   zorder=0, label="target losses in the data")
    label_axes(ax, "tokens seen (tokens)", "loss (nats/token)", "expected loss along the run", logy=False)
    ax.legend(frameon=False, fontsize=7)
    ax = axes[2]
    if schedule.lr is not None:
        from scalinfer.schedules.wsd import wsd_schedule  # the trainer's own schedule, so the figure is what runs

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


KINDS = {"batch-steps": plot_steps, "batch-sizes": plot_sizes, "batch-vs-N": plot_vs_N, "batch-curves": plot_curves,
         "batch-schedule": plot_schedule}
