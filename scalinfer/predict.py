"""Posterior answers at a target scale: draws, credible intervals and the extrapolation distance."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from scalinfer.quantities import Quantity, entries

__all__ = ["Prediction", "interval"]


def interval(draws: np.ndarray, ci: float = 0.9, axis: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(median, lo, hi) of the equal-tailed `ci` interval over `axis` (NaN draws propagate as NaN). Infinite
    draws (a target out of some draws' reach) count as the largest (smallest) values: a quantile between a
    finite draw and an infinite one is infinite (NumPy's interpolation gives NaN there: inf - inf).

    The quantiles are NumPy's default (``method="linear"``: at position q (n - 1) of the sorted draws, linear
    between its neighbours), computed from one sort along a contiguous axis: `numpy.quantile` partitions
    around each requested position in turn, three times slower on a grid of targets."""
    draws = np.asarray(draws, float)
    n = draws.shape[axis]
    if n == 0:
        raise ValueError("interval: no draws")
    s = np.sort(np.moveaxis(draws, axis, -1), axis=-1)  # a sorted copy, contiguous along the draws
    nan = np.isnan(s[..., -1])  # NumPy sorts NaN last
    out = []
    for q in (0.5, (1 - ci) / 2, (1 + ci) / 2):
        pos = (n - 1) * q
        i = min(int(np.floor(pos)), n - 1)
        g = pos - i
        lower, higher = s[..., i], s[..., min(i + 1, n - 1)]
        with np.errstate(invalid="ignore"):  # inf - inf: resolved below
            diff = higher - lower
            v = higher - diff * (1 - g) if g >= 0.5 else lower + diff * g  # NumPy's _lerp, for equal results
        v = np.where(np.isnan(v) & ~nan, np.where(np.isneginf(lower), lower, higher), v)
        out.append(np.where(nan, np.nan, v)[()])
    return out[0], out[1], out[2]


def _fmt(v: Any) -> str:
    """A number (or nested list of them) as text: 4 significant digits (inf and nan as such), None as nan."""
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return "nan" if v is None else f"{v:.4g}"


def _not_finite(draws) -> str:
    """How many of a quantity's draws (at one target) are not finite, in words."""
    if draws is None:
        return "a draw is not finite"
    d = np.asarray(draws, float)
    return f"{int(np.sum(~np.isfinite(d)))} of {d.size} draws not finite"


