"""What the reader of an answer must be told: the README's advice ("How to read an answer") as checks.

`check_targets` refuses targets no model can take (a typed one-line `ModelError`); `answer_warnings` says, in
one sentence each (what, and what to do), when an answer at valid targets should not be taken at face value.
Every model gets them from `scalinfer.inference.fit.Fit.predict`, beside the fit's own diagnostics
(`Fit.warnings`: R-hat, ESS, divergences) and the model's `predict_warnings`:

- a target beyond `EXTRAPOLATION_MAX` (10x) the largest fitted N or D (chinchilla's compute-optimal N_opt,
  D_opt at a budget C count as its targets), or an N below the smallest fitted size;
- an optimum (``lr_opt``, ``lr_opt_at_batch``, ``batch_opt``) whose median lies outside or at the edge of the
  range tried at the nearest fitted size, or whose interval reaches beyond it (the ranges are constants that
  `prepare` records, `scalinfer.models.base.tried_ranges`; a fit without them skips this check);
- a batch below one sequence (the table's ``seq_len``, when it has one) or above the run's whole D;
- a peak LR above 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scalinfer.errors import ModelError
from scalinfer.models.base import tried_at
from scalinfer.predict import interval

__all__ = ["EXTRAPOLATION_MAX", "check_targets", "answer_warnings"]

#: beyond this ratio of a target to the largest fitted value, the answer rests on the law's form, not the data
EXTRAPOLATION_MAX = 10.0
#: a target N within this relative distance of the smallest fitted N is that size, not below it
_SAME_N = 0.005
#: the optima checked against the ranges tried: quantity -> (swept quantity, its name in a sentence, unit)
_OPTIMA = {"lr_opt": ("lr", "LR", "LRs", ""), "lr_opt_at_batch": ("lr", "LR", "LRs", ""),
           "batch_opt": ("batch", "batch", "batches", " tokens")}


def check_targets(targets: dict[str, Any], names: tuple[str, ...]) -> None:
    """Raise `ModelError` unless every target in `names` that is given is a positive finite number (or an array
    of them): N, D, C, LRs, batches and target losses all are."""
    for name in names:
        v = targets.get(name)
        if v is None:
            continue
        try:
            a = np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            raise ModelError(f"target {name} must be a positive finite number, got {v!r}") from None
        bad = a[~(np.isfinite(a) & (a > 0))]
        if bad.size:
            raise ModelError(f"target {name} must be a positive finite number, got {bad.ravel()[0]:g}")


def answer_warnings(constants: dict[str, float], draws: dict[str, np.ndarray], targets: dict[str, Any],
                    ci: float = 0.9, intervals: dict[str, tuple] | None = None) -> list[str]:
    """The warnings of an answer: `draws` (quantity -> (n_draws, *shape)) at `targets` from a fit with
    `constants` (see the module docstring). A grid of targets gets one warning per kind, at its first point
    concerned, with the count of such points. `intervals`: quantity -> (median, lo, hi) at `ci` where already
    computed (`scalinfer.predict.interval`; on a grid, sorting the draws is most of the cost)."""
    shape = np.broadcast_shapes(*[np.shape(v)[1:] for v in draws.values()]) if draws else ()
    at = {t: _target(t, targets, draws, shape) for t in ("N", "D")}
    out = _extrapolation(constants, at)
    intervals = intervals or {q: interval(draws[q], ci) for q in draws}
    med = {q: tuple(np.broadcast_to(a, shape) for a in intervals[q]) for q in draws}  # (median, lo, hi)
    out += _absurd(constants, med, at)
    if at["N"] is not None:
        out += _edges(constants, med, at["N"], ci)
    return out


def _target(t: str, targets, draws, shape) -> np.ndarray | None:
    """Target `t` broadcast to the answer's shape: as given, else the median of a predicted ``<t>_opt``."""
    v = targets.get(t)
    if v is None and f"{t}_opt" in draws:
        v = np.median(draws[f"{t}_opt"], axis=0)
    return None if v is None else np.broadcast_to(np.asarray(v, float), shape)


def _first(mask: np.ndarray) -> tuple[int, str]:
    """Flat index of the first True and `_more` of the others."""
    idx = np.flatnonzero(mask)
    return int(idx[0]), _more(idx.size - 1)


def _more(others: int) -> str:
    """``" (and K other targets of the grid)"`` when K > 0."""
    return f" (and {others} other target{'s' if others > 1 else ''} of the grid)" if others else ""


