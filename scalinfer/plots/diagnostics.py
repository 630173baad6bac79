"""Sampler diagnostics for any fit, drawn by ArviZ (arviz_plots): trace + marginal, and rank plots."""

from __future__ import annotations

__all__ = ["KINDS", "trace", "rank"]


def _scalars(fit, var_names):
    names = fit.scalar_names() if var_names is None else list(var_names)
    return names[:8]  # more than 8 panels is unreadable; pass var_names for others


def trace(fit, var_names=None):
    """Per-chain traces and marginal densities of the scalar parameters (``arviz_plots.plot_trace_dist``)."""
    import arviz_plots as azp

    pc = azp.plot_trace_dist(fit.tree, var_names=_scalars(fit, var_names), backend="matplotlib")
    return pc.viz["figure"].item()


def rank(fit, var_names=None):
    """Rank plots: with chains that mix, each chain's ranks are uniform (``arviz_plots.plot_rank``)."""
    import arviz_plots as azp

    pc = azp.plot_rank(fit.tree, var_names=_scalars(fit, var_names), backend="matplotlib")
    return pc.viz["figure"].item()


KINDS = {"trace": trace, "rank": rank}
