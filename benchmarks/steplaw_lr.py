"""Step Law's dense grid: does the ``surface`` posterior find the optimal LR and batch of a held-out larger model?

Held-out test (the issue's "done when"): fit the 1,746 runs with N <= 6e8 (15 settings), predict the two N =
1,073,741,824 settings in the file (D = 2e10 and 5.69e10), and compare with each grid's empirically best run:
does the 90% interval of ``lr_opt`` contain the best run's LR, and how much worse (in %) is the loss of the grid
cell nearest in (log lr, log batch) to the predicted medians than the grid's best loss (the regret)? Rows: this
model (its default: size scatter, each model size off the laws by its own level), the same model without size
scatter (``size_scatter=False``), the classic pipeline (quadratic vertex per setting, then OLS; and its "best
run per setting" variant) and Step Law's published formula. For this model also the posterior predictive
distribution of the grid's *winning* LR (`grid_winner`): the grid's best LR is a noisy argmin over LRs sqrt 2
apart, not the continuous optimum that ``lr_opt`` describes. And the model's best LR at the batch of the grid's
best cell (``lr_opt_at_batch``): eta* moves with the batch, so that is the like-for-like comparison when the
grid's best batch is not the predicted B*. Then the full dense table (all 1,911 runs): wall time (compilation
included), R-hat, divergences.

Held out by size: for each size N_k after the first, fit the runs with N < N_k and predict every setting of N_k
(13 settings in all), with the default (size scatter on from two sizes) and without: how many 90% intervals of
lr_opt and batch_opt hold the grid's best run's LR and batch. A calibrated model holds ~90% of them; this is the
check of honest extrapolation in N on real data that one held-out size cannot give.

The prior (``--prior``, as in ``benchmarks/backtest.py``): every scored fit samples the population prior pooled
*without* Step Law's dense family (``lofo``, the default: a family is never scored by a prior fitted on it), or
the package's default population prior (``population``, which pooled this very table), or the broad prior
(``default``). The full-table timing fit is the user's default whatever ``--prior`` says (it scores nothing).

    .venv/bin/python benchmarks/steplaw_lr.py [--chains 4 --warmup 500 --samples 1000] [--skip-full]
        [--skip-by-size] [--prior lofo|population|default]

Prints a table, then as its LAST line one JSON object with the figures. Reads the dataset in place from
``../shared/datasets/steplaw/`` (relative to the repository root); exits with a message if it is absent.
Timings on a shared machine are noisy: the JSON records the load average next to each one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from _grid import grid_truth_at, grid_winner, regret  # benchmarks/, the script's folder, is first on sys.path
from backtest import DATASETS, PRIOR_CHOICES, surface_for

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT.parent / "shared" / "datasets" / "steplaw" / "dense_runs.csv"
TARGET_N = 1_073_741_824
TARGET_D = (2e10, 5.69e10)


def grid_truth(full, D: float) -> dict:
    """The held-out grid at (TARGET_N, D): its best run and the table of its runs."""
    return grid_truth_at(full, TARGET_N, D)


def evaluate(name: str, answers: dict, truths: dict) -> dict:
    """answers: D -> {"lr_opt": (median, lo, hi), "batch_opt": (median, lo, hi)}."""
    out = {"method": name, "targets": {}}
    for D, a in answers.items():
        t = truths[D]
        lr, lo, hi = a["lr_opt"]
        b, blo, bhi = a["batch_opt"]
        r, nlr, nb = regret(t, lr, b)
        out["targets"][f"{D:g}"] = {
            "lr_opt": lr, "lr_lo": lo, "lr_hi": hi, "best_lr": t["best_lr"], "lr_hit": bool(lo <= t["best_lr"] <= hi),
            "batch_opt": b, "batch_lo": blo, "batch_hi": bhi, "best_batch": t["best_batch"],
            "batch_hit": bool(blo <= t["best_batch"] <= bhi), "regret_pct": r, "nearest_lr": nlr, "nearest_batch": nb}
    return out


def from_fit(fit, ci: float) -> dict:
    res = {}
    for D in TARGET_D:
        p = fit.predict(N=TARGET_N, D=D, ci=ci)
        res[D] = {k: tuple(float(v) for v in p.interval(k)) for k in ("lr_opt", "batch_opt")}
    return res


def held_out_by_size(path: str, full, args, model, options: dict, size_scatter: bool | None) -> dict:
    """Fit N < N_k with `model` and its fit `options` (`backtest.surface_for`), predict each setting of N_k, for
    every size N_k after the first; count the 90% hits."""
    import scalinfer

    sizes = sorted(full["N"].unique())
    rows, t0 = [], time.perf_counter()
    for N in sizes[1:]:
        runs = scalinfer.load_runs(path, format="steplaw", where=f"N < {float(N) * (1 - 1e-9)!r}")
        fit = scalinfer.fit(runs, model=model, chains=args.chains, warmup=args.warmup, samples=args.samples,
                            seed=args.seed, **options, size_scatter=size_scatter)
        for D in sorted(full.loc[full["N"] == N, "D"].unique()):
            t = grid_truth_at(full, N, D)
            p = fit.predict(N=N, D=D, ci=args.ci)
            (lr, lo, hi), (b, blo, bhi) = (tuple(float(v) for v in p.interval(k)) for k in ("lr_opt", "batch_opt"))
            rows.append({"N": float(N), "D": float(D), "n_sizes_fit": int(fit.constants["n_sizes"]),
                         "lr_opt": lr, "lr_lo": lo, "lr_hi": hi, "best_lr": t["best_lr"],
                         "lr_hit": bool(lo <= t["best_lr"] <= hi), "batch_opt": b, "batch_lo": blo,
                         "batch_hi": bhi, "best_batch": t["best_batch"],
                         "batch_hit": bool(blo <= t["best_batch"] <= bhi),
                         "divergences": fit.divergences})
    return {"rows": rows, "n": len(rows), "lr_hits": sum(r["lr_hit"] for r in rows),
            "batch_hits": sum(r["batch_hit"] for r in rows), "wall_s": time.perf_counter() - t0}


def print_by_size(name: str, res: dict) -> None:
    print(f"\nheld out by size, {name}: 90% intervals (fit N < N_k, predict every setting of N_k)")
    print(f"{'N':>9} {'D':>8} {'sizes':>5}  {'lr_opt [90%]':<30}{'best lr':>9} {'hit':>4}  {'batch_opt [90%]':<30}"
          f"{'best B':>9} {'hit':>4}")
    for r in res["rows"]:
        lr = f"{r['lr_opt']:.3g} [{r['lr_lo']:.3g}, {r['lr_hi']:.3g}]"
        b = f"{r['batch_opt']:.3g} [{r['batch_lo']:.3g}, {r['batch_hi']:.3g}]"
        print(f"{r['N']:>9.3g} {r['D']:>8.3g} {r['n_sizes_fit']:>5}  {lr:<30}{r['best_lr']:>9.3g} "
              f"{'yes' if r['lr_hit'] else 'no':>4}  {b:<30}{r['best_batch']:>9.3g} "
              f"{'yes' if r['batch_hit'] else 'no':>4}")
    print(f"lr_opt holds the grid's best LR in {res['lr_hits']} of {res['n']}, batch_opt its best batch in "
          f"{res['batch_hits']} of {res['n']} ({res['wall_s']:.0f} s)")


def print_table(rows: list[dict]) -> None:
    print(f"\nheld-out N = {TARGET_N:,}: 90% intervals; regret = loss of the grid run nearest the predicted "
          "(lr, batch) over the grid's best, in %")
    head = f"{'method':<26}{'D':>8}  {'lr_opt [90%]':<30}{'best lr':>9} {'hit':>4}  {'batch_opt [90%]':<30}" \
           f"{'best B':>9}  {'regret %':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        for D, t in r["targets"].items():
            lr = f"{t['lr_opt']:.3g} [{t['lr_lo']:.3g}, {t['lr_hi']:.3g}]"
            b = f"{t['batch_opt']:.3g} [{t['batch_lo']:.3g}, {t['batch_hi']:.3g}]"
            print(f"{r['method']:<26}{D:>8}  {lr:<30}{t['best_lr']:>9.3g} {'yes' if t['lr_hit'] else 'no':>4}  "
                  f"{b:<30}{t['best_batch']:>9.3g}  {t['regret_pct']:>8.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default=str(DATASET))
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=1000, help="draws per chain")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ci", type=float, default=0.9)
    ap.add_argument("--skip-full", action="store_true", help="skip the fit to all 1,911 runs")
    ap.add_argument("--skip-by-size", action="store_true", help="skip the held-out-by-size check (8 fits)")
    ap.add_argument("--prior", choices=PRIOR_CHOICES, default="lofo",
                    help="the scored fits' prior: lofo (default) the population prior pooled without Step Law's "
                         "dense family; population the package's default; default the broad prior")
    args = ap.parse_args(argv)
    if not Path(args.dataset).exists():
        print(f"dataset not found: {args.dataset} (the Step Law CSV is read in place, never copied)", file=sys.stderr)
        return 2

    import scalinfer
    from scalinfer.runtime import configure

    configure(args.chains)
    from scalinfer.laws import BASELINES

    full = scalinfer.load_runs(args.dataset, format="steplaw").df
    truths = {D: grid_truth(full, D) for D in TARGET_D}
    runs = scalinfer.load_runs(args.dataset, format="steplaw", where="N <= 6e8")
    report: dict = {"n_runs_fit": len(runs), "load_before": os.getloadavg()[0], "prior": args.prior}
    model, options = surface_for(next(d for d in DATASETS if d.name == "steplaw-dense"), args.prior)

    t0 = time.perf_counter()
    fit = scalinfer.fit(runs, model=model, chains=args.chains, warmup=args.warmup, samples=args.samples,
                        seed=args.seed, **options)
    wall = time.perf_counter() - t0
    s = fit.summary()
    rows = [evaluate("surface (this model)", from_fit(fit, args.ci), truths)]
    report["heldout"] = {"wall_s": wall, "load_after": os.getloadavg()[0], **_diag(fit, s),
                         "steps_per_draw": float(fit.tree["sample_stats"]["n_steps"].mean())}
    t0 = time.perf_counter()
    fs = scalinfer.fit(runs, model=model, chains=args.chains, warmup=args.warmup, samples=args.samples,
                       seed=args.seed, **options, size_scatter=False)
    report["heldout_no_size_scatter"] = {"wall_s": time.perf_counter() - t0, **_diag(fs, fs.summary()),
                                         "steps_per_draw": float(fs.tree["sample_stats"]["n_steps"].mean())}
    rows.append(evaluate("surface, no size scatter", from_fit(fs, args.ci), truths))
    for vertex, label in (("quadratic", "classic (quadratic vertex)"), ("best", "classic (best run)")):
        c = scalinfer.fit(runs, model="classic", vertex=vertex, samples=args.samples, chains=args.chains,
                          seed=args.seed)
        rows.append(evaluate(label, from_fit(c, args.ci), truths))
    lr_fn, b_fn = BASELINES["step_law"]
    sl = {D: {"lr_opt": (float(lr_fn(TARGET_N, D)),) * 3, "batch_opt": (float(b_fn(TARGET_N, D)),) * 3}
          for D in TARGET_D}
    rows.append(evaluate("Step Law formula", sl, truths))
    print_table(rows)
    h = report["heldout"]
    hs = report["heldout_no_size_scatter"]
    print(f"held-out fit without size scatter: {hs['wall_s']:.0f} s wall, R-hat max {hs['rhat_max']:.3f}, "
          f"{hs['divergences']} divergences ({hs['divergent_pct']:.2f}%), min bulk ESS {hs['ess_min']:.0f}, "
          f"{hs['steps_per_draw']:.0f} leapfrog steps per draw")
    print(f"\nheld-out fit: {h['wall_s']:.0f} s wall (load {report['load_before']:.1f}->{h['load_after']:.1f}), "
          f"R-hat max {h['rhat_max']:.3f}, {h['divergences']} divergences ({h['divergent_pct']:.2f}%), "
          f"min bulk ESS {h['ess_min']:.0f}, {h['steps_per_draw']:.0f} leapfrog steps per draw")
    report["methods"] = rows
    # eta* moves with the batch (the ridge kappa1): the grid's best LR is the best LR *at the best cell's batch*,
    # which need not be the predicted B*; the model's best LR at that batch is the like-for-like comparison
    report["lr_opt_at_best_batch"] = {}
    for D in TARGET_D:
        t = truths[D]
        med, lo, hi = (float(v) for v in fit.predict(N=TARGET_N, D=D, batch=t["best_batch"], ci=args.ci)
                       .interval("lr_opt_at_batch"))
        hit = bool(lo <= t["best_lr"] <= hi)
        report["lr_opt_at_best_batch"][f"{D:g}"] = {"batch": t["best_batch"], "median": med, "lo": lo, "hi": hi,
                                                   "best_lr": t["best_lr"], "hit": hit}
        print(f"D = {D:g}: best LR at the grid's best batch ({t['best_batch']:.3g} tokens) {med:.3g} "
              f"[{lo:.3g}, {hi:.3g}]; grid's best LR {t['best_lr']:.3g}: {'inside' if hit else 'outside'}")
    report["grid_winner"] = {}
    for D in TARGET_D:
        w = grid_winner(fit, truths[D], TARGET_N, D, args.ci, seed=args.seed)
        report["grid_winner"][f"{D:g}"] = w
        print(f"D = {D:g}: which grid LR wins, as the model predicts it (noise included): "
              + ", ".join(f"{k} {100 * v:.0f}%" for k, v in w["probabilities"].items() if v >= 0.01)
              + f"; observed winner {truths[D]['best_lr']:.3g} has {100 * w['p_observed_winner']:.0f}%, "
              f"{'inside' if w['observed_in_set'] else 'outside'} the {100 * args.ci:.0f}% set of winners")

    if not args.skip_by_size:
        report["held_out_by_size"] = {}
        for name, flag in (("surface", None), ("surface, no size scatter", False)):
            res = report["held_out_by_size"][name] = held_out_by_size(args.dataset, full, args, model, options, flag)
            print_by_size(name, res)
    if not args.skip_full:
        runs_all = scalinfer.load_runs(args.dataset, format="steplaw")
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        fa = scalinfer.fit(runs_all, model="surface", chains=args.chains, warmup=args.warmup,
                           samples=args.samples, seed=args.seed)
        wall = time.perf_counter() - t0
        report["full"] = {"n_runs": len(runs_all), "wall_s": wall, "load_before": load0,
                          "load_after": os.getloadavg()[0], **fa.timings, **_diag(fa, fa.summary())}
        f = report["full"]
        print(f"full dense table ({len(runs_all)} runs, {args.chains} chains x {args.samples} draws after "
              f"{args.warmup} warmup): {wall:.0f} s wall incl. compilation (load {load0:.1f}), R-hat max "
              f"{f['rhat_max']:.3f}, {f['divergences']} divergences ({f['divergent_pct']:.2f}%), min bulk ESS "
              f"{f['ess_min']:.0f}")
    # time the vectorized prediction: a 100 x 100 (N, D) grid from every posterior draw
    Ng, Dg = np.meshgrid(np.geomspace(1e8, 1e11, 100), np.geomspace(1e9, 1e13, 100), indexing="ij")
    fit.predict(N=Ng, D=Dg)  # compile for this shape once (a jitted program is per shape)
    t0 = time.perf_counter()
    fit.predict(N=Ng, D=Dg)
    report["predict_grid_100x100_s"] = time.perf_counter() - t0
    report["predict_grid_draws"] = int(fit.posterior.sizes["chain"] * fit.posterior.sizes["draw"])
    print(f"predict on a 100 x 100 (N, D) grid from {report['predict_grid_draws']} draws: "
          f"{report['predict_grid_100x100_s']:.2f} s")
    summary = {
        "held_out_by_size_hits": {k: {"lr": v["lr_hits"], "batch": v["batch_hits"], "n": v["n"]}
                                  for k, v in report.get("held_out_by_size", {}).items()},
        "lr_hits": {r["method"]: [t["lr_hit"] for t in r["targets"].values()] for r in rows},
        "regret_pct": {r["method"]: [round(t["regret_pct"], 4) for t in r["targets"].values()] for r in rows},
    }
    print(json.dumps({**summary, **report}, default=float))
    return 0


def _diag(fit, s) -> dict:
    """R-hat and bulk ESS over every sampled quantity, the per-setting offsets included (the summary has
    only scalars)."""
    from arviz_stats import ess as _ess, rhat as _rhat

    post = fit.posterior
    n = post.sizes["chain"] * post.sizes["draw"]
    rh = [float(np.nanmax(v.values)) for v in _rhat(post, sample_dims=["chain", "draw"]).data_vars.values()]
    ess = [float(np.nanmin(v.values)) for v in _ess(post, sample_dims=["chain", "draw"], method="bulk").data_vars.values()]
    rh, ess = [v for v in rh if np.isfinite(v)], [v for v in ess if np.isfinite(v)]
    return {"rhat_max": max(rh) if rh else float("nan"), "ess_min": min(ess) if ess else float("nan"),
            "divergences": fit.divergences, "divergent_pct": 100.0 * fit.divergences / n, "draws": n,
            "warnings": fit.warnings(s)}


if __name__ == "__main__":
    sys.exit(main())
