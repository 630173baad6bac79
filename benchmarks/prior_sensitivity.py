"""Power-scaling prior sensitivity of a prediction (issue #22 item 4): its cost in `Fit.predict`, the answer's
sensitivities, and the prior sites that move lr_opt most, on a saved fit.

    .venv/bin/python -m scalinfer.cli fit ../shared/datasets/steplaw/dense_runs.csv --model surface \\
        --format steplaw --where "N <= 6e8" -o /tmp/steplaw_6e8.nc
    .venv/bin/python benchmarks/prior_sensitivity.py /tmp/steplaw_6e8.nc [--N 7e10 --D 1.4e12]

Prints the sensitivities of each quantity at the target, lr_opt's 90% interval, the six prior sites whose
power-scaling moves lr_opt most (`arviz_stats.psense` on a DataTree view, which also checks that
`scalinfer.inference.sensitivity.prior_sensitivity` gives psense's numbers), the CPU and wall time of the
sensitivity at one target and on a 5 x 4 grid, and, last, one JSON object with the figures.

Refitting instead (#22's done-criterion: the 90% lr_opt interval's width at the target moves by less than 2x
when the scale of any single prior is changed 10x up or down):

    nice -n 10 .venv/bin/python benchmarks/prior_sensitivity.py --refit [--base population|default]
        [--priors lr_size,lr_exp_N,...] [--runs ../shared/datasets/steplaw/dense_runs.csv --format steplaw
        --where "N <= 6e8"] [--chains 2 --warmup 300 --samples 300]

fits the table with the base prior, then once per prior and factor (x0.1, x10) with that one prior's scale
changed (`Priors.scaled`: a Normal's sd, beta of an InverseGamma on tau^2, nu's Gamma scale), and prints the
width (hi/lo) of each fit's 90% lr_opt interval at the target and its ratio to the base's, then a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import scalinfer.runtime

scalinfer.runtime.configure(n_devices=4)

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from scalinfer.inference.fit import load_fit  # noqa: E402
from scalinfer.inference.sensitivity import prior_sensitivity  # noqa: E402


def _timed(fn, repeat=3):
    best = (np.inf, np.inf)
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.process_time() - c, time.perf_counter() - w))
    return best  # (CPU s, wall s) of the fastest


#: the priors refitted by default: those of the population prior (`scalinfer.models.surface.population.SCALES`)
#: and the settings' scatter
REFIT_PRIORS = ("lr_size", "b_size", "loss_size", "lr_exp_N", "lr_exp_D", "batch_exp_N", "batch_exp_D", "kappa1",
                "c_lr0", "c_b0", "delta_lr", "delta_b", "tau_optimum_sd")


def refit(args) -> None:
    """Refit with each prior's scale x0.1 and x10; the 90% lr_opt interval's width at the target for each."""
    import dataclasses
    import sys
    from pathlib import Path

    import scalinfer
    from scalinfer.models.surface.population import PRIOR_SETS

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from population_prior import given_priors_model

    runs = scalinfer.load_runs(args.runs, format=args.format, where=args.where)
    base = PRIOR_SETS[args.base]

    def width(priors) -> tuple[float, float, float, float, float]:
        t0 = time.process_time()
        f = scalinfer.fit(runs, model=given_priors_model(priors), chains=args.chains, warmup=args.warmup,
                          samples=args.samples, seed=0)
        med, lo, hi = f.predict(N=args.N, D=args.D, sensitivity=False).interval("lr_opt")
        rhat = max(v["r_hat"] for v in f.summary().values() if np.isfinite(v["r_hat"]))
        return float(med), float(lo), float(hi), float(rhat), time.process_time() - t0

    rows = {"base": width(base)}
    w0 = rows["base"][2] / rows["base"][1]
    print(f"{'prior':<16}{'factor':>7}{'median':>10}{'lo':>10}{'hi':>10}{'hi/lo':>8}{'/ base':>8}{'R-hat':>7}"
          f"{'CPU s':>7}")
    print(f"{'base (' + args.base + ')':<16}{'':>7}{rows['base'][0]:>10.3g}{rows['base'][1]:>10.3g}"
          f"{rows['base'][2]:>10.3g}{w0:>8.2f}{1.0:>8.2f}{rows['base'][3]:>7.3f}{rows['base'][4]:>7.0f}", flush=True)
    for name in args.priors.split(","):
        for factor in (0.1, 10.0):
            r = rows[f"{name} x{factor:g}"] = width(base.scaled(name, factor))
            w = r[2] / r[1]
            print(f"{name:<16}{factor:>7g}{r[0]:>10.3g}{r[1]:>10.3g}{r[2]:>10.3g}{w:>8.2f}{w / w0:>8.2f}{r[3]:>7.3f}"
                  f"{r[4]:>7.0f}", flush=True)
    widths = {k: r[2] / r[1] for k, r in rows.items()}
    print(json.dumps({"target": {"N": args.N, "D": args.D}, "base": args.base,
                      "base_priors": dataclasses.asdict(base), "width_ratio": widths,
                      "width_vs_base": {k: w / w0 for k, w in widths.items()},
                      "rows": {k: dict(zip(("median", "lo", "hi", "rhat_max", "cpu_s"), r)) for k, r in rows.items()},
                      "settings": {k: getattr(args, k) for k in ("runs", "format", "where", "chains", "warmup",
                                                                   "samples")}, "load_avg": os.getloadavg()[0]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fit", nargs="?", help="a saved surface fit (not with --refit)")
    ap.add_argument("--N", type=float, default=7e10)
    ap.add_argument("--D", type=float, default=1.4e12)
    ap.add_argument("--refit", action="store_true", help="refit with each prior's scale x0.1 and x10")
    ap.add_argument("--base", default="population", choices=("population", "default"))
    ap.add_argument("--priors", default=",".join(REFIT_PRIORS), help="the `Priors` fields to scale")
    ap.add_argument("--runs", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets" / "steplaw"
                                          / "dense_runs.csv"))
    ap.add_argument("--format", default="steplaw")
    ap.add_argument("--where", default="N <= 6e8")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300)
    args = ap.parse_args()
    if args.refit:
        return refit(args)
    if args.fit is None:
        ap.error("a fit file, or --refit")
    from arviz_stats import psense

    f = load_fit(args.fit)
    pred = f.predict(N=args.N, D=args.D, sensitivity=True)
    s = pred.prior_sensitivity
    for k, v in s.items():
        print(f"{k:>10}: prior {v['prior']:.3f}  likelihood {v['likelihood']:.3f}  most {v['most']} "
              f"({v['most_prior']:.3f})  {v['diagnosis']}")
    med, lo, hi = pred.interval("lr_opt")
    print(f"lr_opt {med:.3g} [{lo:.3g}, {hi:.3g}]: 90% interval hi/lo x{hi / lo:.2f}")

    post = f.tree["posterior"]
    C, n = post.sizes["chain"], post.sizes["draw"]
    coords = {"chain": post["chain"].values, "draw": post["draw"].values}
    view = xr.DataTree.from_dict({
        "posterior": xr.Dataset({k: (("chain", "draw"), v.reshape(C, n)) for k, v in pred.draws.items()}, coords=coords),
        "log_prior": f.tree["log_prior"].to_dataset(), "log_likelihood": f.tree["log_likelihood"].to_dataset()})
    sites = {k: float(psense(view, group="prior", group_var_names=k)["lr_opt"]) for k in f.tree["log_prior"].data_vars}
    top = sorted(sites.items(), key=lambda kv: -kv[1])[:6]
    print("lr_opt's prior sites by sensitivity:", ", ".join(f"{k} {v:.3f}" for k, v in top))
    joint = float(psense(view, group="prior")["lr_opt"])
    assert np.isclose(joint, s["lr_opt"]["prior"]), (joint, s["lr_opt"]["prior"])

    one = _timed(lambda: prior_sensitivity(f.tree, pred.draws))
    grid = f.predict(N=np.geomspace(args.N / 100, args.N, 5)[:, None], D=np.geomspace(args.D / 100, args.D, 4)[None],
                     sensitivity=False)
    many = _timed(lambda: prior_sensitivity(f.tree, grid.draws), repeat=1)
    print(f"sensitivity at one target: {one[0]:.2f} s CPU ({one[1]:.2f} s wall); 5 x 4 grid: {many[0]:.2f} s CPU "
          f"({many[1]:.2f} s wall); {len(sites)} prior sites; load {os.getloadavg()[0]:.1f}")
    print(json.dumps({"target": {"N": args.N, "D": args.D}, "sensitivity": s,
                      "lr_opt": {"median": med, "lo": lo, "hi": hi, "width_ratio": hi / lo},
                      "lr_opt_top_sites": dict(top), "n_sites": len(sites),
                      "cpu_s_one_target": one[0], "wall_s_one_target": one[1], "cpu_s_grid_5x4": many[0],
                      "load_avg": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
