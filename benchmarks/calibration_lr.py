"""Calibration of the ``surface`` model: do its 50% and 90% intervals of eta* and B* at a held-out larger
scale cover the truth 50% and 90% of the time?

Each data set is simulated from the model at known parameters (`Surface.true_params`, Step-Law-like) on a
Step-Law-shaped grid (settings (N, D) x LRs by sqrt 2 x batch sizes), with its own per-setting offsets and
noise; diverged runs are censored as in real data. The held-out target is a *new* setting at a larger N and
D: its true optimum is the law there plus its own offset (tau * epsilon), which is what a user's next, larger
run would face. Each data set is fitted with NUTS and the target's log eta* and log B* are checked against the
central 50% and 90% posterior intervals of ``lr_opt`` and ``batch_opt``.

With ``--tau-prior`` each data set also draws the settings' scatter (tau_lr, tau_b) from the model's own
prior, HalfNormal(0.3), instead of the fixed Step-Law-like 0.05. The two checks answer different questions:
at one fixed truth a Bayesian interval need not cover at its nominal rate (with 9 settings the data leave
the scatter uncertain, and the posterior predictive of a new setting integrates over it, so at a small true
scatter the intervals are wide); averaged over the prior of what the data cannot pin down, it must.

By default the data sets are simulated, and fitted, with size scatter (the model's default with two or more
model sizes; ``--no-size-scatter`` simulates and fits without it, ``size_scatter=False``): each model size
(distinct N) also sits off the laws, by ``tau_lr_size``, ``tau_b_size``, ``tau_loss_size`` (fixed at their
priors' medians 0.085, 0.085, 0.0085, or with ``--tau-prior`` drawn from their priors, tau^2 ~ InverseGamma(1,
0.005) and InverseGamma(1, 5e-5)), and the target, a new size, draws its own size offset on top of its setting
offset.

    nice .venv/bin/python benchmarks/calibration_lr.py --datasets 100 [--chains 2 --warmup 300 --samples 300]
                                                     [--tau-prior] [--no-size-scatter]

Prints one line per data set, then as its LAST line one JSON object with ``coverage_50`` and ``coverage_90``
(each ``{"lr_opt": ..., "batch_opt": ...}``), the number of data sets, binomial standard errors and the
fits' diagnostics.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # test tooling: tests/support/
from support.designs import SURFACE_DESIGNS, surface_design  # noqa: E402


def target_truth(params: dict, N: float, D: float, rng: np.random.Generator) -> dict[str, float]:
    """log eta* and log B* of a new setting at (N, D), of a new model size: the laws plus the setting's own
    offsets and its size's (see `Surface.simulate`; no size term without ``tau_*_size``)."""
    e = rng.standard_normal(2)
    e_size = rng.standard_normal(2)  # drawn after e: without size scatter the truths are the same as before
    lN, lD = np.log(N), np.log(D)
    return {
        # the law plus the new setting's own offset plus its new size's
        "lr_opt": params["lr_opt_log_coef"] + params["lr_opt_exp_N"] * lN + params["lr_opt_exp_D"] * lD
        + params["tau_lr"] * e[0] + params.get("tau_lr_size", 0.0) * e_size[0],
        "batch_opt": params["batch_opt_log_coef"] + params["batch_opt_exp_N"] * lN
        + params["batch_opt_exp_D"] * lD + params["tau_b"] * e[1] + params.get("tau_b_size", 0.0) * e_size[1],
    }


