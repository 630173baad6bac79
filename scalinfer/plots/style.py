"""One look for every figure: sizes, colours, credible bands, log axes with units."""

from __future__ import annotations

import numpy as np

__all__ = ["new_figure", "band", "COLORS", "EXTRAPOLATION_COLOR", "shade_extrapolation", "label_axes", "log_ticks",
           "format_count"]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
EXTRAPOLATION_COLOR = "#f2f2f2"
RC = {"figure.dpi": 110, "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 8,
      "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.25}


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.6, **kw):
    """A figure and axes in the project style."""
    import matplotlib
    import matplotlib.pyplot as plt

    with plt.rc_context(RC):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                                 layout="constrained", **kw)
        # pyplot picks its backend on the first figure; Jupyter's inline backend then turns interactive mode
        # on, which rc_context would undo on exit: every later figure of the session would go undisplayed
        interactive = matplotlib.is_interactive()
    matplotlib.interactive(interactive)
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


def format_count(x: float, unit: str = "") -> str:
    """A count in a few characters: 2.1e8 -> "210M", 5.69e10 -> "56.9B", 128 -> "128"."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if x >= div:
            return f"{x / div:.3g}{suffix}{unit}"
    return f"{x:.3g}{unit}"


def log_ticks(axis, fmt=None) -> None:
    """Short tick labels on a log axis: "200M", "1B", "50K" for counts (parameters, tokens, batch sizes),
    "0.002" below 1000 (learning rates); `fmt` (value -> str) overrides.

    Ticks at 1, 2 and 5 x 10^k when the axis spans under ~2.5 decades (matplotlib's default labels the minor
    ticks there as "3 x 10^8", which overlap), at the decades only beyond; call it once the limits are set.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fmt = fmt or (lambda v: format_count(v) if v >= 1000 else f"{v:g}")
    lo, hi = sorted(axis.get_view_interval())
    span = np.log10(hi / lo) if lo > 0 and hi > lo else 10.0
    subs = (1.0, 2.0, 5.0) if span < 2.5 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v) if v > 0 else ""))
    axis.set_minor_locator(LogLocator(base=10, subs=np.arange(2, 10), numticks=12))
    axis.set_minor_formatter(NullFormatter())
