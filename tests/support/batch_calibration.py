"""One data set of the batch-floor calibration: simulate loss curves at a perturbed truth, fit, score.

Used by the batch tests (one data set) and by ``benchmarks/calibration_batch.py`` (many).
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["TARGET_N", "TARGET_TOKENS", "draw_truth", "one", "summarize", "true_batches"]

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
    `tokens`, and the two batches for it (closed forms of docs/laws.md section 5)."""
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
