"""Figures of the optimal learning rate and batch size (``surface`` fits; the law figures also take ``classic``).

=================  ===========================================================================================
kind               what it shows
=================  ===========================================================================================
``lr-law``         eta* against N at fixed D and against D at fixed N: posterior median and 50%/90% bands
                   for a new setting, the extrapolation region shaded, the per-setting empirical optima (the
                   best run's LR, moved to the fixed D or N along the posterior median exponent and, for
                   ``surface``, along the fitted LR-batch ridge to the setting's B*) (the LR paper's Figure 2)
``batch-law``      the same for the loss-optimal batch B* (tokens)
``lr-valley``      loss against LR per setting at the setting's best batch, with the posterior band of the
                   fitted valley, diverged runs marked (the LR paper's Figure 1b)
``batch-valley``   loss against batch per setting, each batch at its best LR, with the posterior band
``ppc``            posterior predictive check: observed against predicted loss with 90% predictive
                   intervals, and the histogram of the predictive probability of each observed loss (PIT;
                   flat when the model is calibrated)
=================  ===========================================================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scalinfer.errors import ModelError
from scalinfer.laws.lr import log_lr_opt_at_batch
from scalinfer.plots.style import COLORS, band, label_axes, log_ticks, new_figure, shade_extrapolation

__all__ = ["KINDS", "law_figure", "valley_figure", "ppc_figure"]

_LAW = {"lr_opt": ("optimal peak LR $\\eta^*$", "lr"), "batch_opt": ("optimal batch $B^*$ (tokens)", "batch_tokens")}
_MAX_DRAWS = 400  # enough for 90% bands; keeps per-setting curves fast


def _fmt_count(x: float, unit: str = "") -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if x >= div:
            return f"{x / div:.3g}{suffix}{unit}"
    return f"{x:.3g}{unit}"


def _empirical_optima(fit) -> Any:
    """Best converged run per setting (N, D[, group]) of the fitted runs."""
    from scalinfer.models.surface import settings_of

    df = fit.runs.copy()
    ok = np.isfinite(df["loss"].to_numpy(float))
    if "diverged" in df:
        ok &= ~df["diverged"].to_numpy(bool)
    s_idx, settings = settings_of(df)
    df["_s"] = s_idx
    best = df[ok].loc[lambda d: d.groupby("_s")["loss"].idxmin()]
    return best.sort_values("_s").reset_index(drop=True)


def _median(fit, name: str) -> float:
    d = fit.draws([name])[name]
    return float(np.median(d))


def law_figure(fit, quantity: str = "lr_opt", N: float | None = None, D: float | None = None,
               extend: float = 4.0, ci: tuple[float, ...] = (0.5, 0.9)):
    """eta* (or B*) against N at fixed D and against D at fixed N, with posterior bands.

    Parameters
    ----------
    fit : a ``surface`` or ``classic`` fit.
    quantity : ``"lr_opt"`` or ``"batch_opt"``.
    N, D : the fixed values of the two panels (default: the geometric middle of the fitted range).
    extend : how far beyond the largest fitted N and D the curves go (a factor).

    The dots are each setting's best run, moved to the panel's fixed D (or N) along the posterior median
    exponent. For a ``surface`` fit's eta*, which is the optimal LR *at B**, the best run's LR is also moved
    along the fitted ridge (posterior medians of kappa1, kappa2 and the setting's B*) from the batch it ran at
    to B*: where B* lies outside the batches tried, the best run's own LR is not comparable with the curve.
    """
    if quantity not in _LAW:
        raise ModelError(f"quantity must be one of {', '.join(_LAW)}, not {quantity!r}")
    if "lr_opt" not in fit.model.predicts:
        raise ModelError(f"figure needs a fit that predicts lr_opt and batch_opt, not model {fit.model.name!r}")
    if fit.model.name == "surface":
        _full_design(fit)
    c = fit.constants
    N_fix = float(N) if N is not None else float(np.sqrt(c["min_N"] * c["max_N"]))
    D_fix = float(D) if D is not None else float(np.sqrt(c["min_D"] * c["max_D"]))
    best = _empirical_optima(fit)
    col = _LAW[quantity][1]
    value = best[col].to_numpy(float)
    along_ridge = quantity == "lr_opt" and fit.model.name == "surface"
    if along_ridge:
        value = value * _ridge_factor(fit, best)
    exp_N, exp_D = _median(fit, f"{quantity}_exp_N"), _median(fit, f"{quantity}_exp_D")
    fig, axes = new_figure(ncols=2, width=5.0, height=3.8)
    axes = np.ravel(axes)
    for ax, axis, fixed_name, fixed in ((axes[0], "N", "D", D_fix), (axes[1], "D", "N", N_fix)):
        lo, hi = c[f"min_{axis}"], c[f"max_{axis}"]
        grid = np.geomspace(lo / 1.5, hi * extend, 60)
        targets = {axis: grid, fixed_name: fixed}
        pred = fit.predict(**targets)
        if fit.model.name == "surface":
            band(ax, grid, pred[quantity], color=COLORS[0], label="posterior median (surface), new setting",
                 cis=ci, label_bands=ax is axes[0])
        else:  # bootstrap confidence intervals of the law, not credible intervals for a new setting
            band(ax, grid, pred[quantity], color=COLORS[0], cis=ci, label=f"median ({fit.model.name}); bands: "
                 f"{' and '.join(f'{100 * q:.0f}%' for q in sorted(ci))} bootstrap intervals of the law")
        # empirical optima moved to the fixed value of the other axis along the posterior median exponent
        other_exp = exp_D if fixed_name == "D" else exp_N
        moved = value * (fixed / best[fixed_name].to_numpy(float)) ** other_exp
        what = "best run per setting, moved to the panel's fixed N or D\nalong the fitted exponents" + (
            ", and from its batch\nto the setting's B* along the fitted LR-batch ridge" if along_ridge else "")
        ax.scatter(best[axis], moved, s=22, color=COLORS[1], zorder=3, edgecolor="white", lw=0.5, label=what)
        ax.set_xscale("log")
        ax.set_xlim(grid[0], grid[-1])
        shade_extrapolation(ax, hi)
        name = "non-embedding parameters N" if axis == "N" else "training tokens D"
        label_axes(ax, name, _LAW[quantity][0], f"{_LAW[quantity][0].split(' $')[0]} vs {axis} at "
                   f"{fixed_name} = {_fmt_count(fixed)}")
        log_ticks(ax.xaxis)
        if quantity == "batch_opt":
            log_ticks(ax.yaxis)
    # one legend for both panels, below them: inside either panel it covers data or bands
    handles, names = axes[0].get_legend_handles_labels()
    for h, n in zip(*axes[1].get_legend_handles_labels()):
        if n not in names:
            handles.append(h)
            names.append(n)
    fig.legend(handles, names, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return fig


def _ridge_factor(fit, best) -> np.ndarray:
    """exp(x*_s - x_s(z_run)): moves each setting's best-run LR along the posterior-median ridge
    x_s(z) = x*_s + kappa1 (z - z*_s) + kappa2 (z - z*_s)^2 / 2 from its batch z_run to the setting's B*."""
    from scalinfer.models.surface import setting_values

    data, p = _data(fit), _setting_draws(fit)
    values = setting_values(p, data["n_s"], data["d_s"], _size_s(fit, data), xp=np)
    z_star = np.median(np.asarray(values["z_star"]), axis=0)
    k1, k2 = float(np.median(p["kappa1"])), float(np.median(p["kappa2"]))
    z_run = np.log(best["batch_tokens"].to_numpy(float)) - fit.constants["m_b"]
    return np.exp(-np.asarray(log_lr_opt_at_batch(z_run, 0.0, z_star[best["_s"].to_numpy(int)], k1, k2)))


def _surface_only(fit):
    if fit.model.name != "surface":
        raise ModelError(f"this figure needs a 'surface' fit, not {fit.model.name!r}")
    _full_design(fit)


def _full_design(fit):
    """The figures draw the whole surface (both valleys, both laws): a fixed-batch or fixed-LR fit has half."""
    from scalinfer.models.surface.design import design_of

    design = design_of(fit.constants)
    if design != "full":
        raise ModelError(f"this figure needs a surface fit of the full design; this one is {design!r} "
                         f"(one batch or one LR in the table): use predict for its answers")


def _setting_draws(fit, max_draws: int = _MAX_DRAWS):
    """Thinned posterior draws as the surface functions take them (scalars (n, 1), offsets (n, S))."""
    from scalinfer.models.surface import SCALARS, SETTING, SIZE, VALLEY_BY_BATCH

    sizes = list(SIZE) if fit.constants.get("size_scatter") else []  # each size's levels (n, M)
    scalars = list(SCALARS) + (list(VALLEY_BY_BATCH) if fit.constants.get("lr_valley_by_batch") else [])
    d = fit.draws(scalars + list(SETTING) + sizes)
    n = len(d["a0"])
    keep = np.linspace(0, n - 1, min(n, max_draws)).astype(int)
    p = {k: np.asarray(d[k])[keep][:, None] for k in scalars}
    p.update({k: np.asarray(d[k])[keep] for k in sizes})
    p.update({k: np.asarray(d[k])[keep] for k in SETTING})
    return p


def _size_s(fit, data: dict[str, np.ndarray]) -> np.ndarray | None:
    """Each setting's model size for a fit with size scatter, else None (the fit's constant says which)."""
    return data["size_s"] if fit.constants.get("size_scatter") else None


def _data(fit) -> dict[str, np.ndarray]:
    cd = fit.tree["constant_data"].to_dataset()
    # the model's data arrays: not the runs' columns, nor the constants (format 2: ``constants``; 1: ``const_NAME``)
    out = {k: cd[k].values for k in cd.data_vars if k != "constants" and not k.startswith(("run_", "const_"))}
    obs = fit.tree["observed_data"].to_dataset()
    out.update({k: obs[k].values for k in obs.data_vars})
    return out


def _setting_labels(fit) -> list[str]:
    from scalinfer.models.surface import settings_of

    _, settings = settings_of(fit.runs)
    # the group matters only where it separates settings of the same (N, D) (e.g. MoE configurations)
    show_group = "group" in settings.columns and settings.duplicated(["N", "D"]).any()
    labels = []
    for _, r in settings.iterrows():
        extra = f", {r['group']}" if show_group else ""
        labels.append(f"N={_fmt_count(r['N'])}, D={_fmt_count(r['D'])}{extra}")
    return labels


def valley_figure(fit, axis: str = "lr", ncols: int = 4, ci: tuple[float, ...] = (0.5, 0.9)):
    """Loss against LR (``axis="lr"``, at each setting's best batch) or against batch (``axis="batch"``, each
    batch at its best LR), one panel per setting, with posterior bands of the fitted valley."""
    from scalinfer.models.surface import setting_values, surface_terms

    _surface_only(fit)
    if axis not in ("lr", "batch"):
        raise ModelError(f"axis must be 'lr' or 'batch', not {axis!r}")
    c, data, p = fit.constants, _data(fit), _setting_draws(fit)
    n_s, d_s, size_s = data["n_s"], data["d_s"], _size_s(fit, data)
    S = len(n_s)
    labels = _setting_labels(fit)
    nrows = int(np.ceil(S / ncols))
    fig, axes = new_figure(ncols=min(ncols, S), nrows=nrows, width=3.2, height=2.6)
    axes = np.atleast_1d(axes).ravel()
    x_ok, z_ok, y_ok, s_ok = data["x_obs"], data["z_obs"], data["log_loss"], data["s_obs"]
    x_dv, z_dv, s_dv = data.get("x_cens", np.zeros(0)), data.get("z_cens", np.zeros(0)), data.get("s_cens", np.zeros(0, int))
    for s in range(S):
        ax = axes[s]
        mine = s_ok == s
        i_best = np.flatnonzero(mine)[np.argmin(y_ok[mine])]
        best_loss = float(np.exp(c["m_y"] + y_ok[i_best]))
        if axis == "lr":
            zb = z_ok[i_best]
            sel = mine & np.isclose(z_ok, zb)
            xs = np.linspace(min(x_ok[mine].min(), x_dv.min() if len(x_dv) else np.inf) - 0.2,
                             max(x_ok[mine].max(), x_dv.max() if len(x_dv) else -np.inf) + 0.2, 80)
            mu, _ = surface_terms(p, n_s, d_s, np.full(xs.shape, s), xs[None], np.full(xs.shape, zb)[None],
                                  size_s)
            grid, pts_x, pts_y = np.exp(c["m_lr"] + xs), np.exp(c["m_lr"] + x_ok[sel]), y_ok[sel]
            dv = (s_dv == s) & np.isclose(z_dv, zb)
            dv_x = np.exp(c["m_lr"] + x_dv[dv])
            xlabel, sub = "peak LR", f"batch {_fmt_count(np.exp(c['m_b'] + zb))} tok"
        else:
            zs = np.unique(z_ok[mine])
            env = np.array([y_ok[mine & np.isclose(z_ok, z)].min() for z in zs])
            grid_z = np.linspace(zs.min() - 0.2, zs.max() + 0.2, 80)
            # loss at the best LR of each batch: on the ridge, where the LR valley is zero
            v = {k: a[:, s:s + 1] for k, a in setting_values(p, n_s, d_s, size_s, xp=np).items()}
            ridge = log_lr_opt_at_batch(grid_z[None], v["x_star"], v["z_star"], v["kappa1"], p["kappa2"])
            mu, _ = surface_terms(p, n_s, d_s, np.full(grid_z.shape, s), ridge, grid_z[None], size_s)
            grid, pts_x, pts_y = np.exp(c["m_b"] + grid_z), np.exp(c["m_b"] + zs), env
            dv_x = np.zeros(0)
            xlabel, sub = "batch (tokens)", "each batch at its best LR"
        curves = np.exp(c["m_y"] + np.asarray(mu))
        band(ax, grid, curves, color=COLORS[0], label="posterior" if s == 0 else None, cis=ci)
        ax.scatter(pts_x, np.exp(c["m_y"] + pts_y), s=14, color=COLORS[1], zorder=3,
                   label="runs" if s == 0 else None)
        top = best_loss * 1.08
        if len(dv_x):
            ax.scatter(dv_x, np.full(dv_x.shape, top * 0.995), marker="x", s=20, color=COLORS[3], zorder=3,
                       label="diverged (censored)" if s == 0 else None)
        ax.set_ylim(best_loss * 0.995, top)
        label_axes(ax, xlabel, "loss (nats/token)", f"{labels[s]}\n{sub}", logx=True, logy=False)
        ax.title.set_fontsize(8)
    for ax in axes[S:]:
        ax.set_visible(False)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=len(names), fontsize=8)
    return fig


