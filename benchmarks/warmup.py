"""How close does NUTS's warmup come to the posterior's own geometry? (#25, #26: the quickstart's and the default
fit's leapfrog steps per draw)

For each table, `scalinfer.fit` at its defaults (4 chains x (500 warmup + 1,000 draws), more while not converged)
at each seed, then an oracle: NumPyro's NUTS on the same model, data and target acceptance, its dense mass matrix
fixed at the covariance of that fit's draws in the model's unconstrained coordinates (what a perfect warmup would
estimate), only its step size adapted (`--oracle-warmup` iterations), `--oracle-draws` draws from the fit's last
draw. Reported per fit: leapfrog steps per draw (mean over chains and draws), the oracle's, their ratio (1: the
warmup found the geometry; above 1: the mass matrix it left costs that factor in gradients), warmup's gradients,
R-hat max, bulk ESS min (scalar parameters), divergent transitions, NUTS's seconds (the first seed's include
compiling NUTS's program).

Tables (`TABLES`): the quickstart's (the project's calibration sweep, its MoE runs: `surface` with the size
scatter) and Step Law's dense table (all of it, the default `surface`).

Usage::

    nice -n 5 .venv/bin/python benchmarks/warmup.py [--tables quickstart,steplaw] [--seeds 0,1,2,3]

Prints the table, then as its LAST line one JSON object: ``fits`` (per fit: table, seed, steps_per_draw,
oracle_steps_per_draw, ratio, warmup_gradients, r_hat_max, ess_bulk_min, divergences, nuts_s) and, per table, the
median ratio (``median_ratio``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"

#: name -> (path, format, where, model)
TABLES = {
    "quickstart": (ROOT / "data" / "calibration" / "runs.jsonl", "jsonl", "arch != 'dense'", "surface"),
    "steplaw": (SHARED / "steplaw" / "dense_runs.csv", "steplaw", None, "surface"),
}


def _oracle_steps(fit, runs, seed: int, warmup: int, draws: int) -> float:
    """Mean leapfrog steps per draw of NumPyro's NUTS with the dense mass matrix fixed at the covariance of
    `fit`'s draws (unconstrained coordinates), its step size adapted over `warmup` iterations."""
    import jax
    import numpy as np
    from jax.flatten_util import ravel_pytree
    from numpyro.infer import MCMC, NUTS, init_to_value
    from numpyro.infer.util import unconstrain_fn

    m = fit.model
    with jax.enable_x64(True):
        data, constants = m.prepare(runs)
        kwargs = m.model_kwargs(data, constants)
        post = fit.arrays("posterior")
        latent = sorted(_latent_sites(m.model, kwargs))
        chains, n = np.shape(post[latent[0]])[:2]
        flat_draws = {k: np.asarray(post[k]).reshape(chains * n, *np.shape(post[k])[2:]) for k in latent}
        u = jax.jit(jax.vmap(lambda p: ravel_pytree(unconstrain_fn(m.model, (), kwargs, p))[0]))(flat_draws)
        cov = np.cov(np.asarray(u).T)
        last = {k: v[-1] for k, v in flat_draws.items()}
        kernel = NUTS(m.model, dense_mass=True, adapt_mass_matrix=False, inverse_mass_matrix=cov,
                      target_accept_prob=float(fit.attrs["target_accept"]), init_strategy=init_to_value(values=last))
        mcmc = MCMC(kernel, num_warmup=warmup, num_samples=draws, num_chains=1, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(seed), extra_fields=("num_steps",), **kwargs)
        return float(np.mean(mcmc.get_extra_fields()["num_steps"]))


def _latent_sites(model, kwargs) -> set[str]:
    from numpyro import handlers

    tr = handlers.trace(handlers.seed(model, 0)).get_trace(**kwargs)
    return {k for k, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", default=",".join(TABLES), help=f"comma-separated, of: {', '.join(TABLES)}")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--oracle-warmup", type=int, default=200)
    ap.add_argument("--oracle-draws", type=int, default=500)
    args = ap.parse_args(argv)
    import scalinfer.runtime

    scalinfer.runtime.configure(n_devices=4)
    import numpy as np

    import scalinfer

    rows = []
    for name in args.tables.split(","):
        if name not in TABLES:
            sys.exit(f"warmup: unknown table {name!r} (one of: {', '.join(TABLES)})")
        path, fmt, where, model = TABLES[name]
        runs = scalinfer.load_runs(path, format=fmt, where=where)
        for seed in (int(s) for s in args.seeds.split(",")):
            print(f"warmup: {name}, seed {seed} ...", file=sys.stderr, flush=True)
            f = scalinfer.fit(runs, model=model, seed=seed)
            s = f.summary()
            steps = f.arrays("sample_stats")["n_steps"]
            t = time.perf_counter()
            oracle = _oracle_steps(f, runs, seed, args.oracle_warmup, args.oracle_draws)
            rows.append({
                "table": name, "seed": seed, "draws": int(steps.shape[1]), "steps_per_draw": float(np.mean(steps)),
                "oracle_steps_per_draw": oracle, "ratio": float(np.mean(steps)) / oracle,
                "warmup_gradients": int(f.attrs["warmup_leapfrog_steps"]),
                "r_hat_max": max(v["r_hat"] for v in s.values()),
                "ess_bulk_min": min(v["ess_bulk"] for v in s.values()),
                "divergences": int(f.divergences), "nuts_s": round(float(f.timings["nuts_s"]), 1),
                "oracle_s": round(time.perf_counter() - t, 1)})
    print("| table | seed | draws | steps/draw | oracle's | ratio | warmup gradients | R-hat max | ESS bulk min "
          "| divergent | NUTS s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['table']} | {r['seed']} | {r['draws']} | {r['steps_per_draw']:.1f} | "
              f"{r['oracle_steps_per_draw']:.1f} | {r['ratio']:.2f} | {r['warmup_gradients']} | {r['r_hat_max']:.3f} | "
              f"{r['ess_bulk_min']:.0f} | {r['divergences']} | {r['nuts_s']} |")
    medians = {t: statistics.median(r["ratio"] for r in rows if r["table"] == t) for t in dict.fromkeys(
        r["table"] for r in rows)}
    print(json.dumps({"median_ratio": medians, "fits": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
