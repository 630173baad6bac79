"""The surface model's population prior (issue #22 item 1): fit each published family once, pool them, and
validate leave-one-family-out through the backtest's held-out-size scoring.

    nice -n 10 .venv/bin/python benchmarks/population_prior.py [--fits /tmp/popfit]
    nice -n 10 .venv/bin/python benchmarks/population_prior.py --validate [--max-folds 1] [--datasets a,b]

Without ``--validate``: each family of `FAMILY_FITS` is fitted with the broad default prior (``prior="default"``,
2 chains x (300 + 300), seed 0) into ``--fits`` (a fit already there is reused), its posterior of every
hyperparameter of `scalinfer.models.surface.population.SCALES` summarized (mean, sd on the pooling scale), and
the population fitted (`population_priors`). Prints each family's convergence, each hyperparameter's
likelihoods, population figures and prior, then the ``FAMILIES`` and ``POPULATION`` literals of
`scalinfer/models/surface/population.py` and, last, a JSON line.

With ``--validate``: for each backtest dataset (`backtest.DATASETS`), the population prior is refitted from
`FAMILIES` *without* that dataset's family (`DATASET_FAMILY`), and the backtest's folds (fit N <= N_k, score
every larger size's settings with `backtest.score_surface`) are run twice, with that prior and with
``prior="default"``, at the backtest's NUTS settings. Prints coverage_50/90 of lr_opt and batch_opt, the
interval widths and regret per ratio bin and per dataset for both, and a JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import backtest  # benchmarks/, the script's folder, is on sys.path
from backtest import DATASET_FAMILY, given_priors_model

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"

#: family -> (table, load_runs keywords); Step Law's MoE by active N (its total N of 4 configurations spans 0.3%)
FAMILY_FITS = {
    "steplaw-dense": (SHARED / "steplaw" / "dense_runs.csv", {"format": "steplaw"}),
    "steplaw-moe": (SHARED / "steplaw" / "moe_runs.csv", {"format": "steplaw-moe", "n_kind": "active"}),
    "misfitting": (SHARED / "misfitting_li2025", {"format": "misfitting"}),
    "calibration": (ROOT / "data" / "calibration" / "runs.jsonl", {"format": "jsonl", "where": "arch == 'moe-e8k2'"}),
}


def summarize(fit) -> dict[str, tuple[float, float]]:
    """Posterior (mean, sd) of each hyperparameter of `SCALES` the fit has, on its pooling scale."""
    from scalinfer.models.surface.population import SCALES

    draws = fit.draws()
    derived = fit.model.derived({k: v for k, v in draws.items()}, fit.constants)
    out = {}
    for name, (_, scale) in SCALES.items():
        x = draws.get(name, derived.get(name))
        if x is None:
            continue
        x = np.asarray(x, float)
        x = np.log(x) if scale == "log_tau" else np.log(x / (1 - x)) if scale == "logit" else x
        out[name] = (round(float(x.mean()), 4), round(float(x.std(ddof=1)), 4))
    return out


def fit_families(fits_dir: Path) -> tuple[dict, dict]:
    import scalinfer
    from scalinfer.inference.fit import load_fit

    fits_dir.mkdir(parents=True, exist_ok=True)
    families, info = {}, {}
    for name, (path, kw) in FAMILY_FITS.items():
        out = fits_dir / f"{name}.nc"
        t0 = time.process_time()
        if out.exists():
            f = load_fit(out)
        else:
            runs = scalinfer.load_runs(path, **kw)
            f = scalinfer.fit(runs, model="surface", prior="default", **FIT)
            f.save(out)
        s = f.summary()
        rhat = {k: v["r_hat"] for k, v in s.items() if np.isfinite(v["r_hat"])}
        worst = max(rhat, key=rhat.get)
        info[name] = {"n_runs": len(f.runs), "n_sizes": int(len(np.unique(f.runs["N"]))), "rhat_max": rhat[worst],
                      "rhat_worst": worst, "divergences": f.divergences, "cpu_s": time.process_time() - t0,
                      "file": str(out)}
        families[name] = summarize(f)
        print(f"{name:<15} {info[name]['n_runs']:>5} runs {info[name]['n_sizes']:>3} sizes  R-hat max "
              f"{rhat[worst]:.3f} ({worst}), {f.divergences} divergences", flush=True)
    return families, info


def print_population(families: dict) -> dict:
    from scalinfer.models.surface.population import LEFT_OUT, SCALES, likelihoods, population_priors

    priors, report = population_priors(families)
    print("\n* left out of the population: " + "; ".join(f"{k}: {v}" for k, v in LEFT_OUT.items()))
    print(f"\n{'hyperparameter':<16}{'default':>16}  {'families (likelihood mean +- sd)':<70}{'mu':>8}{'sigma':>7}"
          f"{'pred sd':>8}  prior")
    for name, r in report.items():
        lik = likelihoods(name, families)
        fams = ", ".join(f"{f[:8]}{'*' if f in LEFT_OUT else ''} " + ("-" if L is None else f"{L[0]:.2f}+-{L[1]:.2f}")
                         for f, L in lik.items())
        field = SCALES[name][0]
        print(f"{name:<16}{r['default'][0]:>8.2f}+-{r['default'][1]:<6.2f}  {fams:<70}{r['mu']:>8.2f}"
              f"{r['sigma']:>7.2f}{r['sd']:>8.2f}  {field} = {tuple(round(v, 4) for v in getattr(priors, field))}")
    return {"priors": dataclasses.asdict(priors), "report": report}


def literals(families: dict) -> None:
    """The ``FAMILIES`` and ``POPULATION`` literals of `scalinfer/models/surface/population.py`."""
    import textwrap

    from scalinfer.models.surface.population import SCALES, population_priors

    priors, _ = population_priors(families)
    print("\nFAMILIES: dict[str, dict[str, tuple[float, float]]] = {")
    for f, post in families.items():
        items = ", ".join(f'"{k}": {v!r}' for k, v in post.items())
        print(textwrap.fill(f'"{f}": {{{items}}},', 116, initial_indent="    ", subsequent_indent="        "))
    print("}")
    fields = dict.fromkeys(field for field, _ in SCALES.values())
    body = ", ".join(f"{k}={tuple(float(f'{v:.4g}') for v in getattr(priors, k))!r}" for k in fields)
    print(textwrap.fill(f"POPULATION = dataclasses.replace(PRIORS, {body})", 116, subsequent_indent="    "))


# ---- leave-one-family-out validation ------------------------------------------------------------------------
def validate(args) -> dict:
    import scalinfer
    from scalinfer.errors import ScalinferError
    from scalinfer.models.surface.population import FAMILIES, LEFT_OUT, population_priors

    if not FAMILIES:
        raise SystemExit("population.FAMILIES is empty: run this script without --validate first")
    by_name = {d.name: d for d in backtest.DATASETS}
    chosen = [by_name[n] for n in args.datasets.split(",")]  # in the order asked
    rows = {"population": [], "default": []}
    fits = []
    for ds in chosen:
        held_family = DATASET_FAMILY[ds.name]
        lofo, _ = population_priors(FAMILIES, exclude=(held_family, *LEFT_OUT))
        models = {"population": given_priors_model(lofo), "default": "surface"}
        full = ds.load().df
        sizes = sorted(float(n) for n in full["N"].unique())
        for k in backtest.folds_of(sizes, args.min_sizes, args.max_folds):
            N_k = sizes[k - 1]
            runs = ds.load(N_k)
            for prior, model in models.items():
                t0, c0 = time.perf_counter(), time.process_time()
                opts = {"prior": "default"} if prior == "default" else {}
                try:
                    f = scalinfer.fit(runs, model=model, chains=args.chains, warmup=args.warmup,
                                      samples=args.samples, seed=args.seed, **opts)
                except ScalinferError as e:
                    print(f"{ds.name} k={k} {prior}: ERROR {e}", flush=True)
                    continue
                rhat, worst = backtest.rhat_max(f)
                rec = {"dataset": ds.name, "k": k, "prior": prior, "held_out_family": held_family,
                       "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "rhat_max": rhat,
                       "rhat_worst": worst, "divergences": f.divergences, "load": os.getloadavg()[0]}
                fits.append(rec)
                print(f"{ds.name:<19}{k:>3}{N_k:>10.3g}  {prior:<11}{rec['wall_s']:>7.0f} s wall{rec['cpu_s']:>7.0f} s "
                      f"CPU  R-hat {rhat:.3f} ({worst}), {f.divergences} div, load {rec['load']:.1f}", flush=True)
                held = full[full["N"] > N_k * (1 + 1e-9)]
                for (N, D, group), _ in held.groupby(["N", "D", "group"], sort=True):
                    t = backtest.setting_truth(full, N, D, group, args.tie_tol)
                    rows[prior].append({"dataset": ds.name, "k": k, "ratio": float(N / N_k),
                                        "edge": t["edge_lr"] or t["edge_batch"],
                                        "methods": {"surface": backtest.score_surface(f, t, N, D, args.tie_tol,
                                                                                      args.seed)}})
    return {"rows": rows, "fits": fits}


def print_validation(rows: dict) -> dict:
    results = {p: backtest.by_bins_and_datasets(r, "surface") for p, r in rows.items()}
    head = (f"{'':<20}{'prior':<12}{'n':>4}{'90% lr':>8}{'90% B':>7}{'50% lr':>8}{'50% B':>7}{'w90 lr':>8}"
            f"{'w90 B':>7}{'log sc':>8}{'regret%':>9}")
    for key, title in (("bins", "by extrapolation ratio"), ("datasets", "by dataset")):
        print(f"\n{title} (population: fitted without the scored dataset's family)")
        print(head)
        print("-" * len(head))
        groups = [b["ratio"] for b in results["default"]["bins"]] if key == "bins" else list(results["default"][key])
        for g in groups:
            for p, res in results.items():
                a = next(b for b in res["bins"] if b["ratio"] == g) if key == "bins" else res[key].get(g)
                if not a or not a.get("n"):
                    continue
                c90, c50, w90 = a.get("coverage_90", {}), a.get("coverage_50", {}), a.get("width_90", {})
                f = backtest._f
                print(f"{g:<20}{p:<12}{a['n']:>4}{f(c90.get('lr_opt'), '.2f', 8)}{f(c90.get('batch_opt'), '.2f', 7)}"
                      f"{f(c50.get('lr_opt'), '.2f', 8)}{f(c50.get('batch_opt'), '.2f', 7)}"
                      f"{f(w90.get('lr_opt'), '.2f', 8)}{f(w90.get('batch_opt'), '.2f', 7)}"
                      f"{f(a.get('log_score'), '.2f', 8)}{f(a['regret'], '.2f', 9)}")
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fits", default="/tmp/popfit", help="folder of the families' fits (reused when there)")
    ap.add_argument("--validate", action="store_true", help="leave-one-family-out backtest, beside the default")
    ap.add_argument("--datasets", default=",".join(d.name for d in backtest.DATASETS))
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-sizes", type=int, default=2)
    ap.add_argument("--max-folds", type=int, default=None)
    ap.add_argument("--tie-tol", type=float, default=0.0025)
    args = ap.parse_args(argv)

    import scalinfer.runtime

    scalinfer.runtime.configure(n_devices=args.chains if args.validate else FIT["chains"])
    t0 = time.perf_counter()
    if args.validate:
        out = validate(args)
        results = print_validation(out["rows"])
        report = {"population": {k: results["population"][k] for k in ("bins", "datasets", "all")},
                  "default": {k: results["default"][k] for k in ("bins", "datasets", "all")},
                  "fits": out["fits"], "settings": {k: getattr(args, k) for k in (
                      "chains", "warmup", "samples", "seed", "min_sizes", "max_folds", "tie_tol", "datasets")}}
    else:
        families, info = fit_families(Path(args.fits))
        report = {"families": families, "fits": info, **print_population(families)}
        literals(families)
    report["wall_s"] = time.perf_counter() - t0
    print(f"\ntotal wall {report['wall_s']:.0f} s")
    print(json.dumps(report, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
