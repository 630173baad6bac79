"""Time repeated NUTS fits of one model to different data of the same shapes (issue #8, fitting speed).

What a calibration study, a test suite or a notebook does: fit the same model again and again to tables of
the same size. Each scenario runs in a fresh Python process; all share one new, empty persistent compilation
cache:

- process 1: fit table A (cold: nothing compiled yet), then table B in the same process (new data, same
  shapes);
- process 2: fit table C (new process, new data, the persistent cache from process 1).

Tables B and C are A's design re-simulated from the model's `true_params` with other noise seeds. For each
fit: wall and CPU seconds, MAP and NUTS seconds, draws per second of the NUTS phase, and the number of XLA
compilations (and their seconds) that were not persistent-cache hits.

    python benchmarks/fit_speed.py [--data data/simulated_chinchilla.csv --format FORMAT --model chinchilla
                                    --chains 4 --warmup 500 --samples 500]

(Tables B and C keep A's N and D and take new losses from the model, so the model must simulate from a design
of those columns, as ``chinchilla`` does.)

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

CHILD = r"""
import json, sys, time
t_import = time.perf_counter()
import numpy as np
import scalinfer
from scalinfer.models import get_model
import jax.monitoring as mon

data, model, chains, warmup, samples = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
seeds = [int(s) for s in sys.argv[6].split(",")]
fmt = sys.argv[7] or None
log = {"compiles": 0, "compile_s": 0.0, "hits": 0, "pending_hit": False}

def on_event(event, **kw):
    if event == "/jax/compilation_cache/cache_hits":
        log["pending_hit"] = True

def on_duration(event, secs, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        if log["pending_hit"]:
            log["hits"] += 1
        else:
            log["compiles"] += 1
            log["compile_s"] += secs
        log["pending_hit"] = False

mon.register_event_listener(on_event)
mon.register_event_duration_secs_listener(on_duration)
m = get_model(model)
base = scalinfer.load_runs(data, format=fmt)
out = []
for seed in seeds:
    if seed == 0:
        runs = base
    else:
        df = m.simulate(m.true_params(), base.df[["N", "D"]], seed=seed)
        runs = scalinfer.load_runs(df)
    before = {k: log[k] for k in ("compiles", "compile_s", "hits")}
    t0, c0 = time.perf_counter(), time.process_time()
    f = scalinfer.fit(runs, model=model, chains=chains, warmup=warmup, samples=samples, seed=seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = f.summary()
    out.append({"table_seed": seed, "wall_s": wall, "cpu_s": cpu, **f.timings,
                "draws_per_s": chains * samples / f.timings["nuts_s"],
                "compiles": log["compiles"] - before["compiles"],
                "compile_s": log["compile_s"] - before["compile_s"], "cache_hits": log["hits"] - before["hits"],
                "min_ess_bulk": min(v["ess_bulk"] for v in s.values()),
                "max_r_hat": max(v["r_hat"] for v in s.values()), "divergences": f.divergences})
print(json.dumps(out))
"""


def run(cache: str, args, seeds: str) -> list[dict]:
    env = {**os.environ, "SCALINFER_CACHE": cache}
    res = subprocess.run([sys.executable, "-c", CHILD, str(args.data), args.model, str(args.chains),
                          str(args.warmup), str(args.samples), seeds, args.format or ""], capture_output=True, text=True, env=env)
    if res.returncode:
        sys.exit(res.stderr)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(ROOT / "data" / "simulated_chinchilla.csv"))
    p.add_argument("--format", default=None, help="the table's format (see scalinfer.load_runs), if not detected")
    p.add_argument("--model", default="chinchilla")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--samples", type=int, default=500)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        first = run(cache, args, "0,1")
        second = run(cache, args, "2")
    rows = [("process 1, table A (cold)", first[0]), ("process 1, table B (same process)", first[1]),
            ("process 2, table C (new process)", second[0])]
    print(f"{args.model} on {args.data}: {args.chains} chains x ({args.warmup} + {args.samples})")
    print(f"{'':36s} {'wall s':>7s} {'cpu s':>6s} {'map s':>6s} {'nuts s':>7s} {'draws/s':>8s} {'compiles':>8s} "
          f"{'compile s':>9s} {'hits':>5s} {'minESS':>7s}")
    for name, r in rows:
        print(f"{name:36s} {r['wall_s']:7.2f} {r['cpu_s']:6.1f} {r['map_s']:6.2f} {r['nuts_s']:7.2f} "
              f"{r['draws_per_s']:8.0f} {r['compiles']:8d} {r['compile_s']:9.2f} {r['cache_hits']:5d} {r['min_ess_bulk']:7.0f}")
    print(json.dumps({"model": args.model, "chains": args.chains, "warmup": args.warmup, "samples": args.samples,
                      "cold": first[0], "same_process": first[1], "new_process": second[0]}))


if __name__ == "__main__":
    main()
