"""Real-data backtest: fit the sizes up to N_k, predict every larger size, on every published LR sweep at three or
more model sizes; score the ``surface`` model beside the classic pipeline and the peers' formulas.

Datasets (`DATASETS`; read in place from ``../shared/datasets/`` and ``data/calibration/``):

====================  ==========================================================================================
steplaw-dense         Step Law's dense grid (5 sizes, 214.7M-1.07B; 17 (N, D) settings, ~12 LRs x 10 batches)
steplaw-moe-total     Step Law's MoE grid by total non-embedding N (4 configurations, 3 distinct N 0.3% apart)
steplaw-moe-active    the same runs by active N (4 sizes, 188M-1.24B)
misfitting            (Mis)Fitting (Li et al. 2025): 11 sizes, 12M-1.0B, one batch (1,048,576 tokens), 3-4 LRs
calibration           the project's own sweep (``data/calibration/runs.jsonl``), its 4 MoE sizes (the one dense
                      size is another architecture with a single batch, left out)
====================  ==========================================================================================

Folds. For each dataset with M sizes N_1 < ... < N_M and each k from ``--min-sizes`` (default 2: one size
leaves the law's N slope to the prior alone) to M - 1: fit the runs with N <= N_k, then score every setting
(N, D, group) with N > N_k. A setting's *extrapolation ratio* is N / N_k; scores are reported by ratio
(<= 2x, 2-4x, 4-10x, > 10x) and by dataset. The unit counted (``n``) is a (fold, held-out setting) pair: a
setting is scored once per fold that holds it out.

The truth at a held-out setting is its grid of cells (`_grid.cells`: one (LR, batch) point, repeated runs
averaged) and its *best cell*, the argmin of final loss over LR for a fixed-batch grid (one batch, as in
(Mis)Fitting) and over (LR, batch) otherwise.

Ties and flat valleys. A grid's best cell is a noisy argmin on a coarse grid: cells whose loss is within
``--tie-tol`` (default 0.25%, Step Law's own "near-optimal" band; the calibration sweep's re-run differed by
up to 0.4%) of the best are the *near-best* set. Intervals are equal-tailed.

A coarse grid. A tried value stands for the stretch of values nearer to it (in log) than to any other tried
value: its *cell*, between the geometric midpoints to its neighbours, open-ended on the grid's edge (the
tried LRs at the best cell's batch for an LR; the tried batches at the best cell's LR for a batch). An interval
*holds* a cell when it overlaps the cell, i.e. when the interval widened out to the boundaries of the cells of
its two ends holds the cell's value: the grid cannot resolve a finer answer, and a point rule cannot be met
by a calibrated model (a 90% interval lying between two tried LRs 2x apart holds no tried LR, wherever the
optimum is). The widened interval's posterior mass, ``nominal_90`` / ``nominal_50`` (>= 0.9 / 0.5, the more
so the coarser the grid beside the interval), is what a calibrated model's hit rate should match, so the
tables print it beside the coverage. An interval *hits* when it holds a near-best cell (``coverage_90`` /
``coverage_50``), *strictly* when it holds the best cell (``coverage_90_strict``), and, the point rule of the
first runs (before 2026-12-02), when the interval itself holds a near-best cell's value (``coverage_90_point``
/ ``coverage_50_point``).

Optima on the grid's edge. A best cell whose LR is the lowest or highest tried at its batch, or (grids of
several batches) whose batch is the lowest or highest tried at its LR, is flagged ``edge``: the grid does not
bracket the optimum there, so the true optimum may lie outside it. Edge settings are counted in ``n_edge`` and
the coverage of the others is reported separately (``coverage_90_interior``).

What is scored, per method and held-out setting:

- ``lr_opt`` / ``batch_opt``: the 90% and 50% intervals of the optimal LR and batch. On a fixed-batch grid
  the LR scored is the best LR *at the grid's batch* (``surface``: ``lr_opt_at_batch``; ``classic``: its law,
  fit to vertices at that batch) and there is no batch to score. On two-dimensional grids ``surface`` also
  reports ``lr_opt_at_batch`` at the best cell's batch (eta* moves with the batch: the like-for-like LR).
- ``log_score``: the natural log of the posterior predictive probability of the observed best cell. For
  ``surface``: per posterior draw, the grid's log losses for a new setting at (N, D) plus the model's own
  run-to-run noise (`_grid.winner_draws`), argmin per draw. For ``classic`` (no noise model): per bootstrap
  replicate, the cell nearest in (log LR, log batch) to the replicate's (lr_opt, batch_opt). Probabilities
  are counts smoothed by 1/2 per cell, (count + 1/2) / (draws + cells / 2), so a winner no draw chose costs a
  finite amount (a draw whose simulated losses overflow is left out). ``log_score_near`` is the log of the
  mass on the near-best set (the flat-valley version); ``log_score_uniform`` is log(1 / cells), what a guess
  that knows nothing scores.
- ``coverage_90_pit`` / ``coverage_50_pit`` and ``pit_hist``: calibration of *which tried LR (batch) wins*, the
  quantity the grid measures, with its run-to-run noise, ties and edges included. The posterior predictive
  distribution of the winning cell (the draws of ``log_score``) gives a CDF F over the tried LRs (batches: the
  winner's value, ordered); the observed winner's randomized PIT is uniform on [F(best-), F(best)] (Czado,
  Gneiting and Held 2009, for discrete outcomes), so for a calibrated model it is uniform on [0, 1] and the
  share of it inside the central c band, [(1 - c) / 2, (1 + c) / 2], averaged over settings, estimates the
  coverage at level c without the coarse grid's bias either way (the point rule's low, the cell rule's high).
  ``pit_hist``: its expected histogram over 10 equal bins (counts; flat when calibrated, U-shaped when the
  intervals are too narrow, peaked when too wide).
- ``width_90`` / ``width_50``: the median width of the intervals in decades, log10(hi / lo): coverage means
  little without it (an interval that spans the grid holds every cell).
- ``regret``: 100 (loss of the cell nearest the recommended point / the best cell's loss - 1), in %. The
  recommended point is the posterior median (lr_opt, batch_opt) (fixed batch: the median LR at the grid's
  batch); nearest in (log LR, log batch). ``point_hit``: that cell is near-best.
- Formulas (no intervals): Step Law's eta*(N, D), B*(D) at the dataset's N (total or active as fitted), and
  DeepSeek LLM's eta*(C), B*(C) at C = 6 N_active D (`scalinfer.laws.peers.compute_6nd`). On a fixed-batch grid
  only their LR is used, at the grid's batch. Scored by ``regret`` and ``point_hit``; Step Law's formula was
  fit to Step Law's dense grid, so its figures there are in-sample.

Each fit prints its wall time (compilation included), the largest R-hat over the scalar parameters (and
which), the divergent transitions and the draws per chain (``--samples``, and ``--samples`` more at a time up to
``--max-samples`` while R-hat > 1.01 or bulk ESS < 400, as `scalinfer.fit` does by default). (Mis)Fitting has one
batch: the surface fits it as an LR-only problem
(the ``fixed_batch`` design) and its LR is scored at the grid's batch; its fits mix slowly (benchmarks/README.md,
the reduced designs' section).

    .venv/bin/python benchmarks/backtest.py [--chains 2 --warmup 300 --samples 300 --max-samples 3000] [--datasets a,b]
        [--max-folds K] [--prior lofo|population|default] [--lr-valley-by-batch] [--rows] [--quick]

``--lr-valley-by-batch`` fits the surface with that option (the LR valley's curvature and asymmetry moving with
the batch; a fixed-batch dataset such as (Mis)Fitting has no batch to couple, so its folds are the same fits).

Prints the tables, then as its LAST line one JSON object: ``bins`` and ``datasets`` for the ``surface``
model, ``classic`` and ``formulas`` (by name) of the same shape, ``fits`` (one entry per fit) and
``settings`` (what ran).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from _grid import grid_truth_at, nearest_cell, winner_draws  # benchmarks/, the script's folder, is on sys.path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"
BINS = (("<=2x", 0.0, 2.0), ("2-4x", 2.0, 4.0), ("4-10x", 4.0, 10.0), (">10x", 10.0, math.inf))
LEVELS = (0.9, 0.5)
FORMULAS = ("step_law", "deepseek_llm")


@dataclass(frozen=True)
class Dataset:
    """A run table to backtest: where it is, how `scalinfer.load_runs` reads it, which rows."""

    name: str
    path: Path
    format: str | None
    n_kind: str = "total"
    where: str | None = None

    def load(self, N_max: float | None = None):
        import scalinfer

        where = [w for w in (self.where, None if N_max is None else f"N <= {float(N_max) * (1 + 1e-9)!r}") if w]
        return scalinfer.load_runs(self.path, format=self.format, n_kind=self.n_kind,
                                   where=" and ".join(f"({w})" for w in where) or None)


DATASETS = (
    Dataset("steplaw-dense", SHARED / "steplaw" / "dense_runs.csv", "steplaw"),
    Dataset("steplaw-moe-total", SHARED / "steplaw" / "moe_runs.csv", "steplaw-moe", n_kind="total"),
    Dataset("steplaw-moe-active", SHARED / "steplaw" / "moe_runs.csv", "steplaw-moe", n_kind="active"),
    Dataset("misfitting", SHARED / "misfitting_li2025", "misfitting"),
    Dataset("calibration", ROOT / "data" / "calibration" / "runs.jsonl", "jsonl", where="arch == 'moe-e8k2'"),
)

#: each dataset's family in `scalinfer.models.surface.population.FAMILIES` (Step Law's MoE runs by total and by
#: active N are one family)
DATASET_FAMILY = {"steplaw-dense": "steplaw-dense", "steplaw-moe-total": "steplaw-moe",
                  "steplaw-moe-active": "steplaw-moe", "misfitting": "misfitting", "calibration": "calibration"}
#: --prior: ``lofo`` (default) the population prior pooled without the scored dataset's family (#22: a family is
#: never scored by a prior fitted on it); ``population`` the package's default, which pooled Step Law and the
#: calibration sweep themselves; ``default`` the broad prior
PRIOR_CHOICES = ("lofo", "population", "default")


def given_priors_model(priors):
    """The surface model sampling from `priors` (a study's `Priors`, not a user option: the fit file records the
    option ``prior`` as "population" whatever `priors` are, so such a fit is not for saving)."""
    import dataclasses

    from scalinfer.models.surface import Surface

    @dataclasses.dataclass(frozen=True)
    class GivenPriors(Surface):
        priors: object = None

        def model_kwargs(self, data, constants):
            return {**super().model_kwargs(data, constants), "prior": self.priors}

        def options(self):
            return {k: v for k, v in super().options().items() if k != "priors"}

    return GivenPriors(priors=priors)


def surface_for(ds: Dataset, prior: str):
    """(model, fit options) of the surface fit scoring `ds` under `--prior` `prior` (`PRIOR_CHOICES`)."""
    if prior == "default":
        return "surface", {"prior": "default"}
    if prior == "population":
        return "surface", {}
    from scalinfer.models.surface.population import FAMILIES, LEFT_OUT, population_priors

    lofo, _ = population_priors(FAMILIES, exclude=(DATASET_FAMILY[ds.name], *LEFT_OUT))
    return given_priors_model(lofo), {}


# ---- the truth at a held-out setting ---------------------------------------------------------------------------
def setting_truth(full, N: float, D: float, group: str, tie_tol: float) -> dict:
    """`_grid.grid_truth_at` plus the near-best set, the edge flags and whether the grid has one batch."""
    t = grid_truth_at(full, N, D, group)
    g = t["grid"]
    near = g["loss"].to_numpy() <= t["best_loss"] * (1 + tie_tol)
    same_lr = np.isclose(g["lr"], t["best_lr"], rtol=1e-2)  # one LR of the grid logged to 3 or 4 digits
    lrs_at_b = g.loc[g["batch_tokens"] == t["best_batch"], "lr"]
    bs_at_lr = g.loc[same_lr, "batch_tokens"]
    fixed = g["batch_tokens"].nunique() == 1
    return {**t, "near": near, "fixed_batch": fixed, "n_cells": len(g),
            "edge_lr": bool(t["best_lr"] in (lrs_at_b.min(), lrs_at_b.max())),
            "edge_batch": bool(not fixed and t["best_batch"] in (bs_at_lr.min(), bs_at_lr.max()))}


def _hits(lo: float, hi: float, best: float, near_values: np.ndarray) -> tuple[bool, bool]:
    """(holds any near-best value, holds the best value)."""
    return bool(np.any((near_values >= lo) & (near_values <= hi))), bool(lo <= best <= hi)


def widen_to_cells(lo: float, hi: float, axis: np.ndarray) -> tuple[float, float]:
    """[lo, hi] widened out to the boundaries of the grid cells holding its ends: a tried value's cell runs from the
    geometric midpoint with the tried value below to the one with the value above (0 and inf on the edges)."""
    g = np.unique(np.asarray(axis, float))
    edges = np.concatenate([[0.0], np.sqrt(g[:-1] * g[1:]), [np.inf]])  # cell j is [edges[j], edges[j + 1]]
    i_lo = int(np.clip(np.searchsorted(edges, lo, side="right") - 1, 0, len(g) - 1))
    i_hi = int(np.clip(np.searchsorted(edges, hi, side="left") - 1, 0, len(g) - 1))
    return float(edges[i_lo]), float(edges[i_hi + 1])


PIT_BINS = 10


def winner_pit(values: np.ndarray, observed: float) -> dict:
    """The randomized PIT of the observed winner's value among the predictive draws of the winner's value
    (`values`, one per draw): its range [F(observed-), F(observed)], the share of it inside each level's central
    band (``pit_cov_<level>``) and its spread over `PIT_BINS` equal bins (``pit_bins``, summing to 1)."""
    v = np.asarray(values, float)
    lo = float(np.mean(v < observed * (1 - 1e-6)))
    hi = float(np.mean(v <= observed * (1 + 1e-6)))

    def share(a: float, b: float) -> float:
        if hi > lo:
            return max(0.0, min(hi, b) - max(lo, a)) / (hi - lo)
        return float(a <= lo <= b)

    out = {"pit": [lo, hi], **{f"pit_cov_{ci:g}": share((1 - ci) / 2, (1 + ci) / 2) for ci in LEVELS}}
    edges = np.linspace(0.0, 1.0, PIT_BINS + 1)
    bins = np.array([share(a, b) for a, b in zip(edges[:-1], edges[1:])])
    if hi <= lo:  # a point mass: the bin that holds it (the last one for 1.0)
        bins = np.zeros(PIT_BINS)
        bins[min(int(lo * PIT_BINS), PIT_BINS - 1)] = 1.0
    out["pit_bins"] = (bins / bins.sum()).tolist()
    return out


def _pit_scores(win: np.ndarray, t: dict) -> dict:
    """`winner_pit` of the winning LR (``lr_opt``) and, on grids of several batches, batch (``batch_opt``)."""
    g = t["grid"]
    out = {f"{k}_lr_opt": v for k, v in winner_pit(g["lr"].to_numpy(float)[win], t["best_lr"]).items()}
    if not t["fixed_batch"]:
        out.update({f"{k}_batch_opt": v for k, v in
                    winner_pit(g["batch_tokens"].to_numpy(float)[win], t["best_batch"]).items()})
    return out


def _log_scores(win: np.ndarray, t: dict) -> dict:
    """Log scores of winning-cell draws (positions into the grid's cells), smoothed by 1/2 per cell."""
    counts = np.bincount(win, minlength=t["n_cells"]).astype(float)
    p = (counts + 0.5) / (counts.sum() + 0.5 * t["n_cells"])
    best = int(np.argmin(t["grid"]["loss"].to_numpy()))
    return {"log_score": float(np.log(p[best])), "log_score_near": float(np.log(p[t["near"]].sum())),
            "log_score_uniform": float(-np.log(t["n_cells"]))}


def score_point(t: dict, lr: float, batch: float | None, tie_tol: float) -> dict:
    """Regret (%) of the cell nearest the point, and whether that cell is near-best. A fixed-batch grid is
    scored at its own batch."""
    g = t["grid"]
    b = float(g["batch_tokens"].iloc[0]) if t["fixed_batch"] or batch is None else batch
    i = nearest_cell(g, lr, b)
    r = 100.0 * (float(g.loc[i, "loss"]) / t["best_loss"] - 1.0)
    return {"regret": r, "point_hit": bool(r <= 100.0 * tie_tol + 1e-12), "point_lr": lr, "point_batch": b}


def score_intervals(t: dict, draws: dict) -> dict:
    """Coverage of the 90% / 50% intervals of each quantity's draws (name -> (n_draws,)), by the cell rule and the
    point rule (the module docstring), and the widened intervals' posterior mass."""
    g = t["grid"]
    near = g[t["near"]]
    near_at_b = near.loc[near["batch_tokens"] == t["best_batch"], "lr"].to_numpy()
    lr_axis = g.loc[g["batch_tokens"] == t["best_batch"], "lr"].to_numpy(float)
    b_axis = g.loc[np.isclose(g["lr"], t["best_lr"], rtol=1e-2), "batch_tokens"].to_numpy(float)
    truth = {"lr_opt": (t["best_lr"], near["lr"].to_numpy(), lr_axis),
             "lr_opt_at_batch": (t["best_lr"], near_at_b, lr_axis),
             "batch_opt": (t["best_batch"], near["batch_tokens"].to_numpy(), b_axis)}
    out = {}
    for name, v in draws.items():
        best, near_values, axis = truth[name]
        for ci in LEVELS:
            lo, hi = np.quantile(v, [(1 - ci) / 2, (1 + ci) / 2])
            wlo, whi = widen_to_cells(lo, hi, axis)
            out[f"{name}_{ci:g}"] = [float(lo), float(hi)]
            out[f"width_{ci:g}_{name}"] = float(np.log10(hi / lo))
            out[f"nominal_{ci:g}_{name}"] = float(np.mean((v >= wlo) & (v <= whi)))
            out[f"hit_{ci:g}_{name}"], out[f"hit_{ci:g}_strict_{name}"] = _hits(wlo, whi, best, near_values)
            out[f"hit_{ci:g}_point_{name}"] = _hits(lo, hi, best, near_values)[0]
    return out


# ---- the methods -------------------------------------------------------------------------------------------------
def score_surface(fit, t: dict, N: float, D: float, tie_tol: float, seed: int) -> dict:
    g = t["grid"]
    # one prediction at every cell: lr_opt and batch_opt are the same in each column (they depend on (N, D)),
    # lr_opt_at_batch is at each cell's batch
    p = fit.predict(N=N, D=D, lr=g["lr"].to_numpy(float), batch=g["batch_tokens"].to_numpy(float))
    at_best_batch = int(np.flatnonzero(g["batch_tokens"].to_numpy() == t["best_batch"])[0])
    if t["fixed_batch"]:
        draws = {"lr_opt": p["lr_opt_at_batch"][:, 0]}
        point = score_point(t, float(np.median(draws["lr_opt"])), None, tie_tol)
    else:
        draws = {"lr_opt": p["lr_opt"][:, 0], "batch_opt": p["batch_opt"][:, 0],
                 "lr_opt_at_batch": p["lr_opt_at_batch"][:, at_best_batch]}
        point = score_point(t, float(np.median(draws["lr_opt"])), float(np.median(draws["batch_opt"])), tie_tol)
    win = winner_draws(fit, p, seed)
    return {**score_intervals(t, draws), **point, **_log_scores(win, t), **_pit_scores(win, t)}


def score_classic(fit, t: dict, N: float, D: float, tie_tol: float) -> dict:
    g = t["grid"]
    p = fit.predict(N=N, D=D)
    lr = np.asarray(p["lr_opt"], float)
    if t["fixed_batch"]:
        draws, b = {"lr_opt": lr}, np.full_like(lr, float(g["batch_tokens"].iloc[0]))
        point = score_point(t, float(np.median(lr)), None, tie_tol)
    else:
        b = np.asarray(p["batch_opt"], float)
        draws = {"lr_opt": lr, "batch_opt": b}
        point = score_point(t, float(np.median(lr)), float(np.median(b)), tie_tol)
    d = ((np.log(lr)[:, None] - np.log(g["lr"].to_numpy())[None]) ** 2
         + (np.log(b)[:, None] - np.log(g["batch_tokens"].to_numpy())[None]) ** 2)
    win = np.argmin(d, axis=1)
    return {**score_intervals(t, draws), **point, **_log_scores(win, t), **_pit_scores(win, t)}


def score_formula(name: str, t: dict, N: float, N_active: float, D: float, tie_tol: float) -> dict:
    from scalinfer.laws.peers import BASELINES

    lr_fn, b_fn = BASELINES[name]
    n = N_active if name == "deepseek_llm" else N  # DeepSeek's C = 6 N D counts active parameters
    batch = None if b_fn is None else float(b_fn(n, D))
    return score_point(t, float(lr_fn(n, D)), batch, tie_tol)


# ---- folds ------------------------------------------------------------------------------------------------------
def rhat_max(fit) -> tuple[float, str]:
    """The largest R-hat over the fit's scalar parameters, and whose."""
    s = {k: v["r_hat"] for k, v in fit.summary().items() if np.isfinite(v["r_hat"])}
    if not s:
        return float("nan"), ""
    worst = max(s, key=s.get)
    return float(s[worst]), worst


def run_fold(ds: Dataset, full, sizes: list[float], k: int, args) -> tuple[dict, list[dict]]:
    """Fit N <= N_k (surface, classic), score every setting with N > N_k. Returns (fit record, rows)."""
    import scalinfer
    from scalinfer.errors import ScalinferError

    N_k = sizes[k - 1]
    runs = ds.load(N_k)
    rec = {"dataset": ds.name, "k": k, "N_max": float(N_k), "n_runs": len(runs)}
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        model, opts = surface_for(ds, args.prior)
        if args.lr_valley_by_batch:
            opts["lr_valley_by_batch"] = True
        fit = scalinfer.fit(runs, model=model, chains=args.chains, warmup=args.warmup, samples=args.samples,
                            max_samples=args.max_samples, seed=args.seed, **opts)
    except ScalinferError as e:  # a failed fit is a result: report it and go on
        fit = None
        rec["surface_error"] = str(e)
    rec["surface_wall_s"], rec["surface_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    rec["load"] = os.getloadavg()[0]
    if fit is not None:
        rec["rhat_max"], rec["rhat_worst"] = rhat_max(fit)
        rec["divergences"] = fit.divergences
        rec["draws"] = fit.posterior.sizes["draw"]  # per chain: more than --samples where the first did not converge
    t0 = time.perf_counter()
    try:
        classic = scalinfer.fit(runs, model="classic", chains=args.chains, samples=args.samples, seed=args.seed)
    except ScalinferError as e:
        classic = None
        rec["classic_error"] = str(e)
    rec["classic_wall_s"] = time.perf_counter() - t0

    rows = []
    held = full[full["N"] > N_k * (1 + 1e-9)]
    for (N, D, group), sub in held.groupby(["N", "D", "group"], sort=True):
        t = setting_truth(full, N, D, group, args.tie_tol)
        N_active = float(sub["N_active"].iloc[0]) if "N_active" in sub and np.isfinite(sub["N_active"].iloc[0]) \
            else float(N)
        row = {"dataset": ds.name, "k": k, "N_fit_max": float(N_k), "N": float(N), "D": float(D),
               "group": str(group), "ratio": float(N / N_k), "n_cells": t["n_cells"], "fixed_batch": t["fixed_batch"],
               "best_lr": t["best_lr"], "best_batch": t["best_batch"], "edge": t["edge_lr"] or t["edge_batch"],
               "edge_lr": t["edge_lr"], "edge_batch": t["edge_batch"], "methods": {}}
        if fit is not None:
            row["methods"]["surface"] = score_surface(fit, t, N, D, args.tie_tol, args.seed)
        if classic is not None:
            row["methods"]["classic"] = score_classic(classic, t, N, D, args.tie_tol)
        for name in FORMULAS:
            row["methods"][name] = score_formula(name, t, N, N_active, D, args.tie_tol)
        rows.append(row)
    rec["n_heldout"] = len(rows)
    return rec, rows


def folds_of(sizes: list[float], min_sizes: int, max_folds: int | None) -> list[int]:
    """The k's to run (fit N_1..N_k): all from ``min_sizes`` to M - 1, or ``max_folds`` of them spread evenly
    (the first and last kept)."""
    ks = list(range(min_sizes, len(sizes)))
    if max_folds is None or len(ks) <= max_folds:
        return ks
    if max_folds == 1:
        return [ks[0]]
    pick = np.unique(np.round(np.linspace(0, len(ks) - 1, max_folds)).astype(int))
    return [ks[i] for i in pick]


# ---- aggregates -------------------------------------------------------------------------------------------------
def _mean(values) -> float | None:
    v = [float(x) for x in values if x is not None]
    return float(np.mean(v)) if v else None


def _median(values) -> float | None:
    v = [float(x) for x in values if x is not None]
    return float(np.median(v)) if v else None


def aggregate(rows: list[dict], method: str) -> dict:
    """Coverage, log score, regret over the rows that scored `method`."""
    scored = [(r, r["methods"][method]) for r in rows if method in r["methods"]]
    out: dict = {"n": len(scored), "n_edge": sum(r["edge"] for r, _ in scored)}
    if not scored:
        return out
    has_intervals = any("hit_0.9_lr_opt" in s for _, s in scored)
    if has_intervals:
        for ci in LEVELS:
            for kind in ("", "strict_", "point_"):
                out[f"coverage_{int(100 * ci)}{'_' + kind[:-1] if kind else ''}"] = {
                    q: _mean(s.get(f"hit_{ci:g}_{kind}{q}") for _, s in scored)
                    for q in ("lr_opt", "batch_opt", "lr_opt_at_batch")}
            out[f"nominal_{int(100 * ci)}"] = {q: _mean(s.get(f"nominal_{ci:g}_{q}") for _, s in scored)
                                               for q in ("lr_opt", "batch_opt", "lr_opt_at_batch")}
            out[f"coverage_{int(100 * ci)}_interior"] = {
                q: _mean(s.get(f"hit_{ci:g}_{q}") for r, s in scored if not r["edge"])
                for q in ("lr_opt", "batch_opt", "lr_opt_at_batch")}
            out[f"width_{int(100 * ci)}"] = {q: _median(s.get(f"width_{ci:g}_{q}") for _, s in scored)
                                             for q in ("lr_opt", "batch_opt")}
        for ci in LEVELS:
            out[f"coverage_{int(100 * ci)}_pit"] = {q: _mean(s.get(f"pit_cov_{ci:g}_{q}") for _, s in scored)
                                                    for q in ("lr_opt", "batch_opt")}
        out["pit_hist"] = {q: np.sum([s[f"pit_bins_{q}"] for _, s in scored if f"pit_bins_{q}" in s], axis=0).round(2)
                           .tolist() for q in ("lr_opt", "batch_opt")}
        out["n_batch"] = sum("hit_0.9_batch_opt" in s for _, s in scored)
        for k in ("log_score", "log_score_near", "log_score_uniform"):
            out[k] = _mean(s.get(k) for _, s in scored)
    regrets = [s["regret"] for _, s in scored]
    out["regret"] = float(np.mean(regrets))
    out["regret_median"] = float(np.median(regrets))
    out["point_hit"] = _mean(s["point_hit"] for _, s in scored)
    return out


def by_bins_and_datasets(rows: list[dict], method: str) -> dict:
    bins = []
    for label, lo, hi in BINS:
        sub = [r for r in rows if lo < r["ratio"] <= hi]
        bins.append({"ratio": label, **aggregate(sub, method)})
    datasets = {name: aggregate([r for r in rows if r["dataset"] == name], method)
                for name in dict.fromkeys(r["dataset"] for r in rows)}
    return {"bins": bins, "datasets": datasets, "all": aggregate(rows, method)}


# ---- printing ---------------------------------------------------------------------------------------------------
def _f(v, fmt: str = ".2f", width: int = 6) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}{fmt}}"


