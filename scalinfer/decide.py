r"""From a posterior to a launch decision: the peak LR and batch to run at (N, D), and what they risk.

For the ``surface`` model (`scalinfer.models.surface`); which calibration run to buy next, to narrow the
posterior this decision rests on, is `scalinfer.suggest` (``Fit.suggest``, ``scalinfer suggest``). Each
posterior draw d gives, for a new setting at the target (N, D) (`scalinfer.models.surface.predict`: the laws
plus a new setting's own offsets), a loss surface
:math:`L_d(\eta, B)` over peak LR and batch (tokens per step) and its joint optimum
:math:`L^*_d = L_d(\eta^*_d, B^*_d)`. The *excess loss* of a choice is relative, per draw:

.. math::

    e_d(\eta, B) = L_d(\eta, B) / L^*_d - 1

What `recommend` reports (`Recommendation`; every quantity's unit and one-line definition in
`scalinfer.quantities`):

- ``recommended``: the point of lowest posterior *expected* loss,
  :math:`(\hat\eta, \hat B) = \arg\min E_d[L_d(\eta, B)]` over the allowed batches (all, one fixed batch, or
  those up to a maximum). Its ``value`` is the decision; ``median``, ``lo``, ``hi`` are the posterior of the best
  LR at :math:`\hat B` (`scalinfer.laws.lr.log_lr_opt_at_batch`, per draw) and of the best allowed batch
  (:math:`B^*_d`, clipped to the allowed range), i.e. where the truth's optimum lies. Where the LR valley is
  steeper above the optimum than below (delta_lr > 0; ~3.5x on Step Law), the expected-loss LR sits *below*
  the median best LR at its batch, the more so the wider the posterior: overshooting costs more than
  undershooting by the same factor.
- ``median_optimum``: the posterior of the joint optimum (lr_opt, batch_loss_opt, loss_opt), what ``predict``
  reports: not the point to run, because it ignores the valley's asymmetry.
- ``near_optimal``: the LR range at :math:`\hat B` and the batch range (each batch at its most surely
  near-optimal LR) where :math:`P_d(e_d \le x) \ge q`, i.e. where the q-quantile of the excess over draws is
  at most x; defaults x = 0.005 (0.5% relative excess loss) and q = 0.9. Edges are interpolated in log LR (log
  batch) on that quantile, which, unlike the probability, is continuous. Empty (``lo``, ``hi`` null, with a
  warning) where no point meets the promise: the posterior is then too wide for it; ``prob_max`` says how close
  the best point came.
- ``expected_excess``: :math:`e_d(\hat\eta, \hat B)`: ``mean`` (the expected excess), median and interval.
- ``batch_penalty``: :math:`\min_\eta e_d(\eta, \hat B)`, the excess that the batch alone costs against B*
  (the batch valley, the LR at its best for that batch); 0 at :math:`B^*_d`. With a fixed (hardware) batch this
  is the price of that batch.
- ``batch_largest_near_optimal`` (batch not fixed): the largest batch where some LR has
  :math:`P(e \le x) \ge q` (``value``: the throughput to buy without paying more than x), and each draw's
  largest batch within x of its optimum (median, lo, hi).
- ``choice`` (given ``lr``; at ``batch`` if given, else at :math:`\hat B`): the excess loss of the user's own
  point (mean, median, interval), its loss, and :math:`P(e \le x)`.

- ``divergence`` (where the fit has diverged runs): the risk that a run diverges, P(diverge | lr / lr*_B), at the
  recommended point and at the user's LR, with ``boundary`` the LR ratio of even odds (below).

Divergence risk. The surface model censors diverged runs (flagged, or a loss above ``divergence_ratio`` x its
setting's best converged loss: `scalinfer.models.surface.censor_levels`) but has no divergence boundary in LR.
The smallest honest one, fitted here to the fit's own runs: each run's distance above the best LR at its batch,
:math:`u = \log \eta - \log \eta^*_s(B)` (its setting's LR-batch ridge, per posterior draw), and

.. math::

    P(\text{diverge} \mid u) = \sigma(c_0 + c_1 u), \qquad c_0, c_1 \sim \mathcal N(0, 10^2)

a logistic in log(lr / lr*) fitted to diverged-vs-not by its mode (Newton, per draw of the ridge) and drawn from
the Gaussian at that mode (Laplace): the interval carries both the ridge's uncertainty and the logistic's own.
The boundary (P = 1/2) is :math:`\exp(-c_0 / c_1)` times the best LR at the batch. At the target, u is the
chosen LR over the target's best LR at that batch (a new setting's, as ``predict``). It assumes that divergence
depends on the LR only through its ratio to the best LR at the batch, the same at every N, D and batch (the
data rarely say otherwise: the diverged runs are few); where the fit has no diverged run it reports nothing
(``divergence`` null): no boundary can be placed, only a lower bound.

Numerics: the expected loss is minimised on a log-spaced grid (``n_lr`` x ``n_batch``, spanning the posterior's
optima widely), then on a fine grid around the coarse minimum (1/7 of a coarse step). The LR-axis quantities at
:math:`\hat B` come from a curve of ``4 n_lr`` LRs over the same span, so a per-draw minimum over it is within
:math:`C_+ h^2` of the exact one (h half a step in log LR: ~1e-6 relative on Step-Law-like fits). At most
``max_draws`` posterior draws are used (evenly thinned) to bound memory and time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from scalinfer.errors import ModelError
from scalinfer.predict import _fmt, _jsonable, interval
from scalinfer.quantities import describe
from scalinfer.runtime import float64

__all__ = ["recommend", "Recommendation", "Estimate", "Range", "divergence_model", "EXCESS", "PROB"]

#: default near-optimal promise: relative excess loss at most EXCESS with probability at least PROB
EXCESS, PROB = 0.005, 0.9

_NO_VALUE = object()


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A reported quantity: the posterior's median and ``ci`` interval of a per-draw value, with ``value`` where
    it is a decision (the number to act on) and ``mean`` where the expectation matters (excess losses). Unit and
    definition come from `scalinfer.quantities` under ``name``."""

    name: str
    median: float | None
    lo: float | None
    hi: float | None
    value: float | None = None
    mean: float | None = None
    decision: bool = False

    @classmethod
    def of(cls, name: str, draws: np.ndarray, ci: float, value: Any = _NO_VALUE, mean: bool = False) -> Estimate:
        """From per-draw values: median, lo, hi; ``mean`` if asked; ``value`` if given (a decision; None: none
        qualifies)."""
        med, lo, hi = interval(np.asarray(draws, float), ci)
        decision = value is not _NO_VALUE
        return cls(name, _jsonable(med), _jsonable(lo), _jsonable(hi),
                   value=_jsonable(value) if decision and value is not None else None,
                   mean=_jsonable(np.mean(draws)) if mean else None, decision=decision)

    def to_dict(self) -> dict[str, Any]:
        out = {"value": self.value} if self.decision else {}
        if self.mean is not None:
            out["mean"] = self.mean
        return {**out, "median": self.median, "lo": self.lo, "hi": self.hi, **describe(self.name).entry()}


