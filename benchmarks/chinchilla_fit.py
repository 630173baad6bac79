"""Time the Chinchilla L(N, D) fit on Epoch AI's 245 points: wall, compile, sampling, ESS per second.

Each fit runs in a fresh Python process (as a user's first `scalinfer fit` would), twice, sharing a new,
empty persistent compilation cache: the first run is cold (XLA compiles everything), the second is warm
(compiled programs come from the cache). Compilation time is estimated as cold wall minus warm wall; sampling
time is the warm run's NUTS phase. ESS/s = min bulk ESS over the scalar parameters / sampling seconds.

    python benchmarks/chinchilla_fit.py [--chains 4 --warmup 500 --samples 500]

Prints a table, then as its last line one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "datasets" / "chinchilla_epoch2024" / "points.csv"

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import scalinfer
import scalinfer.runtime
scalinfer.runtime.configure(int(sys.argv[2]))  # as the CLI: a device per chain, float64, the persistent cache
runs = scalinfer.load_runs(sys.argv[1], format="chinchilla")
f = scalinfer.fit(runs, model="chinchilla", chains=int(sys.argv[2]), warmup=int(sys.argv[3]),
                  samples=int(sys.argv[4]), seed=0)
s = f.summary()
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, **f.timings, "min_ess_bulk": min(v["ess_bulk"] for v in s.values()),
                  "max_r_hat": max(v["r_hat"] for v in s.values()), "divergences": f.divergences,
                  "E": s["E"]["q50"], "alpha": s["alpha"]["q50"], "beta": s["beta"]["q50"]}))
"""


def run_once(cache: str, args) -> dict:
    env = {**os.environ, "SCALINFER_CACHE": cache}
    out = subprocess.run([sys.executable, "-c", CHILD, str(DATA), str(args.chains), str(args.warmup),
                          str(args.samples)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--samples", type=int, default=500)
    args = p.parse_args()
    if not DATA.exists():
        sys.exit(f"dataset not found: {DATA}")
    with tempfile.TemporaryDirectory() as cache:
        cold = run_once(cache, args)
        warm = run_once(cache, args)
    compile_s = max(cold["wall_s"] - warm["wall_s"], 0.0)
    ess_per_s = warm["min_ess_bulk"] / warm["nuts_s"]
    print(f"Chinchilla L(N, D) on {DATA.name} (245 points), {args.chains} chains x "
          f"({args.warmup} warmup + {args.samples} draws), NUTS, float64, dense mass, {os.cpu_count()} cores")
    print(f"{'run':<6} {'wall s':>8} {'MAP s':>7} {'NUTS s':>8} {'min ESS':>8} {'max R-hat':>9} {'div':>4}")
    for name, r in (("cold", cold), ("warm", warm)):
        print(f"{name:<6} {r['wall_s']:>8.1f} {r['map_s']:>7.1f} {r['nuts_s']:>8.1f} {r['min_ess_bulk']:>8.0f} "
              f"{r['max_r_hat']:>9.3f} {r['divergences']:>4d}")
    print(f"compile (cold - warm wall): {compile_s:.1f} s; sampling (warm NUTS phase): {warm['nuts_s']:.1f} s; "
          f"min bulk ESS per second of sampling: {ess_per_s:.0f}")
    print(f"posterior medians: E {warm['E']:.4f}, alpha {warm['alpha']:.4f}, beta {warm['beta']:.4f}")
    print(json.dumps({"cold_wall_s": round(cold["wall_s"], 2), "warm_wall_s": round(warm["wall_s"], 2),
                      "compile_s": round(compile_s, 2), "sampling_s": round(warm["nuts_s"], 2),
                      "map_s_cold": round(cold["map_s"], 2), "min_ess_bulk": round(warm["min_ess_bulk"], 1),
                      "ess_per_s": round(ess_per_s, 1), "max_r_hat": round(warm["max_r_hat"], 4),
                      "divergences": warm["divergences"]}))


if __name__ == "__main__":
    main()