def print_fit(rec: dict) -> None:
    err = rec.get("surface_error") or rec.get("classic_error")
    print(f"{rec['dataset']:<19}{rec['k']:>3}{rec['N_max']:>10.3g}{rec['n_runs']:>6}{rec['n_heldout']:>5}"
          f"{rec['surface_wall_s']:>9.1f}{rec['surface_cpu_s']:>8.1f}{rec['load']:>6.1f}"
          f"{_f(rec.get('rhat_max'), '.3f', 8)}  {rec.get('rhat_worst', ''):<16}{rec.get('divergences', '-'):>6}"
          f"{rec.get('draws', '-'):>6}"
          f"{rec['classic_wall_s']:>8.1f}" + (f"  ERROR {err}" if err else ""), flush=True)


def print_table(title: str, results: dict, key: str) -> None:
    """One line per (group, method): key = "bins" or "datasets"."""
    print(f"\n{title}")
    head = (f"{'':<19}{'method':<14}{'n':>5}{'edge':>5}  {'90% lr':>7}{'(nom)':>6}{'point':>6}{'90% B':>7}"
            f"{'(nom)':>6}{'50% lr':>7}{'(nom)':>6}{'point':>6}{'50% B':>7}{'(nom)':>6}{'PIT90 lr':>9}{'B':>5}"
            f"{'PIT50 lr':>9}{'B':>5}{'90% lr@B':>9}{'w90 lr':>7}"
            f"{'w90 B':>6}{'log sc':>8}{'near':>7}{'unif':>7}{'regret%':>8}{'med%':>7}{'pt hit':>7}")
    print(head)
    print("-" * len(head))
    groups = [b["ratio"] for b in results["surface"]["bins"]] if key == "bins" else list(results["surface"][key])
    for gname in groups:
        for method, res in results.items():
            a = next(b for b in res["bins"] if b["ratio"] == gname) if key == "bins" else res[key].get(gname)
            if not a or not a.get("n"):
                continue
            c90, c50, w90 = a.get("coverage_90", {}), a.get("coverage_50", {}), a.get("width_90", {})
            n90, n50 = a.get("nominal_90", {}), a.get("nominal_50", {})
            p90, p50 = a.get("coverage_90_point", {}), a.get("coverage_50_point", {})
            q90, q50 = a.get("coverage_90_pit", {}), a.get("coverage_50_pit", {})
            print(f"{gname:<19}{method:<14}{a['n']:>5}{a['n_edge']:>5}  {_f(c90.get('lr_opt'), '.2f', 7)}"
                  f"{_f(n90.get('lr_opt'), '.2f', 6)}{_f(p90.get('lr_opt'), '.2f', 6)}"
                  f"{_f(c90.get('batch_opt'), '.2f', 7)}{_f(n90.get('batch_opt'), '.2f', 6)}"
                  f"{_f(c50.get('lr_opt'), '.2f', 7)}{_f(n50.get('lr_opt'), '.2f', 6)}"
                  f"{_f(p50.get('lr_opt'), '.2f', 6)}{_f(c50.get('batch_opt'), '.2f', 7)}"
                  f"{_f(n50.get('batch_opt'), '.2f', 6)}"
                  f"{_f(q90.get('lr_opt'), '.2f', 9)}{_f(q90.get('batch_opt'), '.2f', 5)}"
                  f"{_f(q50.get('lr_opt'), '.2f', 9)}{_f(q50.get('batch_opt'), '.2f', 5)}"
                  f"{_f(c90.get('lr_opt_at_batch'), '.2f', 9)}{_f(w90.get('lr_opt'), '.2f', 7)}"
                  f"{_f(w90.get('batch_opt'), '.2f', 6)}{_f(a.get('log_score'), '.2f', 8)}"
                  f"{_f(a.get('log_score_near'), '.2f', 7)}{_f(a.get('log_score_uniform'), '.2f', 7)}"
                  f"{_f(a['regret'], '.2f', 8)}{_f(a['regret_median'], '.2f', 7)}{_f(a['point_hit'], '.2f', 7)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default=",".join(d.name for d in DATASETS),
                    help="comma-separated names (default: all)")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300, help="draws per chain")
    ap.add_argument("--max-samples", type=int, default=None,
                    help="surface: draw --samples more per chain while R-hat > 1.01 or bulk ESS < 400, up to this "
                         "many (default 10 x --samples: with 2 chains, (Mis)Fitting's folds need up to 3,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-sizes", type=int, default=2, help="fit at least this many sizes (default 2)")
    ap.add_argument("--max-folds", type=int, default=None, help="at most this many k's per dataset (spread evenly)")
    ap.add_argument("--tie-tol", type=float, default=0.0025,
                    help="cells within this fraction of the best cell's loss are near-best (default 0.0025)")
    ap.add_argument("--prior", choices=PRIOR_CHOICES, default="lofo",
                    help="surface's prior: lofo (default) the population prior pooled without the scored dataset's "
                         "family; population the package's default (pooled with it); default the broad prior")
    ap.add_argument("--lr-valley-by-batch", action="store_true",
                    help="fit the surface with the option lr_valley_by_batch (the LR valley's curvature and "
                         "asymmetry moving with the batch)")
    ap.add_argument("--quick", action="store_true", help="2 chains x (200 + 200), one fold per dataset")
    ap.add_argument("--rows", action="store_true", help="add every scored (fold, setting) to the JSON")
    args = ap.parse_args(argv)
    if args.quick:
        args.chains, args.warmup, args.samples, args.max_folds = 2, 200, 200, 1
    args.max_samples = 10 * args.samples if args.max_samples is None else args.max_samples
    chosen = [d for d in DATASETS if d.name in args.datasets.split(",")]
    unknown = set(args.datasets.split(",")) - {d.name for d in DATASETS}
    if unknown:
        print(f"unknown dataset(s): {', '.join(sorted(unknown))} (known: {', '.join(d.name for d in DATASETS)})",
              file=sys.stderr)
        return 2
    missing = [str(d.path) for d in chosen if not d.path.exists()]
    if missing:
        print(f"dataset(s) not found: {', '.join(missing)} (read in place, never copied)", file=sys.stderr)
        return 2

    import scalinfer.runtime

    scalinfer.runtime.configure(n_devices=args.chains)  # a CPU device per chain, before JAX starts
    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]
    fits, rows = [], []
    print(f"{'dataset':<19}{'k':>3}{'N_k':>10}{'runs':>6}{'held':>5}{'wall s':>9}{'cpu s':>8}{'load':>6}{'R-hat':>8}"
          f"  {'(worst)':<16}{'div':>6}{'draws':>6}{'classic':>8}")
    for ds in chosen:
        full = ds.load().df
        sizes = sorted(float(n) for n in full["N"].unique())
        for k in folds_of(sizes, args.min_sizes, args.max_folds):
            rec, r = run_fold(ds, full, sizes, k, args)
            fits.append(rec)
            rows.extend(r)
            print_fit(rec)
    wall = time.perf_counter() - t_start

    methods = ["surface", "classic", *FORMULAS]
    results = {m: by_bins_and_datasets(rows, m) for m in methods}
    print(f"\nscored (fold, held-out setting) pairs: {len(rows)}; coverage = share of intervals holding (overlapping) "
          f"a near-best cell (within {100 * args.tie_tol:g}% of the best loss), (nom) = the mean posterior mass of the "
          "interval widened to its cells' boundaries (what a calibrated model's coverage matches), point = share "
          "of intervals holding a near-best cell's value itself (the first runs' rule); PIT90 / PIT50 = the share "
          "of the observed winner's randomized PIT inside the central 90% / 50% of the predictive distribution "
          "of which tried LR (batch) wins (calibrated: 0.90 / 0.50); lr@B = surface's "
          "best LR at the best cell's batch; w90 = median width of the 90% interval in decades (log10 hi/lo); "
          "log sc = log P(observed best cell), near = log P(a near-best cell wins), unif = log(1/cells); "
          "regret = % over the best loss of the cell nearest the recommended point")
    print_table("by extrapolation ratio (target N / largest fitted N)", results, "bins")
    print_table("by dataset", results, "datasets")
    print(f"\nthe winner's randomized PIT, expected counts over {PIT_BINS} equal bins (flat when calibrated):")
    for m in ("surface", "classic"):
        for label, a in [(b["ratio"], b) for b in results[m]["bins"]] + [("all", results[m]["all"])]:
            for q in ("lr_opt", "batch_opt"):
                h = a.get("pit_hist", {}).get(q)
                if h is not None and np.ndim(h) == 1 and len(h):
                    print(f"  {m:<8} {label:<6} {q:<10} " + " ".join(f"{x:5.1f}" for x in h))
    print("\n90% coverage of settings whose best cell is inside the grid (not on its edge):")
    for m in ("surface", "classic"):
        for name, a in results[m]["datasets"].items():
            ci = a.get("coverage_90_interior", {})
            print(f"  {m:<8} {name:<19} n={a['n'] - a['n_edge']:>3}  lr {_f(ci.get('lr_opt'), '.2f', 5)}  "
                  f"batch {_f(ci.get('batch_opt'), '.2f', 5)}")
    print(f"\ntotal wall {wall:.0f} s ({len(fits)} folds; {args.chains} chains x ({args.warmup} + {args.samples}, "
          f"up to {args.max_samples}); "
          f"load {load0:.1f} -> {os.getloadavg()[0]:.1f})")
    settings = {"prior": args.prior, "lr_valley_by_batch": args.lr_valley_by_batch, "chains": args.chains,
                "warmup": args.warmup, "samples": args.samples, "max_samples": args.max_samples, "seed": args.seed,
                "min_sizes": args.min_sizes, "max_folds": args.max_folds, "tie_tol": args.tie_tol,
                "datasets": [d.name for d in chosen]}
    report = {"bins": results["surface"]["bins"], "datasets": results["surface"]["datasets"],
              "all": results["surface"]["all"],
              "classic": results["classic"], "formulas": {m: results[m] for m in FORMULAS},
              "fits": fits, "settings": settings, "wall_s": wall, "load": [load0, os.getloadavg()[0]]}
    if args.rows:
        report["rows"] = rows
    print(json.dumps(report, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
