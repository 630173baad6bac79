"""Does every model converge at the CLI's defaults on every bundled or published table it applies to? (#25)

Fits each (dataset, model) pair a user would try first, as ``scalinfer fit TABLE --model M -o FIT.nc`` does
(`scalinfer.fit` at its defaults: the model's method, 4 chains x (500 warmup + 1,000 draws, and 1,000 more at
a time up to 4,000 while R-hat or bulk ESS fails), seed 0; one CPU device per chain, as the CLI asks), and prints
a table: draws per chain, R-hat max and bulk ESS min over the scalar parameters, divergent transitions, wall
seconds. A NUTS pair has converged when R-hat <= 1.01, bulk ESS >= 400 and fewer
than 0.5% of its transitions diverged (the thresholds of `scalinfer.inference.fit.Fit.warnings` and the
issue's). ``classic`` is fit by the bootstrap: it has no chains to disagree, and its row reports its wall
time alone (converged when it fits).

Pairs (`PAIRS`; the published tables read in place from ``../shared/datasets/``):

- ``chinchilla`` on Epoch AI's Chinchilla points and on ``data/simulated_chinchilla.csv``;
- ``surface`` on Step Law's dense table (all of it), on (Mis)Fitting, and on the project's calibration sweep
  (its MoE runs, as the quickstart fits it);
- ``batch-openai``, ``batch-wsd`` and ``batch-floor`` on Zhang et al.'s steps-to-target table;
- ``classic`` on the three LR x batch tables above.

Usage::

    nice -n 10 .venv/bin/python benchmarks/defaults.py [--pairs NAME,NAME] [--list]

Prints the table, then as its LAST line one JSON object: ``not_converged`` (the count of pairs that have not),
``pairs`` (per pair: model, dataset, runs, method, draws (per chain), r_hat_max, ess_bulk_min, divergences,
divergent_pct, wall_s, converged, worst, warnings) and ``settings``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"
#: the CLI's defaults (``scalinfer fit --help``)
CHAINS, WARMUP, SAMPLES, MAX_SAMPLES, SEED = 4, 500, 1000, 4000, 0
RHAT_MAX, ESS_MIN, DIVERGENT_MAX_PCT = 1.01, 400, 0.5


@dataclass(frozen=True)
class Pair:
    """A (dataset, model) pair: where the table is, how `scalinfer.load_runs` reads it, which rows."""

    dataset: str
    model: str
    path: Path
    format: str | None = None
    where: str | None = None

    @property
    def name(self) -> str:
        return f"{self.model}/{self.dataset}"


_STEPLAW = SHARED / "steplaw" / "dense_runs.csv"
_MISFITTING = SHARED / "misfitting_li2025"
_CALIBRATION = ROOT / "data" / "calibration" / "runs.jsonl"
_ZHANG = SHARED / "critical_batch_size_zhang2024"

PAIRS = (
    Pair("epoch", "chinchilla", SHARED / "chinchilla_epoch2024" / "points.csv", "chinchilla"),
    Pair("simulated", "chinchilla", ROOT / "data" / "simulated_chinchilla.csv"),
    Pair("calibration", "surface", _CALIBRATION, "jsonl", "arch != 'dense'"),
    Pair("misfitting", "surface", _MISFITTING, "misfitting"),
    Pair("steplaw-dense", "surface", _STEPLAW, "steplaw"),
    Pair("zhang", "batch-openai", _ZHANG),
    Pair("zhang", "batch-wsd", _ZHANG),
    Pair("zhang", "batch-floor", _ZHANG),
    Pair("calibration", "classic", _CALIBRATION, "jsonl", "arch != 'dense'"),
    Pair("misfitting", "classic", _MISFITTING, "misfitting"),
    Pair("steplaw-dense", "classic", _STEPLAW, "steplaw"),
)


def fit_pair(pair: Pair) -> dict:
    """Fit one pair at the defaults; its row of the table."""
    import numpy as np

    import scalinfer

    runs = scalinfer.load_runs(pair.path, format=pair.format, where=pair.where)
    t0 = time.perf_counter()
    f = scalinfer.fit(runs, model=pair.model, chains=CHAINS, warmup=WARMUP, seed=SEED)  # samples: the defaults
    wall = time.perf_counter() - t0
    row = {"model": pair.model, "dataset": pair.dataset, "runs": len(runs), "method": f.method,
           "wall_s": round(wall, 1), "warnings": f.warnings()}
    if f.method != "nuts":
        return {**row, "draws": None, "r_hat_max": None, "ess_bulk_min": None, "divergences": None,
                "divergent_pct": None,
                "worst": None, "converged": True}
    s = f.summary()
    rhat = {k: v["r_hat"] for k, v in s.items() if np.isfinite(v["r_hat"])}
    ess = {k: v["ess_bulk"] for k, v in s.items() if np.isfinite(v["ess_bulk"])}
    worst = max(rhat, key=rhat.get)
    n = f.posterior.sizes["chain"] * f.posterior.sizes["draw"]
    pct = 100 * f.divergences / n
    converged = rhat[worst] <= RHAT_MAX and min(ess.values()) >= ESS_MIN and pct < DIVERGENT_MAX_PCT
    return {**row, "draws": f.posterior.sizes["draw"], "r_hat_max": round(rhat[worst], 4),
            "ess_bulk_min": round(min(ess.values())),
            "divergences": f.divergences, "divergent_pct": round(pct, 2),
            "worst": f"{worst} (R-hat), {min(ess, key=ess.get)} (ESS)", "converged": bool(converged)}


def _cell(v, fmt: str) -> str:
    return "-" if v is None or isinstance(v, float) and math.isnan(v) else format(v, fmt)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=None, help="comma-separated pair names (model/dataset; default: all)")
    ap.add_argument("--list", action="store_true", help="list the pairs and exit")
    args = ap.parse_args(argv)
    if args.list:
        for p in PAIRS:
            print(p.name)
        return {}
    chosen = PAIRS if args.pairs is None else [p for p in PAIRS if p.name in args.pairs.split(",")]
    unknown = set(args.pairs.split(",")) - {p.name for p in PAIRS} if args.pairs else set()
    if unknown:
        raise SystemExit(f"unknown pair(s) {sorted(unknown)}; --list shows them")

    import scalinfer.runtime

    scalinfer.runtime.configure(CHAINS)  # as the CLI: a device per chain, float64, the persistent cache
    rows: dict[str, dict] = {}
    for p in chosen:
        if not p.path.exists():
            print(f"{p.name}: skipped ({p.path} is not on this machine)", file=sys.stderr, flush=True)
            continue
        print(f"{p.name}: fitting", file=sys.stderr, flush=True)
        rows[p.name] = fit_pair(p)
        r = rows[p.name]
        print(f"{p.name}: {r['wall_s']} s, R-hat max {r['r_hat_max']}, ESS min {r['ess_bulk_min']}, "
              f"{r['divergences']} divergent", file=sys.stderr, flush=True)

    print(f"\nAt the CLI's defaults: {CHAINS} chains x ({WARMUP} warmup + {SAMPLES} draws, up to {MAX_SAMPLES} while "
          f"not converged), seed {SEED}. Converged: R-hat <= {RHAT_MAX}, bulk ESS >= {ESS_MIN}, divergent < "
          f"{DIVERGENT_MAX_PCT}% (NUTS).\n")
    print("| model | dataset | runs | method | draws | R-hat max | ESS bulk min | divergent | wall s | converged |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows.values():
        div = "-" if r["divergences"] is None else f"{r['divergences']} ({r['divergent_pct']}%)"
        print(f"| {r['model']} | {r['dataset']} | {r['runs']} | {r['method']} | {_cell(r['draws'], 'd')} | "
              f"{_cell(r['r_hat_max'], '.3f')} | "
              f"{_cell(r['ess_bulk_min'], '.0f')} | {div} | {r['wall_s']:.0f} | "
              f"{'yes' if r['converged'] else '**no**'} |")
    report = {"not_converged": sum(not r["converged"] for r in rows.values()), "pairs": rows,
              "settings": {"chains": CHAINS, "warmup": WARMUP, "samples": SAMPLES, "max_samples": MAX_SAMPLES,
                           "seed": SEED}}
    print(json.dumps(report, default=str))
    return report


if __name__ == "__main__":
    main()