def _gamma_median(alpha: float) -> float:
    from scipy import stats

    return float(stats.gamma(alpha).median())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=100)
    ap.add_argument("--design", choices=tuple(SURFACE_DESIGNS), default="small")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300, help="draws per chain")
    ap.add_argument("--method", default="nuts", choices=("nuts", "laplace"))
    ap.add_argument("--target-N", type=float, default=None, help="default: 2x the largest N of the design")
    ap.add_argument("--target-D", type=float, default=None, help="default: 40 tokens per parameter at target N")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tau-prior", action="store_true",
                    help="draw tau_lr and tau_b of each data set from their prior, HalfNormal(0.3) (with "
                         "size scatter, the size scatter from its prior too)")
    ap.add_argument("--size-scatter", action=argparse.BooleanOptionalAction, default=True,
                    help="simulate and fit with size scatter, model sizes off the laws (default; the model's "
                         "default with two or more sizes); --no-size-scatter: without, size_scatter=False")
    args = ap.parse_args(argv)
    if args.datasets < 1:
        ap.error("--datasets must be at least 1")

    from scalinfer.runtime import configure

    configure(args.chains)
    import scalinfer
    from scalinfer.models.surface import MODEL, SIZE_PRIOR
    from scalinfer.runs.schema import validate

    fixed = MODEL.true_params()
    size_median = {f"tau_{v}_size": float(np.sqrt(b / _gamma_median(a))) for v, (a, b) in SIZE_PRIOR.items()}
    design = surface_design(args.design)
    N_T = args.target_N or 2.0 * design["N"].max()
    D_T = args.target_D or 40.0 * N_T
    hits = {ci: {"lr_opt": [], "batch_opt": []} for ci in (0.5, 0.9)}
    diag = {"rhat_max": [], "divergences": [], "wall_s": [], "n_censored": []}
    t_all = time.perf_counter()
    for k in range(args.datasets):
        seed = args.seed + k
        params = dict(fixed)
        if args.tau_prior:  # the model's prior: tau ~ HalfNormal(0.3)
            params["tau_lr"], params["tau_b"] = np.abs(0.3 * np.random.default_rng([seed, 11]).standard_normal(2))
        if args.size_scatter:  # tau^2 ~ InverseGamma(alpha, beta): its median, or a draw
            rng_size = np.random.default_rng([seed, 13])
            params.update({f"tau_{v}_size": float(np.sqrt(b / rng_size.gamma(a))) for v, (a, b) in SIZE_PRIOR.items()}
                          if args.tau_prior else size_median)
        df = MODEL.simulate(params, design, seed=seed)
        runs = validate(df.drop(columns=["true_lr_opt", "true_batch_opt", "true_loss_opt"]),
                        source=f"calibration data set {seed}", kind="runs")
        truth = target_truth(params, N_T, D_T, np.random.default_rng([seed, 7]))
        t0 = time.perf_counter()
        fit = scalinfer.fit(runs, model="surface", method=args.method, chains=args.chains, warmup=args.warmup,
                            samples=args.samples, seed=seed, size_scatter=args.size_scatter)
        wall = time.perf_counter() - t0
        pred = fit.predict(N=N_T, D=D_T)
        line = []
        for q in ("lr_opt", "batch_opt"):
            logd = np.log(pred[q])
            for ci in (0.5, 0.9):
                lo, hi = np.quantile(logd, [(1 - ci) / 2, (1 + ci) / 2])
                hits[ci][q].append(bool(lo <= truth[q] <= hi))
            t = "lr" if q == "lr_opt" else "b"
            size = f" size {params[f'tau_{t}_size']:.3f}" if args.size_scatter else ""
            line.append(f"{q} tau {params[f'tau_{t}']:.3f}{size} truth {np.exp(truth[q]):.3g} "
                        f"median {np.exp(np.median(logd)):.3g} "
                        f"in50 {int(hits[0.5][q][-1])} in90 {int(hits[0.9][q][-1])}")
        s = fit.summary()
        rh = [v["r_hat"] for v in s.values() if np.isfinite(v["r_hat"])]
        diag["rhat_max"].append(max(rh) if rh else float("nan"))
        diag["divergences"].append(fit.divergences)
        diag["wall_s"].append(wall)
        diag["n_censored"].append(int(df["diverged"].sum()))
        print(f"[{k + 1}/{args.datasets}] seed {seed}: " + "; ".join(line)
              + f"; R-hat max {diag['rhat_max'][-1]:.3f}, {fit.divergences} div, {wall:.1f} s", flush=True)

    n = args.datasets
    cov = {f"coverage_{int(ci * 100)}": {q: float(np.mean(v)) for q, v in hits[ci].items()} for ci in hits}
    se = {f"se_{int(ci * 100)}": float(np.sqrt(ci * (1 - ci) / n)) for ci in hits}
    rmax = np.asarray(diag["rhat_max"], float)
    out = {**cov, "n_datasets": n, **se, "design": args.design, "n_runs_per_dataset": len(design),
           "target": {"N": N_T, "D": D_T, "N_ratio": N_T / design["N"].max(), "D_ratio": D_T / design["D"].max()},
           "tau": "prior HalfNormal(0.3)" if args.tau_prior else {k: fixed[k] for k in ("tau_lr", "tau_b")},
           "size_scatter": (("prior: tau^2 ~ InverseGamma" if args.tau_prior else size_median)
                            if args.size_scatter else False),
           "method": args.method, "chains": args.chains, "warmup": args.warmup, "samples": args.samples,
           "rhat_max_median": float(np.nanmedian(rmax)), "fits_rhat_above_1.01": int(np.sum(rmax > 1.01)),
           "divergences_total": int(np.sum(diag["divergences"])),
           "censored_runs_mean": float(np.mean(diag["n_censored"])),
           "fit_wall_s_median": float(np.median(diag["wall_s"])), "total_wall_s": time.perf_counter() - t_all}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
