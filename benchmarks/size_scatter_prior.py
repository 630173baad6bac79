r"""How many model sizes make a 100x extrapolation's width the data's rather than the size-scatter prior's (#22).

#22 asks that the 90% lr_opt interval at N = 7e10 move by less than 2x when one prior's scale changes 10x. On
Step Law's dense runs with N <= 6e8 (four sizes within 0.4 decades) the population prior's size scatter,
tau_lr_size^2 ~ InverseGamma(1.637, 0.004976), breaks it: beta x10 widens the interval 13.4x, x0.1 narrows it
2.04x (`prior_sensitivity.py --refit`). This script asks whether any prior could pass on such data, and how
many sizes would let one, in the part of the surface model that sets that width: the sizes' levels of
log eta* about its law in N,

.. math::

    y_k = a + b\,(x_k - \bar x) + \tau z_k + s\,e_k, \qquad z_k, e_k \sim N(0, 1), \quad k = 1..K,

x_k = log N_k, s the precision of each size's level (the runs within a size pin it; 0.02 assumed), a flat
prior on a, b ~ N(-0.35, 0.62^2) (the population prior's N exponent). Given tau the posterior of (a, b) is
Gaussian and the marginal likelihood of tau exact; tau is integrated on a grid (log-spaced, 1e-3 to 10), so the
predictive of y at log 7e10 (a new size: its own tau z beside the law's uncertainty) is a mixture of Normals
and its 90% interval is read from the mixture's CDF. No sampling: each width is exact up to the grid.

Two prior families for tau, each at its scale x0.1, x1, x10:

- ``inverse-gamma``: tau^2 ~ InverseGamma(1.637, 0.004976 k), the shipped population prior, beta scaled (the
  issue's convention, as `Priors.scaled`);
- ``half-t``: tau ~ half-t with 3.27 degrees of freedom (2 alpha: the same right tail) and scale 0.06 k.

Data sets: K sizes log-spaced from 2.15e8 over 0.4 decades (Step Law's span) or 1 decade, true b = -0.6,
tau = 0.06 (Step Law's posterior, the population's median), 12 data sets per row, seed 1. Prints, per row,
the median base width (hi/lo) and the median and largest width ratios at x0.1 and x10; the last line is JSON.

    .venv/bin/python benchmarks/size_scatter_prior.py [--sets 12]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy import stats

TAU_GRID = np.exp(np.linspace(np.log(1e-3), np.log(10.0), 1500))
SLOPE_PRIOR = (-0.35, 0.62)        # the population prior's lr_exp_N (mean, sd)
LEVEL_SD = 0.02                    # s: a size's level, as the runs within it pin it
TRUE = {"b": -0.6, "tau": 0.06}
TARGET_N = 7e10
FAMILIES = {
    "inverse-gamma": lambda k: (lambda t: stats.invgamma.logpdf(t * t, 1.637, scale=0.004976 * k) + np.log(2 * t)),
    "half-t": lambda k: (lambda t: stats.t.logpdf(t / (0.06 * k), 3.27) - np.log(0.06 * k)),
}


def width(X: np.ndarray, y: np.ndarray, log_prior, x0: np.ndarray) -> float:
    """hi/lo of the 90% predictive interval of exp(y) at design row `x0`, tau integrated under `log_prior`."""
    P0 = np.diag([1e-6, 1.0 / SLOPE_PRIOR[1] ** 2])
    m0 = np.array([0.0, SLOPE_PRIOR[0]])
    log_w, mu, sd = [], [], []
    for t in TAU_GRID:
        v = t * t + LEVEL_SD ** 2
        C = np.linalg.inv(X.T @ X / v + P0)
        m = C @ (X.T @ y / v + P0 @ m0)
        r = y - X @ m
        log_w.append(-0.5 * len(y) * np.log(v) - 0.5 * r @ r / v - 0.5 * (m - m0) @ P0 @ (m - m0)
                     + 0.5 * np.linalg.slogdet(C)[1])
        mu.append(x0 @ m)
        sd.append(np.sqrt(x0 @ C @ x0 + t * t))
    lw = np.array(log_w) + log_prior(TAU_GRID) + np.log(TAU_GRID)   # a density in tau on a log-spaced grid
    w = np.exp(lw - lw.max())
    w /= w.sum()
    grid = np.linspace(-20.0, 20.0, 8001)
    cdf = (w[:, None] * stats.norm.cdf(grid[None], np.array(mu)[:, None], np.array(sd)[:, None])).sum(0)
    return float(np.exp(grid[np.searchsorted(cdf, 0.95)] - grid[np.searchsorted(cdf, 0.05)]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=12, help="simulated data sets per row")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    rows = []
    print(f"{'span':>5}{'K':>4}  {'prior':<14}{'base hi/lo':>11}{'x0.1':>7}{'x10':>7}{'x10 max':>9}{'passes':>8}")
    for span in (0.4, 1.0):
        for K in (3, 4, 6, 8, 12):
            x = np.log(10.0) * np.linspace(np.log10(2.15e8), np.log10(2.15e8) + span, K)
            X = np.c_[np.ones(K), x - x.mean()]
            x0 = np.array([1.0, np.log(TARGET_N) - x.mean()])
            ys = [X @ np.array([0.0, TRUE["b"]]) + rng.normal(0.0, np.hypot(TRUE["tau"], LEVEL_SD), K)
                  for _ in range(args.sets)]
            for name, family in FAMILIES.items():
                w = np.array([[width(X, y, family(k), x0) for k in (0.1, 1.0, 10.0)] for y in ys])
                lo, hi = w[:, 0] / w[:, 1], w[:, 2] / w[:, 1]
                row = {"span_decades": span, "sizes": K, "prior": name, "base_width": float(np.median(w[:, 1])),
                       "ratio_x0.1": float(np.median(lo)), "ratio_x10": float(np.median(hi)),
                       "ratio_x10_max": float(hi.max()), "ratio_x0.1_min": float(lo.min()),
                       "passes": bool(np.median(hi) < 2.0 and np.median(lo) > 0.5)}
                rows.append(row)
                print(f"{span:>5g}{K:>4}  {name:<14}{row['base_width']:>11.2f}{row['ratio_x0.1']:>7.2f}"
                      f"{row['ratio_x10']:>7.2f}{row['ratio_x10_max']:>9.2f}{'yes' if row['passes'] else 'no':>8}",
                      flush=True)
    print(json.dumps({"rows": rows, "sets": args.sets, "true": TRUE, "level_sd": LEVEL_SD,
                      "slope_prior": SLOPE_PRIOR, "wall_s": time.perf_counter() - t0}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