def _extrapolation(c: dict[str, float], at: dict[str, np.ndarray | None]) -> list[str]:
    out = []
    for t in ("N", "D"):
        v = at[t]
        if v is None or f"max_{t}" not in c:
            continue
        ratio = v.ravel() / c[f"max_{t}"]
        far = ratio > EXTRAPOLATION_MAX
        if far.any():
            i, more = _first(far)
            out.append(f"{t} = {v.ravel()[i]:.3g} is {ratio[i]:.3g}x the largest {t} in the data ({c[f'max_{t}']:.3g})"
                       f"{more}: beyond ~{EXTRAPOLATION_MAX:g}x the answer rests on the law's form more than on the "
                       f"data; add runs nearer the target before relying on it")
    v = at["N"]
    if v is not None and "min_N" in c:
        below = v.ravel() < c["min_N"] * (1 - _SAME_N)
        if below.any():
            i, more = _first(below)
            out.append(f"N = {v.ravel()[i]:.3g} is below the smallest fitted size ({c['min_N']:.3g}){more}: that is "
                       "extrapolation too (downwards), not interpolation; add runs at that size if it matters")
    return out


def _absurd(c: dict[str, float], med: dict[str, tuple], at: dict[str, np.ndarray | None]) -> list[str]:
    out = []
    for q in ("lr_opt", "lr_opt_at_batch"):
        if q in med:
            m = np.asarray(med[q][0]).ravel()
            big = m > 1
            if big.any():
                i, more = _first(big)
                out.append(f"{q} = {m[i]:.3g}{more}: a peak LR above 1 trains no network; the law is far outside "
                           "its data here, so check the target (and the fit's extrapolation)")
    if "batch_opt" in med:
        m = np.asarray(med["batch_opt"][0]).ravel()
        seq = c.get("seq_len")
        if seq:
            small = m < seq
            if small.any():
                i, more = _first(small)
                out.append(f"batch_opt = {m[i]:.3g} tokens is less than one sequence ({seq:g} tokens){more}: no "
                           "run can use it; the batch law is extrapolated below its data, so take the smallest "
                           "batch you can run and add runs at small batches")
        if at["D"] is not None:
            D = at["D"].ravel()
            big = m > D
            if big.any():
                i, more = _first(big)
                out.append(f"batch_opt = {m[i]:.3g} tokens exceeds the whole run (D = {D[i]:.3g} tokens){more}: "
                           "less than one step; the batch law is far outside its data here, so check the target")
    return out


def _edges(c: dict[str, float], med: dict[str, tuple], N: np.ndarray, ci: float) -> list[str]:
    """An optimum outside, or at the edge of, the range tried at the nearest fitted size; or its interval beyond."""
    out = []
    Nf = N.ravel()
    nearest = {n: tried_at(c, n) for n in np.unique(Nf)}  # a grid repeats its N: one look-up per distinct N
    tried = [nearest[n] for n in Nf]
    if tried[0] is None:  # a fit written before the ranges were recorded
        return []
    for q, (swept, name, names, unit) in _OPTIMA.items():
        if q not in med:
            continue
        m, lo, hi = (a.ravel() for a in med[q])
        kinds: dict[str, list[int]] = {"outside": [], "edge": [], "interval": []}
        for i, t in enumerate(tried):
            if swept not in t:
                continue
            r_lo, e_lo, e_hi, r_hi = t[swept]
            if not (r_lo <= m[i] <= r_hi) or r_lo == r_hi:
                kinds["outside"].append(i)
            elif m[i] < e_lo or m[i] > e_hi:
                kinds["edge"].append(i)
            elif lo[i] < r_lo or hi[i] > r_hi:
                kinds["interval"].append(i)
        for kind, idx in kinds.items():
            if not idx:
                continue
            i = idx[0]
            more = _more(len(idx) - 1)
            t = tried[i]
            r_lo, _, _, r_hi = t[swept]
            where = f"at the nearest fitted size (N = {t['N']:.3g}: {r_lo:.3g} to {r_hi:.3g}{unit})"
            if r_lo == r_hi:
                out.append(f"{q} = {m[i]:.3g}{unit}{more}: only one {name} ({r_lo:.3g}{unit}) was tried at the "
                           f"nearest fitted size (N = {t['N']:.3g}), so no run brackets this optimum; it is the "
                           f"model's shape, not the data; sweep the {name} there before relying on it")
            elif kind == "outside":
                side = "below every" if m[i] < r_lo else "above every"
                out.append(f"{q} = {m[i]:.3g}{unit}{more} is {side} {name} tried {where}: no run brackets this "
                           f"optimum, it is extrapolated; extend the {name} sweep past it before relying on it")
            elif kind == "edge":
                side = "smallest" if m[i] < t[swept][1] else "largest"
                out.append(f"{q} = {m[i]:.3g}{unit}{more} is at the edge of the {names} tried {where}: its nearest "
                           f"run is the {side} {name} tried, so the valley is bracketed on one side only; extend "
                           f"the sweep beyond that edge")
            else:
                out.append(f"{q}'s {100 * ci:g}% interval [{lo[i]:.3g}, {hi[i]:.3g}]{unit}{more} reaches beyond "
                           f"the {names} tried {where}: that part of the answer rests on the model's shape outside "
                           "the runs")
    return out