def _jsonable(x: Any) -> Any:
    x = np.asarray(x)
    if x.ndim == 0:
        v = float(x)
        return v if np.isfinite(v) else None
    return [_jsonable(v) for v in x]


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Posterior predictions at one target or a grid of targets.

    Attributes
    ----------
    draws : quantity -> array (n_draws, *target shape) of posterior draws (units in `units`).
    units : quantity -> unit string.
    targets : the target arguments as given (e.g. ``{"N": 1e9, "D": 2e10}``).
    extrapolation : e.g. ``{"N_ratio": ..., "D_ratio": ...}``: target over the largest fitted value.
    ci : the credible mass of the intervals (equal-tailed).
    warnings : what a reader must know before trusting the answer: the fit's diagnostics (R-hat, ESS,
        divergences), the answer's own checks (`scalinfer.inference.checks.answer_warnings`: far
        extrapolation, an optimum outside the range tried, absurd values) and the model's.
    model : the name of the model that answered; it says what each quantity is (`scalinfer.quantities`: an old
        name such as ``batch_opt`` is an alias, whose new name is reported beside it and also looked up here).
    prior_sensitivity : quantity -> ``{"prior", "likelihood", "most", "most_label", "most_prior", "diagnosis"}``, the
        power-scaling sensitivity of its draws to the joint prior and to the likelihood, the prior site that moves
        it most, and whether the answer is prior-dominated (`scalinfer.inference.sensitivity.prior_sensitivity`);
        a string where it could not be computed (why), None where it was not asked for.
    intervals : quantity -> (median, lo, hi) at `ci`, where the caller has computed them already (`Fit.predict`
        does, for the answer's warnings): `interval` returns them instead of sorting the draws again.
    """

    draws: dict[str, np.ndarray]
    units: dict[str, str]
    targets: dict[str, Any]
    extrapolation: dict[str, Any]
    ci: float = 0.9
    warnings: tuple[str, ...] = ()
    model: str | None = None
    prior_sensitivity: dict[str, dict[str, Any]] | str | None = None
    intervals: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = dataclasses.field(
        default=None, repr=False, compare=False)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.draws:  # a new name whose old one the model still reports (an alias)
            old = [k for k, q in entries(self.draws, self.model) if q.alias_of == name]
            if old:
                return self.draws[old[0]]
        return self.draws[name]

    def interval(self, name: str, ci: float | None = None):
        """(median, lo, hi) of quantity `name`."""
        if (ci is None or ci == self.ci) and self.intervals and name in self.intervals:
            return self.intervals[name]
        return interval(self[name], self.ci if ci is None else ci)

    def quantities(self) -> list[tuple[str, Quantity]]:
        """(name, `Quantity`) of each reported quantity, an alias followed by its new name."""
        out = []
        for name, q in entries(self.draws, self.model):
            if not q.unit and self.units.get(name):
                q = dataclasses.replace(q, unit=self.units[name])
            out.append((name, q))
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer: one ``{"median", "lo", "hi", "unit", "definition"}`` per quantity (an alias also
        ``"alias_of"``), ``extrapolation``, ``ci``, ``targets``, ``warnings``, ``prior_sensitivity`` (see the
        attribute: ``{"unavailable": why}`` where it could not be computed, absent where it was not asked for)."""
        out: dict[str, Any] = {}
        for name, q in self.quantities():
            med, lo, hi = self.interval(name)
            out[name] = {"median": _jsonable(med), "lo": _jsonable(lo), "hi": _jsonable(hi), **q.entry()}
        out["extrapolation"] = {k: _jsonable(v) for k, v in self.extrapolation.items()}
        out["ci"] = self.ci
        out["targets"] = {k: _jsonable(v) for k, v in self.targets.items() if v is not None}
        out["warnings"] = list(self.warnings)
        if isinstance(self.prior_sensitivity, dict):
            out["prior_sensitivity"] = {
                k: {f: np.asarray(v).tolist() if f in ("most", "most_label", "diagnosis") else _jsonable(v)
                    for f, v in s.items()}
                for k, s in self.prior_sensitivity.items()}
        elif self.prior_sensitivity is not None:
            out["prior_sensitivity"] = {"unavailable": self.prior_sensitivity}
        return out

    def to_text(self) -> str:
        """The answer as text: a line per quantity (median [lo, hi] unit: definition), the extrapolation and the
        warnings (what ``scalinfer predict`` prints)."""
        d = self.to_dict()
        lines = []
        for name, q in self.quantities():
            med, lo, hi = (np.asarray(a, float).tolist() for a in self.interval(name))  # inf stays inf (JSON: null)
            lines.append(f"{name:>18}: {_fmt(med)}  [{_fmt(lo)}, {_fmt(hi)}]  {q.unit}"
                         + (f"  ({q.definition})" if q.definition else ""))
        lines.append(f"{'extrapolation':>18}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in d["extrapolation"].items()))
        ps = d.get("prior_sensitivity")
        if ps and "unavailable" in ps:
            lines.append(f"{'prior sensitivity':>18}: unavailable ({ps['unavailable']})")
        elif ps:  # one target: a value per quantity (a grid's are in to_dict)
            lines.append(f"{'prior sensitivity':>18}: " + "; ".join(
                f"{k} unknown ({_not_finite(self.draws.get(k))})" if s["most"] is None else
                f"{k} {_fmt(s['prior'])} (likelihood {_fmt(s['likelihood'])}, most {s['most']})"
                for k, s in ps.items() if not isinstance(s["most"], list)))
        lines.extend(f"warning: {w}" for w in d["warnings"])
        return "\n".join(lines)

    def to_frame(self) -> pd.DataFrame:
        """One row per target point: the targets, then median/lo/hi of each quantity."""
        shapes = [np.shape(v)[1:] for v in self.draws.values()]
        shape = np.broadcast_shapes(*shapes) if shapes else ()
        cols: dict[str, np.ndarray] = {}
        for k, v in self.targets.items():
            if v is not None:
                cols[k] = np.broadcast_to(np.asarray(v, float), shape).ravel()
        for k, v in self.extrapolation.items():
            cols[k] = np.broadcast_to(np.asarray(v, float), shape).ravel()
        for name in self.draws:
            med, lo, hi = self.interval(name)
            for tag, arr in (("median", med), ("lo", lo), ("hi", hi)):
                cols[f"{name}_{tag}"] = np.broadcast_to(arr, shape).ravel()
        return pd.DataFrame(cols)
