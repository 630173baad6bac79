"""Figures a researcher would put in a paper, from a `Fit`.

Each module below defines ``KINDS = {"kind-name": function}`` where ``function(fit, ax=None, **options)``
returns a matplotlib Figure. `plot(fit, kind, output)` dispatches and saves; notebooks call the functions
directly. Style (fonts, colours, bands) comes from `scalinfer.plots.style` so every figure looks alike.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Callable

from scalinfer.errors import ModelError

__all__ = ["plot", "kinds"]

_MODULES = ("scalinfer.plots.chinchilla", "scalinfer.plots.surface", "scalinfer.plots.batch",
            "scalinfer.plots.diagnostics")


def kinds() -> dict[str, Callable[..., Any]]:
    """All figure kinds: name -> function(fit, **options) -> Figure."""
    out: dict[str, Callable[..., Any]] = {}
    for name in _MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        out.update(mod.KINDS)
    return out


def plot(fit, kind: str, output: str | os.PathLike | None = None, **options: Any):
    """Draw figure `kind` of `fit`; with `output`, save it (atomically; format from the suffix) and return
    the path, else return the Figure."""
    import matplotlib

    if output is not None:
        matplotlib.use("Agg", force=False)
    available = kinds()
    if kind not in available:
        raise ModelError(f"unknown figure kind {kind!r} (one of: {', '.join(sorted(available))})")
    fig = available[kind](fit, **options)
    if output is None:
        return fig
    import matplotlib.pyplot as plt

    from scalinfer._io import atomic_write_with

    try:
        return atomic_write_with(output, lambda tmp: fig.savefig(tmp, dpi=150, bbox_inches="tight",
                                                                 format=Path(output).suffix[1:] or "png"))
    finally:
        plt.close(fig)
