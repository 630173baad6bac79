"""Calibration of the batch-floor posterior: coverage of B_min and B_opt on simulated loss curves.

Each data set is drawn from the noise-floor model (MATH.md section 5) with parameters drawn at random
around `BatchFloor.true_params` (every exponent and coefficient perturbed, each model size off its power
laws by a random deviation), on `BatchFloor.default_design` (3 model sizes x 4 batch sizes of loss curves),
then fit with NUTS. At the middle model size and the target loss that the true token-efficient path reaches
after half that size's token budget, we record whether the true B_min and B_opt fall inside the posterior's
equal-tailed 50% and 90% intervals. A calibrated posterior covers about 50% and 90% of the time.

Usage::

    python benchmarks/calibration_batch.py [--datasets 40] [--chains 2] [--warmup 400] [--samples 400]

Prints one line per data set, a summary, and as its LAST line one JSON object with ``coverage_50`` and
``coverage_90`` (each ``{"batch_min": ..., "batch_opt": ...}``), their binomial standard errors, the
number of data sets and the time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: the middle model size of the default design, where coverage is measured, and its token budget / 2
TARGET_N = 3e8
TARGET_TOKENS = 5e9


def draw_truth(rng: np.random.Generator) -> dict:
    """Parameters of one simulated data set: `true_params` perturbed, with per-size deviations.

    Perturbations (log scale unless said): L_inf sd 0.03, a and c sd 0.3, their exponents of N +- 0.05
    (L_inf) / 0.2 (a, c) additive, alpha sd 0.15; per-size deviations with sd 0.01 (L_inf), 0.1 (a, c),
    the scales of the model's hierarchical priors' typical values.
    """
    from scalinfer.models.batch import FLOOR

    p = dict(FLOOR.true_params())
    p["L_inf"] *= np.exp(rng.normal(0, 0.03))
    p["a"] *= np.exp(rng.normal(0, 0.3))
    p["c"] *= np.exp(rng.normal(0, 0.3))
    p["alpha"] *= np.exp(rng.normal(0, 0.15))
    p["L_inf_N"] += rng.normal(0, 0.05)
    p["a_N"] += rng.normal(0, 0.2)
    p["c_N"] += rng.normal(0, 0.2)
    sizes = (1e8, 3e8, 1e9)
    p["dev_L_inf"] = {n: float(rng.normal(0, 0.01)) for n in sizes}
    p["dev_a"] = {n: float(rng.normal(0, 0.1)) for n in sizes}
    p["dev_c"] = {n: float(rng.normal(0, 0.1)) for n in sizes}
    return p


def true_batches(p: dict, N: float = TARGET_N, tokens: float = TARGET_TOKENS) -> tuple[float, float, float]:
    """(target loss, B_min, B_opt) of the truth at N: the loss the token-efficient path reaches after
    `tokens`, and the two batches for it (closed forms of MATH.md section 5)."""
    from scalinfer.models.batch import FLOOR

    L_inf, a, c, alpha = (float(np.asarray(v)) for v in FLOOR.truth(p, N))
    K = (1 + 1 / alpha) * (1 + alpha) ** (1 / alpha) * c * a ** (1 / alpha)
    target = L_inf + (K / tokens) ** (alpha / (1 + alpha))
    b_min = c / (target - L_inf)
    return target, b_min, (1 + 1 / alpha) * b_min


def one(seed: int, chains: int, warmup: int, samples: int, n_records: int = 10, return_fit: bool = False):
    """Simulate, fit and score one data set: a row of results (and the fit, with ``return_fit``)."""
    import scalinfer
    from scalinfer.models.batch import FLOOR
    from scalinfer.runs.schema import validate

    rng = np.random.default_rng(seed)
    design = FLOOR.default_design(n_records=n_records)
    for _ in range(100):
        # a truth whose first records lie above 30 nats/token (no real loss curve does; the run table refuses
        # it as a unit error) is drawn again, with the same generator
        p = draw_truth(rng)
        df = FLOOR.simulate(p, design, seed=seed)
        if df["loss"].max() <= 30.0:
            break
    runs = validate(df, f"simulated #{seed}", "curves", row_offset=None)
    t0 = time.perf_counter()
    fit = scalinfer.fit(runs, model="batch-floor", chains=chains, warmup=warmup, samples=samples, seed=seed)
    target, b_min, b_opt = true_batches(p)
    pred = fit.predict(N=TARGET_N, target_loss=target)
    row = {"seed": seed, "target_loss": target, "fit_s": time.perf_counter() - t0,
           "divergences": fit.divergences}
    for name, truth in (("batch_min", b_min), ("batch_opt", b_opt)):
        draws = np.asarray(pred[name], float)
        row[name] = truth
        for ci in (0.5, 0.9):
            lo, hi = np.quantile(draws, [(1 - ci) / 2, (1 + ci) / 2])
            row[f"{name}_in{int(ci * 100)}"] = bool(lo <= truth <= hi)
        row[f"{name}_median"] = float(np.median(draws))
    return (row, fit) if return_fit else row


def summarize(rows: list[dict]) -> dict:
    """Coverage of each interval over the data sets, with binomial standard errors."""
    n = len(rows)
    out: dict = {"n_datasets": n}
    for ci in (50, 90):
        cov = {q: float(np.mean([r[f"{q}_in{ci}"] for r in rows])) for q in ("batch_min", "batch_opt")}
        out[f"coverage_{ci}"] = cov
        out[f"se_{ci}"] = {q: float(np.sqrt(v * (1 - v) / n)) if n else float("nan") for q, v in cov.items()}
    out["divergences_per_fit"] = float(np.mean([r["divergences"] for r in rows])) if n else float("nan")
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=40)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--records", type=int, default=10, help="records per loss curve")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    for k in range(args.datasets):
        r = one(args.first_seed + k, args.chains, args.warmup, args.samples, args.records)
        rows.append(r)
        print(f"#{r['seed']}: L*={r['target_loss']:.4f}  B_min true {r['batch_min']:.4g} median "
              f"{r['batch_min_median']:.4g} in50 {r['batch_min_in50']} in90 {r['batch_min_in90']} | B_opt true "
              f"{r['batch_opt']:.4g} median {r['batch_opt_median']:.4g} in50 {r['batch_opt_in50']} in90 "
              f"{r['batch_opt_in90']} | {r['divergences']} div, {r['fit_s']:.0f} s", flush=True)
    out = summarize(rows)
    out["seconds"] = time.perf_counter() - t0
    out["settings"] = {"chains": args.chains, "warmup": args.warmup, "samples": args.samples,
                       "records": args.records, "first_seed": args.first_seed}
    print(f"coverage over {out['n_datasets']} data sets: 50% intervals B_min {out['coverage_50']['batch_min']:.2f}, "
          f"B_opt {out['coverage_50']['batch_opt']:.2f}; 90% intervals B_min {out['coverage_90']['batch_min']:.2f}, "
          f"B_opt {out['coverage_90']['batch_opt']:.2f}")
    print(json.dumps(out, allow_nan=False))
    return out


if __name__ == "__main__":
    main()
