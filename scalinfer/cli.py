"""The `scalinfer` command line. Thin: every command calls one library function a notebook can call too.

    scalinfer fit RUNS --model M [--format F] [--where EXPR] [--method nuts|map|laplace]
                  [--chains C --warmup W --samples S --seed K] -o FIT.nc
    scalinfer summary FIT.nc [--json]
    scalinfer predict FIT.nc --N X --D Y [--ci 0.9] [--lr A --batch B] [--target-loss L] [--grid] [--json]
    scalinfer predict FIT.nc --baseline steplaw|deepseek|zhou2026 --N X --D Y [--json]
    scalinfer plot FIT.nc KIND -o FILE
    scalinfer quickstart

With --json the JSON alone goes to stdout; progress goes to stderr when it is a terminal. Errors in the input
print one line `error: ...` to stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from typing import Any

from scalinfer.errors import ScalinferError

#: modules that add their own subcommands with `register(subparsers)`; each subparser sets `func`
_EXTENSIONS = ("scalinfer.train.cli", "scalinfer.train.sweep_cli", "scalinfer.batch_cli")


def _floats(text: str) -> float | list[float]:
    """'1e9' -> 1e9; '1e9,2e9' -> [1e9, 2e9]."""
    try:
        vals = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or a comma-separated list of numbers")
    if not vals or not all(math.isfinite(v) and v > 0 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive finite number(s)")
    return vals[0] if len(vals) == 1 else vals


def _range_or_floats(text: str):
    """'LO:HI:K' -> K log-spaced values (for --grid); else as `_floats`."""
    if ":" in text:
        try:
            lo, hi, k = text.split(":")
            lo, hi, k = float(lo), float(hi), int(k)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: a range is LO:HI:COUNT, e.g. 1e8:1e10:5")
        if not (lo > 0 and hi > 0 and k >= 1):
            raise argparse.ArgumentTypeError(f"{text!r}: LO and HI must be positive and COUNT >= 1")
        import numpy as np
        return list(np.geomspace(lo, hi, k))
    return _floats(text)


def _quiet() -> bool:
    return not sys.stderr.isatty()


def _print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, allow_nan=False, default=str)
    sys.stdout.write("\n")


# ---- commands ----------------------------------------------------------------------------------------------
def cmd_fit(args) -> int:
    from scalinfer.inference import fit
    from scalinfer.runs import load_runs

    runs = load_runs(args.runs, format=args.format, where=args.where, n_kind=args.n_kind)
    print(runs.report(), file=sys.stderr)
    options = {} if args.size_scatter is None else {"size_scatter": args.size_scatter}
    f = fit(runs, model=args.model, method=args.method, chains=args.chains, warmup=args.warmup,
            samples=args.samples, seed=args.seed, quiet=_quiet(), **options)
    path = f.save(args.output)
    for w in f.warnings():
        print(f"warning: {w}", file=sys.stderr)
    print(f"wrote {path} ({f.timings.get('total_s', 0):.1f} s)", file=sys.stderr)
    return 0


def cmd_summary(args) -> int:
    from scalinfer.inference import load_fit

    f = load_fit(args.fit)
    s = f.summary_dict()
    if args.json:
        s.pop("parameters")
        _print_json(s)
        return 0
    print(f"model {s['model']} ({s['method']}), {s['n_runs']} runs, {s['divergences']} divergences")
    print(f"{'parameter':>12} {'mean':>11} {'sd':>10} {'q05':>11} {'q50':>11} {'q95':>11} {'r_hat':>7} {'ess_bulk':>9}")
    for k, v in s["parameters"].items():
        print(f"{k:>12} {v['mean']:>11.4g} {v['sd']:>10.3g} {v['q05']:>11.4g} {v['q50']:>11.4g} {v['q95']:>11.4g} "
              f"{v['r_hat']:>7.3f} {v['ess_bulk']:>9.0f}")
    for w in s["warnings"]:
        print(f"warning: {w}")
    return 0


def _baseline(args) -> dict[str, Any]:
    from scalinfer.laws import BASELINES

    names = {"steplaw": "step_law", "deepseek": "deepseek_llm", "zhou2026": "zhou2026"}
    if args.baseline not in names or names[args.baseline] not in BASELINES:
        raise ScalinferError(f"unknown baseline {args.baseline!r} (one of: {', '.join(names)})")
    if args.N is None or args.D is None:
        raise ScalinferError("--baseline needs --N and --D")
    import numpy as np
    lr_fn, batch_fn = BASELINES[names[args.baseline]]
    out: dict[str, Any] = {"baseline": args.baseline}
    lr = float(np.asarray(lr_fn(args.N, args.D)))
    out["lr_opt"] = {"median": lr, "lo": lr, "hi": lr}
    if batch_fn is not None:
        b = float(np.asarray(batch_fn(args.N, args.D)))
        out["batch_opt"] = {"median": b, "lo": b, "hi": b}
    out["warnings"] = ["a closed-form peer law: a point value with no uncertainty"]
    return out


def cmd_predict(args) -> int:
    import numpy as np

    if args.baseline:
        out = _baseline(args)
        if args.json:
            _print_json(out)
        else:
            for k, v in out.items():
                print(f"{k}: {v['median']:.4g}" if isinstance(v, dict) else f"{k}: {v}")
        return 0
    from scalinfer.inference import load_fit

    f = load_fit(args.fit)
    given = {"N": args.N, "D": args.D, "C": args.C, "lr": args.lr, "batch": args.batch,
             "target_loss": args.target_loss}
    given = {k: v for k, v in given.items() if v is not None}
    unknown = [k for k in given if k not in f.model.targets]
    if unknown:
        raise ScalinferError(f"model {f.model.name!r} does not take {', '.join('--' + k.replace('_', '-') for k in unknown)} "
                             f"(it takes {', '.join('--' + t.replace('_', '-') for t in f.model.targets)})")
    if args.grid:
        axes = [k for k in ("N", "D") if k in given]
        mesh = np.meshgrid(*[np.atleast_1d(given[k]) for k in axes], indexing="ij")
        given.update({k: m for k, m in zip(axes, mesh)})
    else:
        multi = [k for k, v in given.items() if isinstance(v, list) and k != "batch"]
        if multi:
            raise ScalinferError(f"--{multi[0].replace('_', '-')} has several values: add --grid for a table")
    pred = f.predict(ci=args.ci, **given)
    if args.grid:
        table = pred.to_frame()
        if args.json:
            _print_json({"grid": json.loads(table.to_json(orient="records")), "ci": args.ci,
                         "warnings": list(pred.warnings)})
        else:
            print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        return 0
    out = pred.to_dict()
    if args.json:
        _print_json(out)
        return 0
    for k, v in out.items():
        if isinstance(v, dict) and "median" in v:
            unit = pred.units.get(k, "")
            print(f"{k:>18}: {_fmt(v['median'])}  [{_fmt(v['lo'])}, {_fmt(v['hi'])}]  {unit}")
    print(f"{'extrapolation':>18}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in out["extrapolation"].items()))
    for w in out["warnings"]:
        print(f"warning: {w}")
    return 0


def _fmt(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return "nan" if v is None else f"{v:.4g}"


def cmd_plot(args) -> int:
    from scalinfer.inference import load_fit
    from scalinfer.plots import plot

    f = load_fit(args.fit)
    path = plot(f, args.kind, output=args.output)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_simulate(args) -> int:
    from scalinfer.simulation import simulate, write_simulated

    params = json.loads(args.params) if args.params else None
    runs = simulate(args.model, params=params, seed=args.seed)
    path = write_simulated(runs, args.output, model=args.model)
    print(f"wrote {path} ({len(runs)} simulated runs) and {path}.manifest.json", file=sys.stderr)
    return 0


def cmd_quickstart(args) -> int:
    from scalinfer.quickstart import quickstart

    return quickstart(json_output=args.json, quiet=_quiet())


# ---- parser ------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from scalinfer import __version__
    from scalinfer.models import MODEL_NAMES

    p = argparse.ArgumentParser(prog="scalinfer", description="Bayesian scaling-law inference for LLM pre-training.")
    p.add_argument("--version", action="version", version=f"scalinfer {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("fit", help="fit a model to a run table and save the posterior")
    s.add_argument("runs", help="run table: a CSV/Parquet/JSONL file or a dataset folder")
    s.add_argument("--model", default="chinchilla", choices=MODEL_NAMES)
    s.add_argument("--format", default=None, help="table format (default: detect from the columns)")
    s.add_argument("--where", default=None, help="pandas query selecting the runs to fit, e.g. 'N <= 6e8'")
    s.add_argument("--n-kind", default="total", choices=("total", "active"), help="MoE: N is total or active")
    s.add_argument("--size-scatter", action=argparse.BooleanOptionalAction, default=None,
                   help="surface: each model size (distinct N) scatters around the laws, so predictions at a new "
                        "N carry that scatter (default: on with two or more sizes; --no-size-scatter fits the "
                        "laws alone, 1.5-1.7x faster, with intervals at a new N that leave that scatter out)")
    s.add_argument("--method", default=None, choices=("nuts", "map", "laplace", "bootstrap"))
    s.add_argument("--chains", type=int, default=4)
    s.add_argument("--warmup", type=int, default=500)
    s.add_argument("--samples", type=int, default=500, help="draws per chain")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("-o", "--output", required=True, help="the fit file to write (netCDF)")
    s.set_defaults(func=cmd_fit)

    s = sub.add_parser("summary", help="posterior summary and diagnostics of a fit")
    s.add_argument("fit")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_summary)

    s = sub.add_parser("predict", help="posterior predictions at a target scale")
    s.add_argument("fit", nargs="?", help="fit file (not needed with --baseline)")
    s.add_argument("--N", type=_range_or_floats, help="target parameters (non-embedding); LO:HI:K with --grid")
    s.add_argument("--D", type=_range_or_floats, help="target training tokens; LO:HI:K with --grid")
    s.add_argument("--C", type=_floats, help="compute budget in FLOPs (chinchilla: compute-optimal N, D)")
    s.add_argument("--lr", type=_floats, help="a proposed peak learning rate: also predict its loss")
    s.add_argument("--batch", type=_floats, help="batch size(s) in tokens (comma-separated)")
    s.add_argument("--target-loss", type=_floats, help="target loss in nats/token (batch models)")
    s.add_argument("--ci", type=float, default=0.9, help="credible mass of the intervals (default 0.9)")
    s.add_argument("--grid", action="store_true", help="a table over the ranges given to --N and --D")
    s.add_argument("--baseline", default=None, help="a closed-form peer law: steplaw, deepseek or zhou2026")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_predict)

    s = sub.add_parser("plot", help="save a figure of a fit")
    s.add_argument("fit")
    s.add_argument("kind", help="figure kind (see scalinfer.plots.KINDS)")
    s.add_argument("-o", "--output", required=True)
    s.set_defaults(func=cmd_plot)

    s = sub.add_parser("simulate", help="draw a run table from a model at known parameters")
    s.add_argument("model", choices=MODEL_NAMES)
    s.add_argument("--params", default=None, help="JSON object of true parameters (default: the model's)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("-o", "--output", required=True, help="CSV file to write (a .manifest.json goes beside it)")
    s.set_defaults(func=cmd_simulate)

    s = sub.add_parser("quickstart", help="fit the bundled calibration data and predict a larger run")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_quickstart)

    for name in _EXTENSIONS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if not e.name or not name.startswith(e.name):  # a missing dependency inside it is a real error
                raise
            continue
        mod.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "predict" and not args.baseline and not args.fit:
        print("error: predict needs a fit file (or --baseline)", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except ScalinferError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # no such file, a full disk, no permission...: the path and why, no traceback
        print(f"error: {e.filename or 'a file'}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
