"""One look for every figure: sizes, colours, credible bands, log axes with units."""

from __future__ import annotations

import numpy as np

__all__ = ["new_figure", "band", "COLORS", "EXTRAPOLATION_COLOR", "shade_extrapolation", "label_axes"]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
EXTRAPOLATION_COLOR = "#f2f2f2"
RC = {"figure.dpi": 110, "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 8,
      "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.25}


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.6, **kw):
    """A figure and axes in the project style."""
    import matplotlib.pyplot as plt

    with plt.rc_context(RC):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                                 layout="constrained", **kw)
    for ax in axes.ravel():
        for k, v in (("top", False), ("right", False)):
            ax.spines[k].set_visible(v)
        ax.grid(True, alpha=0.25, which="major")
    return fig, (axes[0, 0] if axes.size == 1 else axes)


def band(ax, x, draws, color=COLORS[0], label=None, cis=(0.5, 0.9), label_bands=False):
    """Posterior median line and nested equal-tailed credible bands of `draws` (n_draws, len(x)).
    The bands get legend entries only with ``label_bands=True`` (once per figure is enough)."""
    draws = np.asarray(draws)
    ax.plot(x, np.median(draws, axis=0), color=color, lw=1.8, label=label)
    for i, ci in enumerate(sorted(cis, reverse=True)):
        lo, hi = np.quantile(draws, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
        ax.fill_between(x, lo, hi, color=color, alpha=0.15 + 0.12 * i, lw=0,
                        label=f"{int(ci * 100)}% credible" if label_bands else None)


def shade_extrapolation(ax, x_max, label="extrapolation beyond the data"):
    """Grey the region beyond the largest fitted value (call after the axis scale and data are set)."""
    lo, hi = ax.get_xlim()
    if x_max < hi:
        ax.axvspan(x_max, hi, color=EXTRAPOLATION_COLOR, zorder=0, label=label)
        ax.set_xlim(lo, hi)


def label_axes(ax, x: str, y: str, title: str | None = None, logx: bool = True, logy: bool = True):
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if title:
        ax.set_title(title)