def ppc_figure(fit, seed: int = 0, max_points: int = 2000):
    """Posterior predictive check of the converged runs' losses: observed against predicted (median and 90%
    predictive interval) and the PIT histogram, with the empirical coverage of the 50% and 90% intervals."""
    from scalinfer.models.surface import surface_terms

    _surface_only(fit)
    c, data, p = fit.constants, _data(fit), _setting_draws(fit)
    mu, excess = surface_terms(p, data["n_s"], data["d_s"], data["s_obs"], data["x_obs"][None], data["z_obs"][None],
                               _size_s(fit, data))
    mu, excess = np.asarray(mu), np.asarray(excess)
    scale = p["sigma0"] + p["sigma1"] * excess
    rng = np.random.default_rng(seed)
    y_rep = mu + scale * rng.standard_t(np.broadcast_to(p["nu"], mu.shape))
    y = data["log_loss"]
    pit = (y_rep < y[None]).mean(axis=0)
    cover = {ci: float(np.mean(np.abs(pit - 0.5) <= ci / 2)) for ci in (0.5, 0.9)}
    med, lo, hi = (np.exp(c["m_y"] + q) for q in np.quantile(y_rep, [0.5, 0.05, 0.95], axis=0))
    obs = np.exp(c["m_y"] + y)
    keep = np.arange(len(y))
    if len(keep) > max_points:
        keep = np.sort(rng.choice(len(y), max_points, replace=False))
    fig, axes = new_figure(ncols=2, width=4.8, height=3.8)
    a0, a1 = np.ravel(axes)
    a0.errorbar(med[keep], obs[keep], xerr=np.abs(np.stack([med - lo, hi - med])[:, keep]), fmt="o", ms=2.5,
                color=COLORS[0], ecolor=COLORS[0], alpha=0.45, elinewidth=0.6, label="run (90% predictive)")
    lims = [min(obs.min(), lo.min()), max(obs.max(), hi.max())]
    a0.plot(lims, lims, color="black", lw=0.8, label="observed = predicted")
    # linear axes: losses span well under a decade, where log axes only give "2.2 x 10^0" tick labels
    label_axes(a0, "predicted loss (nats/token)", "observed loss (nats/token)", "posterior predictive check",
               logx=False, logy=False)
    a0.legend(loc="upper left")
    heights, _, _ = a1.hist(pit, bins=20, range=(0, 1), color=COLORS[0], alpha=0.7, density=True,
                            label="converged runs")
    a1.axhline(1.0, color="black", lw=0.8, label="calibrated (uniform)")
    label_axes(a1, "P(predicted < observed)", "density", "PIT: coverage 50% -> "
               f"{100 * cover[0.5]:.0f}%, 90% -> {100 * cover[0.9]:.0f}%", logx=False, logy=False)
    a1.set_ylim(0, 1.4 * max(float(np.max(heights)), 1.0))  # headroom: the legend sits above the bars
    a1.legend(loc="upper center", ncols=2)
    return fig


KINDS = {
    "lr-law": lambda fit, **kw: law_figure(fit, "lr_opt", **kw),
    "batch-law": lambda fit, **kw: law_figure(fit, "batch_opt", **kw),
    "lr-valley": lambda fit, **kw: valley_figure(fit, "lr", **kw),
    "batch-valley": lambda fit, **kw: valley_figure(fit, "batch", **kw),
    "ppc": ppc_figure,
}
