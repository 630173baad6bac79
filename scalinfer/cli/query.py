"""``scalinfer summary``, ``predict`` and ``plot``: read a saved fit.

    scalinfer summary FIT.nc [--json] [--strict]
    scalinfer predict FIT.nc --N X --D Y [--ci 0.9] [--lr A --batch B] [--target-loss L] [--grid] [--json]
                      [--strict]
    scalinfer predict --baseline steplaw|deepseek|zhou2026 --N X --D Y [--json]
    scalinfer predict --fits A.nc B.nc [...] --N X [--target-loss L ...] [--json]

With ``--strict`` a command whose answer carries a warning exits with code 3 after printing it
(`scalinfer.cli._args.exit_code`); bad input exits 2, as everywhere.
    scalinfer plot FIT.nc KIND -o FILE

None of these starts the trainer; ``summary`` and ``predict`` import only what reading the fit file and the
model's predictions need.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from scalinfer.cli._args import (BASELINES, PLOT_KINDS, add_force, add_strict, exit_code, fit_labels, fit_path, floats,
                                 print_json, range_or_floats)
from scalinfer.errors import ScalinferError

__all__ = ["register", "cmd_summary", "cmd_predict", "cmd_plot"]


def cmd_summary(args: argparse.Namespace) -> int:
    from scalinfer.inference import read_summary

    s = read_summary(args.fit)
    if args.json:
        s.pop("parameters")
        print_json(s)
        return exit_code(args, s["warnings"])
    draws = ""
    if s["method"] == "nuts" and "draws_per_chain" in s:  # (fit files before 2026-12-03 do not say)
        added = f" ({s['samples_extended']} added while not converged)" if s["samples_extended"] else ""
        draws = f", {s['chains']} chains x {s['draws_per_chain']} draws{added}"
    print(f"model {s['model']} ({s['method']}), {s['n_runs']} runs{draws}, {s['divergences']} divergences")
    print(f"{'parameter':>12} {'mean':>11} {'sd':>10} {'q05':>11} {'q50':>11} {'q95':>11} {'r_hat':>7} {'ess_bulk':>9}")
    for k, v in s["parameters"].items():
        print(f"{k:>12} {v['mean']:>11.4g} {v['sd']:>10.3g} {v['q05']:>11.4g} {v['q50']:>11.4g} {v['q95']:>11.4g} "
              f"{v['r_hat']:>7.3f} {v['ess_bulk']:>9.0f}")
    for w in s["warnings"]:
        print(f"warning: {w}")
    return exit_code(args, s["warnings"])


def _baseline(args: argparse.Namespace) -> dict[str, Any]:
    from scalinfer.laws import BASELINES as LAWS

    if args.baseline not in BASELINES or BASELINES[args.baseline] not in LAWS:
        raise ScalinferError(f"unknown baseline {args.baseline!r} (one of: {', '.join(BASELINES)})")
    if args.N is None or args.D is None:
        raise ScalinferError("--baseline needs --N and --D")
    for flag, v in (("--N", args.N), ("--D", args.D)):
        if isinstance(v, list):
            raise ScalinferError(f"--baseline answers at one point: give one value of {flag}, not {len(v)}")
    import numpy as np

    from scalinfer.quantities import describe

    lr_fn, batch_fn = LAWS[BASELINES[args.baseline]]
    out: dict[str, Any] = {"baseline": args.baseline}
    lr = float(np.asarray(lr_fn(args.N, args.D)))
    out["lr_opt"] = {"median": lr, "lo": lr, "hi": lr, **describe("lr_opt").entry()}
    if batch_fn is not None:
        b = float(np.asarray(batch_fn(args.N, args.D)))
        for name in ("batch_opt", "batch_loss_opt"):  # the peers' B*, under its old name (an alias) and its new one
            out[name] = {"median": b, "lo": b, "hi": b, **describe(name, "baseline").entry()}
    out["warnings"] = ["a closed-form peer law: a point value with no uncertainty"]
    if args.baseline == "zhou2026":
        # the paper's Eq. 6 does not state its units (docs/laws.md section 4): say which reading this is, and
        # what the other one gives
        in_millions = float(np.asarray(lr_fn(args.N / 1e6, args.D)))
        out["reading"] = ("N as given (raw non-embedding parameters: total or active, whichever you passed), D in "
                          "raw tokens")
        out["warnings"].append(f"the LR paper does not state the units of its law: this answer reads N and D as raw "
                               f"counts; with N in millions of parameters it is {in_millions:.3g} "
                               f"({in_millions / lr:.0f}x), and whether N is total or active is not stated either")
    return out


def cmd_predict(args: argparse.Namespace) -> int:
    if args.baseline:
        out = _baseline(args)
        if args.json:
            print_json(out)
        else:
            for k, v in out.items():
                if isinstance(v, dict):
                    print(f"{k}: {v['median']:.4g} {v['unit']}  ({v['definition']})")
                elif k != "warnings":
                    print(f"{k}: {v}")
            for w in out["warnings"]:
                print(f"warning: {w}")
        return exit_code(args, out["warnings"])
    if args.fits:
        return _predict_stacked(args)
    if not args.fit:
        raise ScalinferError("predict needs a fit file (or --fits, or --baseline)")
    import numpy as np

    from scalinfer.inference import load_fit

    f = load_fit(args.fit)
    given = _given(args)
    unknown = [k for k in given if k not in f.model.targets]
    if unknown:
        raise ScalinferError(f"model {f.model.name!r} does not take {_flags(unknown)} "
                             f"(it takes {_flags(f.model.targets)})")
    if args.grid:
        axes = [k for k in ("N", "D") if k in given]
        mesh = np.meshgrid(*[np.atleast_1d(given[k]) for k in axes], indexing="ij")
        given.update({k: m for k, m in zip(axes, mesh)})
    else:
        multi = [k for k, v in given.items() if isinstance(v, list) and k != "batch"]
        if multi:
            raise ScalinferError(f"--{multi[0].replace('_', '-')} has several values: add --grid for a table")
    pred = f.predict(ci=args.ci, sensitivity=args.sensitivity, **given)
    if args.grid:
        table = pred.to_frame()
        if args.json:
            print_json({"grid": json.loads(table.to_json(orient="records")), "ci": args.ci,
                        "warnings": list(pred.warnings)})
        else:
            print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
            for w in pred.warnings:  # beside the table, which stays a table for the tools it is piped to
                print(f"warning: {w}", file=sys.stderr)
        return exit_code(args, pred.warnings)
    if args.json:
        print_json(pred.to_dict())
    else:
        print(pred.to_text())
    return exit_code(args, pred.warnings)


def _given(args: argparse.Namespace) -> dict:
    given = {"N": args.N, "D": args.D, "C": args.C, "lr": args.lr, "batch": args.batch,
             "target_loss": args.target_loss}
    return {k: v for k, v in given.items() if v is not None}


def _predict_stacked(args: argparse.Namespace) -> int:
    """``predict --fits A B ...``: the stacked posterior of fits of one table (`stacked_prediction`)."""
    if args.fit:
        raise ScalinferError("predict: give either a fit file or --fits, not both")
    if args.grid:
        raise ScalinferError("predict --fits answers at one target: --grid is for a single fit")
    if len(args.fits) < 2:
        raise ScalinferError("predict --fits needs two or more fit files of the same table")
    from scalinfer.inference import load_fit
    from scalinfer.inference.compare import stacked_prediction

    loaded = {name: load_fit(path) for name, path in fit_labels(args.fits).items()}
    given = _given(args)
    for name, f in loaded.items():
        unknown = [k for k in given if k not in f.model.targets]
        if unknown:
            raise ScalinferError(f"{name}: model {f.model.name!r} does not take {_flags(unknown)} "
                                 f"(it takes {_flags(f.model.targets)})")
    pred, table = stacked_prediction(loaded, ci=args.ci, **given)
    stacking = {name: {"model": r["model"], "weight": float(r["weight"]), "elpd_loo": float(r["elpd_loo"]),
                       "elpd_diff": float(r["elpd_diff"]), "dse": float(r["dse"])} for name, r in table.iterrows()}
    if args.json:
        print_json({**pred.to_dict(), "stacking": stacking})
    else:
        print(pred.to_text())
        print("stacking weights (PSIS-LOO): " + ", ".join(f"{k} {v['weight']:.2f}" for k, v in stacking.items()))
    return exit_code(args, pred.warnings)


def _flags(names) -> str:
    return ", ".join("--" + k.replace("_", "-") for k in names)


def cmd_plot(args: argparse.Namespace) -> int:
    from scalinfer._io import check_output
    from scalinfer.inference import load_fit

    check_output(args.output, inputs=[args.fit], force=args.force, what="figure")
    from pathlib import Path

    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(args.output).suffix[1:].lower() or "png"
    if suffix not in formats:
        raise ScalinferError(f"figure {args.output}: no figure format '.{suffix}' (one of: {', '.join(formats)})")
    from scalinfer.plots import plot

    f = load_fit(args.fit)
    if args.kind == "rank" and f.posterior.sizes["chain"] < 2:
        raise ScalinferError(f"{args.fit}: a rank plot compares chains, and this {f.method} fit has one; "
                             "plot 'trace', or fit with NUTS (--method nuts, 2 or more --chains)")
    path = plot(f, args.kind, output=args.output)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def register(subparsers) -> None:
    """Add ``summary``, ``predict`` and ``plot``."""
    s = subparsers.add_parser("summary", help="posterior summary and diagnostics of a fit")
    s.add_argument("fit", type=fit_path)
    s.add_argument("--json", action="store_true")
    add_strict(s)
    s.set_defaults(func=cmd_summary)

    s = subparsers.add_parser(
        "predict", help="posterior predictions at a target scale",
        description="Posterior medians and credible intervals at a target scale, with the extrapolation ratios and "
                    "warnings: the fit's diagnostics, a target beyond 10x the data or below the smallest size, an "
                    "optimum outside or at the edge of the LRs or batches tried, a batch below one sequence or "
                    "above D, an LR above 1. Targets must be positive finite numbers (else exit 2). With --strict "
                    "the exit code is 3 when any warning fires (the answer is printed first).")
    s.add_argument("fit", nargs="?", type=fit_path, help="fit file (not needed with --fits or --baseline)")
    s.add_argument("--fits", nargs="+", type=fit_path, metavar="FIT",
                   help="two or more fits of the same table: answer with their stacked posterior (each fit's draws "
                        "mixed with its PSIS-LOO stacking weight; the quantities every fit defines alike)")
    s.add_argument("--N", type=range_or_floats, help="target parameters (non-embedding); LO:HI:K with --grid")
    s.add_argument("--D", type=range_or_floats, help="target training tokens; LO:HI:K with --grid")
    s.add_argument("--C", type=floats, help="compute budget in FLOPs (chinchilla: compute-optimal N, D)")
    s.add_argument("--lr", type=floats, help="a proposed peak learning rate: also predict its loss")
    s.add_argument("--batch", type=floats, help="batch size(s) in tokens (comma-separated)")
    s.add_argument("--target-loss", type=floats, help="target loss in nats/token (batch models)")
    s.add_argument("--ci", type=float, default=0.9, help="credible mass of the intervals (default 0.9)")
    s.add_argument("--grid", action="store_true", help="a table over the ranges given to --N and --D")
    s.add_argument("--sensitivity", action=argparse.BooleanOptionalAction, default=None,
                   help="each answer's power-scaling prior sensitivity, and a warning where the prior dominates it "
                        "(default: on at one target, off with --grid, whose cost grows with the cells)")
    s.add_argument("--baseline", default=None, help=f"a closed-form peer law: {', '.join(BASELINES)}")
    s.add_argument("--json", action="store_true")
    add_strict(s)
    s.set_defaults(func=cmd_predict)

    s = subparsers.add_parser("plot", help="save a figure of a fit")
    s.add_argument("fit", type=fit_path)
    s.add_argument("kind", help=f"figure kind, one of {', '.join(PLOT_KINDS)}")
    s.add_argument("-o", "--output", required=True, help="the figure file to write (format from the suffix)")
    add_force(s)
    s.set_defaults(func=cmd_plot)
