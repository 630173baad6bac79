"""Power-scaling prior sensitivity of a prediction (issue #22 item 4): its cost in `Fit.predict`, the answer's
sensitivities, and the prior sites that move lr_opt most, on a saved fit.

    .venv/bin/python -m scalinfer.cli fit ../shared/datasets/steplaw/dense_runs.csv --model surface \\
        --format steplaw --where "N <= 6e8" -o /tmp/steplaw_6e8.nc
    .venv/bin/python benchmarks/prior_sensitivity.py /tmp/steplaw_6e8.nc [--N 7e10 --D 1.4e12]

Prints the sensitivities of each quantity at the target, lr_opt's 90% interval, the six prior sites whose
power-scaling moves lr_opt most (`arviz_stats.psense` on a DataTree view, which also checks that
`scalinfer.inference.sensitivity.prior_sensitivity` gives psense's numbers), the CPU and wall time of the
sensitivity at one target and on a 5 x 4 grid, and, last, one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fit")
    ap.add_argument("--N", type=float, default=7e10)
    ap.add_argument("--D", type=float, default=1.4e12)
    args = ap.parse_args()
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