@dataclasses.dataclass(frozen=True)
class Range:
    """A range of settings (``lo`` to ``hi``; both None when empty) and the highest probability any setting in
    the searched span reached (``prob_max``)."""

    name: str
    lo: float | None
    hi: float | None
    prob_max: float

    def to_dict(self) -> dict[str, Any]:
        return {"lo": self.lo, "hi": self.hi, "prob_max": self.prob_max, **describe(self.name).entry()}


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """What `recommend` returns; see the module docstring for each field's definition.

    ``curve`` holds, at the recommended batch, the LR grid (``lr``), the expected excess loss over it
    (``expected_excess``), its ``ci`` band (``lo``, ``hi``) and :math:`P(e \\le x)` (``prob``): for a figure."""

    recommended: dict[str, Estimate]
    median_optimum: dict[str, Estimate]
    near_optimal: dict[str, Range]
    expected_excess: Estimate
    batch_penalty: Estimate
    batch_largest_near_optimal: Estimate | None
    choice: dict[str, Any] | None
    targets: dict[str, Any]
    extrapolation: dict[str, Any]
    ci: float
    warnings: tuple[str, ...]
    curve: dict[str, np.ndarray] = dataclasses.field(repr=False, default_factory=dict)
    divergence: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer: ``recommended`` (``lr``, ``batch``), ``median_optimum``, ``near_optimal``,
        ``expected_excess``, ``batch_penalty``, ``batch_largest_near_optimal``, ``choice`` (None without a given
        LR), ``divergence`` (None without diverged runs in the fit), ``targets``, ``extrapolation``, ``ci``,
        ``warnings``."""
        t = self.targets
        out: dict[str, Any] = {
            "recommended": {k: v.to_dict() for k, v in self.recommended.items()},
            "median_optimum": {k: v.to_dict() for k, v in self.median_optimum.items()},
            "near_optimal": {"excess": t["excess"], "prob": t["prob"],
                             **{k: v.to_dict() for k, v in self.near_optimal.items()}},
            "expected_excess": self.expected_excess.to_dict(),
            "batch_penalty": self.batch_penalty.to_dict(),
            "batch_largest_near_optimal": (None if self.batch_largest_near_optimal is None
                                           else self.batch_largest_near_optimal.to_dict()),
            "choice": None,
        }
        if self.choice is not None:
            out["choice"] = {k: (v.to_dict() if isinstance(v, Estimate) else v) for k, v in self.choice.items()}
        out["divergence"] = (None if self.divergence is None else
                             {k: (v.to_dict() if isinstance(v, Estimate) else v) for k, v in self.divergence.items()})
        out["targets"] = {k: _jsonable(v) for k, v in t.items() if v is not None}
        out["extrapolation"] = {k: _jsonable(v) for k, v in self.extrapolation.items()}
        out["ci"] = self.ci
        out["warnings"] = list(self.warnings)
        return out

    def to_text(self) -> str:
        """The answer as text (what ``scalinfer recommend`` prints)."""
        d = self.to_dict()
        pct = lambda v: "nan" if v is None else f"{100 * v:.3g}%"  # noqa: E731
        rows: list[tuple[str, dict[str, Any], bool]] = [
            ("recommended lr", d["recommended"]["lr"], False), ("recommended batch", d["recommended"]["batch"], False),
            ("expected excess", d["expected_excess"], True), ("batch penalty", d["batch_penalty"], True)]
        rows += [(f"optimum {k}", v, False) for k, v in d["median_optimum"].items()]
        if d["batch_largest_near_optimal"] is not None:
            rows.append(("largest batch", d["batch_largest_near_optimal"], False))
        if d["choice"] is not None:
            rows += [("your excess", d["choice"]["excess"], True), ("your loss", d["choice"]["loss"], False)]
        if d["divergence"] is not None:
            rows += [(label, d["divergence"][k], k != "boundary") for k, label in (
                ("recommended", "divergence risk"), ("choice", "your div. risk"), ("boundary", "divergence at"))
                if k in d["divergence"]]
        lines = []
        for label, v, rel in rows:
            f = pct if rel else _fmt
            head = (f"{f(v['value'])}  " if "value" in v else "") + (f"(mean {f(v['mean'])})  " if "mean" in v else "")
            lines.append(f"{label:>18}: {head}median {f(v['median'])} [{f(v['lo'])}, {f(v['hi'])}]  {v['unit']}")
            lines.append(f"{'':>20}{v['definition']}")
        no = d["near_optimal"]
        for k in ("lr", "batch"):
            r = no[k]
            span = "none" if r["lo"] is None else f"{_fmt(r['lo'])} to {_fmt(r['hi'])}"
            lines.append(f"{'near-optimal ' + k:>18}: {span}  (P(excess <= {pct(no['excess'])}) >= {no['prob']:g}; "
                         f"best {r['prob_max']:.2f})")
        if d["choice"] is not None:
            c = d["choice"]
            lines.append(f"{'your choice':>18}: lr {_fmt(c['lr'])}, batch {_fmt(c['batch'])}: "
                         f"P(excess <= {pct(no['excess'])}) = {c['prob_near_optimal']:.2f}")
        lines.append(f"{'extrapolation':>18}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in d["extrapolation"].items()))
        lines.extend(f"warning: {w}" for w in d["warnings"])
        return "\n".join(lines)


def _positive(name: str, v: Any) -> float:
    """`v` as a positive finite float, else a `ModelError` naming the argument."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ModelError(f"recommend: {name} must be one positive number, got {v!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise ModelError(f"recommend: {name} must be a positive finite number, got {v!r}")
    return x


def _span(axis: np.ndarray, margin: np.ndarray) -> tuple[float | None, float | None]:
    """(lo, hi) of the points of `axis` (log-spaced) where ``margin >= 0``, each edge interpolated in log axis to
    the zero crossing with the next point outside; (None, None) when no point qualifies.

    The margin is x minus the q-quantile of the excess over draws: P(excess <= x) >= q exactly where it is >= 0,
    and, unlike the probability (a step function of the axis with few draws), it is continuous, so the
    interpolated edge is accurate to second order in the step."""
    idx = np.flatnonzero(margin >= 0)
    if not idx.size:
        return None, None
    la = np.log(axis)

    def edge(i: int, j: int) -> float:  # i inside, j outside (or past the grid's end)
        if j < 0 or j >= len(axis) or margin[i] == margin[j]:
            return float(axis[i])
        t = margin[i] / (margin[i] - margin[j])
        return float(np.exp(la[i] + t * (la[j] - la[i])))

    return edge(idx[0], idx[0] - 1), edge(idx[-1], idx[-1] + 1)


def _last_within(axis: np.ndarray, pen: np.ndarray, x: float) -> np.ndarray:
    """Per draw (rows of `pen`, columns along the log-spaced `axis`, each row's minimum its optimum): the largest
    axis value at or above that minimum with ``pen <= x``, interpolated in log axis to the crossing; inf where
    the row stays within x to the axis's end."""
    n, m = pen.shape
    start = np.argmin(pen, axis=1)
    above = (np.arange(m)[None, :] >= start[:, None]) & (pen > x)
    first_out = np.where(above.any(1), np.argmax(above, axis=1), m)
    out = np.full(n, np.inf)
    has = first_out < m
    j = first_out[has]
    i = np.maximum(j - 1, start[has])
    la = np.log(axis)
    p_in, p_out = pen[has, i], pen[has, j]
    t = np.where(p_out > p_in, (x - p_in) / np.where(p_out > p_in, p_out - p_in, 1.0), 0.0)
    out[has] = np.exp(la[i] + np.clip(t, 0.0, 1.0) * (la[j] - la[i]))
    return out


@float64
def recommend(fit, N: float, D: float, *, batch: float | None = None, max_batch: float | None = None,
              excess: float = EXCESS, prob: float = PROB, lr: float | None = None, ci: float = 0.9,
              n_lr: int = 121, n_batch: int = 41, max_draws: int = 2000, seed: int = 0) -> Recommendation:
    """The peak LR and batch to run at (N, D) from a ``surface`` fit, and what they risk (module docstring).

    Parameters
    ----------
    fit : a `scalinfer.Fit` of the ``surface`` model.
    N, D : the target: parameters (as fitted: non-embedding; total or active for MoE) and training tokens.
    batch : a fixed batch (tokens per step; hardware or a target throughput): only the LR is chosen, and
        ``batch_penalty`` is what that batch costs against B*.
    max_batch : the largest batch allowed (tokens per step). Exclusive with `batch`.
    excess, prob : the near-optimal promise: relative excess loss at most `excess` (default 0.005, i.e. 0.5%)
        with posterior probability at least `prob` (default 0.9).
    lr : a proposed peak LR to evaluate (at `batch` if given, else at the recommended batch): ``choice``.
    ci : credible mass of the equal-tailed intervals (default 0.9).
    n_lr, n_batch : the coarse search grid's points along log LR and log batch.
    max_draws : at most this many posterior draws (evenly thinned).
    seed : the new setting's offsets (as in ``predict``).
    """
    if fit.model.name != "surface":
        raise ModelError(f"recommend: needs a fit of the surface model (LR and batch); this is a fit of "
                         f"{fit.model.name!r}")
    if fit.constants.get("design", 0.0):  # scalinfer.models.surface.design: one batch or one LR in the table
        raise ModelError("recommend: needs a fit of the full surface (a table that varies both LR and batch); this "
                         "fit's table has one batch or one LR: use predict (lr_opt_at_batch or batch_opt_at_lr)")
    N, D = _positive("N", N), _positive("D", D)
    if batch is not None and max_batch is not None:
        raise ModelError("recommend: give a fixed batch or a maximum batch, not both")
    batch = None if batch is None else _positive("batch", batch)
    max_batch = None if max_batch is None else _positive("max_batch", max_batch)
    lr = None if lr is None else _positive("lr", lr)
    excess = _positive("excess", excess)
    if not 0 < prob < 1:
        raise ModelError(f"recommend: prob must be between 0 and 1, got {prob!r}")
    if not 0 < ci < 1:
        raise ModelError(f"recommend: ci must be between 0 and 1, got {ci!r}")
    if min(n_lr, n_batch) < 5 or max_draws < 1:
        raise ModelError(f"recommend: n_lr and n_batch must be at least 5 and max_draws at least 1, got "
                         f"{n_lr}, {n_batch}, {max_draws}")

    opt = fit.predict(N=N, D=D, ci=ci)  # the joint optimum, the fit's warnings and the extrapolation
    all_draws = fit.draws()
    n = len(next(iter(all_draws.values())))
    keep = np.unique(np.linspace(0, n - 1, min(n, max_draws)).round().astype(int))
    draws = {k: np.asarray(v)[keep] for k, v in all_draws.items()}
    c = fit.constants

    def at(lr_=None, batch_=None) -> dict[str, np.ndarray]:
        return fit.model.predict(draws, c, N=N, D=D, lr=lr_, batch=batch_, seed=seed)

    base = at()
    b_star, loss_star = base["batch_opt"], base["loss_opt"]
    warnings = list(opt.warnings)

    # ---- the search grid -------------------------------------------------------------------------------------
    if batch is not None:
        b_grid = np.array([batch])
    else:
        b_lo, b_hi = np.quantile(b_star, 0.005) / 8, np.quantile(b_star, 0.995) * 8
        if max_batch is not None:
            b_lo, b_hi = min(b_lo, max_batch / 64), max_batch
        b_grid = np.geomspace(b_lo, b_hi, n_batch)
    ridge = at(batch_=b_grid[[0, -1]])["lr_opt_at_batch"]
    lr_grid = np.geomspace(np.quantile(ridge.min(1), 0.005) / 4, np.quantile(ridge.max(1), 0.995) * 4, n_lr)

    def surface(lrs: np.ndarray, bs: np.ndarray):
        """Over lrs x bs: the expected loss, P(excess <= x) and the margin x - (q-quantile of the excess); and
        each draw's least excess at each batch."""
        mean_loss = np.empty((len(lrs), len(bs)))
        p_near, margin = np.empty_like(mean_loss), np.empty_like(mean_loss)
        pen = np.empty((len(keep), len(bs)))
        for j, b in enumerate(bs):
            e = at(lrs, b)["loss"]
            mean_loss[:, j] = e.mean(0)
            e = e / loss_star[:, None] - 1.0
            p_near[:, j] = (e <= excess).mean(0)
            margin[:, j] = excess - np.quantile(e, prob, axis=0)
            pen[:, j] = e.min(1)
        return mean_loss, p_near, margin, pen

    mean_loss, p_near, margin, pen = surface(lr_grid, b_grid)
    i0, j0 = np.unravel_index(np.argmin(mean_loss), mean_loss.shape)
    if i0 in (0, n_lr - 1):
        warnings.append(f"the expected-loss LR is at the edge of the searched range ({lr_grid[0]:.3g} to "
                        f"{lr_grid[-1]:.3g}): the posterior's valley is too wide or too flat to place it")
    fine_lr = np.geomspace(lr_grid[max(i0 - 1, 0)], lr_grid[min(i0 + 1, n_lr - 1)], 15)
    fine_b = (b_grid if batch is not None
              else np.geomspace(b_grid[max(j0 - 1, 0)], b_grid[min(j0 + 1, n_batch - 1)], 15))
    fine_loss = surface(fine_lr, fine_b)[0]
    i1, j1 = np.unravel_index(np.argmin(fine_loss), fine_loss.shape)
    lr_rec, b_rec = float(fine_lr[i1]), float(fine_b[j1])

    # ---- at the recommended point and batch ------------------------------------------------------------------
    rec = at(lr_rec, b_rec)
    e_rec = rec["loss"] / loss_star - 1.0
    curve_lr = np.geomspace(lr_grid[0], lr_grid[-1], 4 * n_lr)
    e_curve = at(curve_lr, b_rec)["loss"] / loss_star[:, None] - 1.0
    p_curve = (e_curve <= excess).mean(0)
    _, c_lo, c_hi = interval(e_curve, ci)
    curve = {"lr": curve_lr, "expected_excess": e_curve.mean(0), "lo": c_lo, "hi": c_hi, "prob": p_curve}
    m_curve = excess - np.quantile(e_curve, prob, axis=0)
    lr_range = Range("near_optimal_lr", *_span(curve_lr, m_curve), float(p_curve.max()))
    if lr_range.lo is None:
        warnings.append(f"no LR at batch {b_rec:.3g} has P(excess loss <= {100 * excess:.3g}%) >= {prob:g} (the "
                        f"best: {p_curve.max():.2f}): the posterior is too wide for that promise"
                        + (", or the batch too far from B*" if batch is not None or max_batch is not None else ""))
    elif m_curve[0] >= 0 or m_curve[-1] >= 0:
        warnings.append("the near-optimal LR range reaches the edge of the searched range: it is wider than shown")

    m_best = margin.max(0)  # at each batch, the LR most surely near-optimal
    b_range = Range("near_optimal_batch", *_span(b_grid, m_best), float(p_near.max()))
    largest = None
    if batch is None:
        if m_best[-1] >= 0 and max_batch is None:
            warnings.append(f"batches up to the searched range's end ({b_grid[-1]:.3g}) are near-optimal: the "
                            "largest near-optimal batch is larger than shown")
        per_draw = _last_within(b_grid, pen, excess)
        largest = Estimate.of("batch_largest_near_optimal", per_draw, ci, value=b_range.hi)
    b_allowed = b_star if batch is None else np.full_like(b_star, batch)
    if max_batch is not None:
        b_allowed = np.minimum(b_star, max_batch)

    choice = None
    if lr is not None:
        b_c = batch if batch is not None else b_rec
        out_c = at(lr, b_c)
        e_c = out_c["loss"] / loss_star - 1.0
        choice = {"lr": lr, "batch": b_c, "excess": Estimate.of("choice_excess", e_c, ci, mean=True),
                  "loss": Estimate.of("choice_loss", out_c["loss"], ci),
                  "prob_near_optimal": float(np.mean(e_c <= excess))}

    divergence = None
    fitted = divergence_model(fit, keep, seed)
    if fitted is not None:
        c0, c1 = fitted
        risk = lambda lr_, b_: _sigmoid(c0 + c1 * np.log(lr_ / at(batch_=b_)["lr_opt_at_batch"]))  # noqa: E731
        with np.errstate(over="ignore"):  # a draw whose slope c1 is near 0 has its boundary beyond any LR: inf
            boundary = np.exp(-c0 / c1)
        divergence = {"recommended": Estimate.of("divergence_risk", risk(lr_rec, b_rec), ci, mean=True),
                      "boundary": Estimate.of("divergence_boundary", boundary, ci),
                      "n_diverged": int(fit.constants.get("n_censored", 0))}
        if lr is not None:
            divergence["choice"] = Estimate.of("choice_divergence_risk", risk(lr, choice["batch"]), ci, mean=True)
        if divergence["n_diverged"] < 5:
            warnings.append(f"the divergence risk rests on {divergence['n_diverged']} diverged run(s): its boundary is "
                            "placed by little more than the runs' LR range (a wide interval)")

    return Recommendation(
        recommended={"lr": Estimate.of("recommended_lr", rec["lr_opt_at_batch"], ci, value=lr_rec),
                     "batch": Estimate.of("recommended_batch", b_allowed, ci, value=b_rec)},
        median_optimum={"lr": Estimate.of("lr_opt", opt["lr_opt"], ci),
                        "batch": Estimate.of("batch_loss_opt", opt["batch_opt"], ci),
                        "loss": Estimate.of("loss_opt", opt["loss_opt"], ci)},
        near_optimal={"lr": lr_range, "batch": b_range},
        expected_excess=Estimate.of("expected_excess", e_rec, ci, mean=True),
        batch_penalty=Estimate.of("batch_penalty", np.minimum(e_curve.min(1), e_rec), ci, mean=True),
        batch_largest_near_optimal=largest, choice=choice,
        targets={"N": N, "D": D, "batch": batch, "max_batch": max_batch, "lr": lr, "excess": excess, "prob": prob},
        extrapolation=dict(opt.extrapolation), ci=ci, warnings=tuple(warnings), curve=curve, divergence=divergence)


def _sigmoid(t):
    return 0.5 * (1.0 + np.tanh(0.5 * t))


def divergence_model(fit, keep: np.ndarray | None = None, seed: int = 0, prior_sd: float = 10.0,
                     iters: int = 30) -> tuple[np.ndarray, np.ndarray] | None:
    """Per posterior draw, (c0, c1) of P(diverge | u) = sigmoid(c0 + c1 u), u = log(lr / lr*_s(B)) of each run of
    the fit (module docstring: the mode given that draw's ridge, by Newton, then one draw from the Laplace
    Gaussian there); None where the fit has no diverged run. `keep`: the draws to use (default all)."""
    from scalinfer.laws.lr import log_lr_opt_at_batch
    from scalinfer.models.surface.design import design_of, fill_left_out
    from scalinfer.models.surface.loss import setting_values

    cd = fit.tree["constant_data"]
    if "x_cens" not in cd or cd["x_cens"].size == 0:
        return None
    c = fit.constants
    draws = fit.draws()
    if keep is not None:
        draws = {k: np.asarray(v)[keep] for k, v in draws.items()}
    a = {k: np.asarray(cd[k]) for k in ("n_s", "d_s", "s_obs", "x_obs", "z_obs", "s_cens", "x_cens", "z_cens")}
    size_s = np.asarray(cd["size_s"]).astype(int) if c.get("size_scatter") else None
    p = {k: (np.asarray(v)[:, None] if np.ndim(v) == 1 else np.asarray(v)) for k, v in draws.items()}
    n = len(next(iter(p.values())))  # a reduced design's (one batch or one LR) left-out sites at their values there
    p = fill_left_out(p, design_of(c), np.zeros((n, 1)), np.zeros((n, len(a["n_s"]))),
                      np.zeros((n, int(c.get("n_sizes", 0)))))
    v = {k: np.asarray(w) for k, w in setting_values(p, a["n_s"], a["d_s"], size_s, xp=np).items()}
    s_all = np.concatenate([a["s_obs"], a["s_cens"]]).astype(int)
    x = np.concatenate([a["x_obs"], a["x_cens"]])
    z = np.concatenate([a["z_obs"], a["z_cens"]])
    y = np.concatenate([np.zeros(len(a["x_obs"])), np.ones(len(a["x_cens"]))])
    ridge = np.asarray(log_lr_opt_at_batch(z[None, :], v["x_star"][:, s_all], v["z_star"][:, s_all],
                                           v["kappa1"][:, s_all], p["kappa2"]))
    u = x[None, :] - ridge  # (draws, runs)
    n = u.shape[0]
    X = np.stack([np.ones_like(u), u], axis=-1)  # (draws, runs, 2)
    coef = np.zeros((n, 2))
    ridge_pen = np.eye(2) / prior_sd**2
    for _ in range(iters):  # Newton on the penalised log likelihood, every draw at once
        pr = _sigmoid(np.einsum("drk,dk->dr", X, coef))
        grad = np.einsum("drk,dr->dk", X, y - pr) - coef / prior_sd**2
        H = np.einsum("drk,dr,drl->dkl", X, pr * (1 - pr), X) + ridge_pen
        coef = coef + np.linalg.solve(H, grad[..., None])[..., 0]
    pr = _sigmoid(np.einsum("drk,dk->dr", X, coef))
    H = np.einsum("drk,dr,drl->dkl", X, pr * (1 - pr), X) + ridge_pen
    L = np.linalg.cholesky(np.linalg.inv(H))
    eps = np.random.default_rng([seed, 23]).standard_normal((n, 2))
    coef = coef + np.einsum("dkl,dl->dk", L, eps)
    return coef[:, 0], coef[:, 1]
