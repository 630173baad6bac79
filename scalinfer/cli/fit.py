"""``scalinfer fit``, ``simulate`` and ``quickstart``: fit a run table, draw one from a model, or both on the
bundled data.

    scalinfer fit RUNS --model M [--format F] [--where EXPR] [--method nuts|map|laplace|bootstrap]
                  [--chains C --warmup W --samples S --max-samples M --seed K] -o FIT.nc [--force]
    scalinfer simulate MODEL [--params JSON] [--seed K] -o RUNS.csv [--force]
    scalinfer quickstart [--json]

``--model`` is required: a run table does not say which law it was measured for (an LR x batch grid can be fit
by ``surface``, ``classic`` or a batch model, a table of N, D and loss by ``chinchilla``), and a default would
fit the wrong one without a word. The output path is checked before the table is read
(`scalinfer._io.check_output`: never an input, a folder or a device; an existing file only with ``--force``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from scalinfer.cli._args import FORMAT_NAMES, MODEL_NAMES, add_force, count, quiet, whole

__all__ = ["register", "cmd_fit", "cmd_simulate", "cmd_quickstart"]


def cmd_fit(args: argparse.Namespace) -> int:
    from scalinfer._io import check_output
    from scalinfer.runs import load_runs

    check_output(args.output, inputs=[args.runs], force=args.force, what="fit file")
    runs = load_runs(args.runs, format=args.format, where=args.where, n_kind=args.n_kind)
    from scalinfer.runtime import configure

    configure(n_devices=max(args.chains, 1))  # before JAX starts: a device per chain, float64, the cache
    from scalinfer.errors import ModelError
    from scalinfer.inference import fit
    from scalinfer.models import get_model

    from scalinfer.inference.fit import SAMPLES

    if args.max_samples is not None and args.max_samples < (args.samples or SAMPLES):
        raise ModelError(f"--max-samples {args.max_samples} is below --samples {args.samples or SAMPLES}: it is the "
                         "most draws per chain, the first --samples included")
    own = get_model(args.model).default_method
    if own != "nuts" and args.method not in (None, own):
        raise ModelError(f"model {args.model!r} is fit by {own} only (it has no Bayesian model): drop --method "
                         f"{args.method} or choose a Bayesian model")
    print(runs.report(), file=sys.stderr)

    options = {} if args.size_scatter is None else {"size_scatter": args.size_scatter}
    if args.design is not None:
        options["design"] = args.design
    if args.prior is not None:
        options["prior"] = args.prior
    if args.lr_valley_by_batch is not None:
        options["lr_valley_by_batch"] = args.lr_valley_by_batch
    f = fit(runs, model=args.model, method=args.method, chains=args.chains, warmup=args.warmup,
            samples=args.samples, max_samples=args.max_samples, seed=args.seed, quiet=quiet(),
            progress=args.progress, **options)
    path = f.save(args.output)
    for w in f.warnings():
        print(f"warning: {w}", file=sys.stderr)
    print(f"wrote {path} ({f.timings.get('total_s', 0):.1f} s)", file=sys.stderr)
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from scalinfer._io import check_output

    check_output(args.output, force=args.force, what="run table")
    check_output(f"{args.output}.manifest.json", force=args.force, what="manifest")
    from scalinfer.errors import ModelError
    from scalinfer.models import get_model
    from scalinfer.simulation import simulate, write_simulated

    params = None
    if args.params:
        try:
            params = json.loads(args.params)
        except json.JSONDecodeError as e:
            raise ModelError(f"--params: not JSON ({e})") from None
        if not isinstance(params, dict):
            raise ModelError(f"--params: expected a JSON object of parameters, got {args.params!r}")
        valid = get_model(args.model).true_params()
        unknown = sorted(set(params) - set(valid))
        if unknown:
            raise ModelError(f"--params: model {args.model!r} has no parameter {', '.join(map(repr, unknown))} "
                             f"(its parameters: {', '.join(valid)})")
        for k, v in params.items():
            number = isinstance(v, (int, float)) and not isinstance(v, bool) and _finite(v)
            if isinstance(valid[k], float) and not number:
                raise ModelError(f"--params: {k} must be a finite number, got {json.dumps(v)}")
            if isinstance(valid[k], dict) and not isinstance(v, dict):
                raise ModelError(f"--params: {k} must be a JSON object like the model's {json.dumps(valid[k])}")
        params = {**valid, **params}  # the ones not given keep the model's values
    runs = simulate(args.model, params=params, seed=args.seed)
    path = write_simulated(runs, args.output, model=args.model)
    print(f"wrote {path} ({len(runs)} simulated runs) and {path}.manifest.json", file=sys.stderr)
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from scalinfer.runtime import configure

    configure(n_devices=4)
    from scalinfer.quickstart import quickstart

    return quickstart(json_output=args.json, quiet=quiet())


def _finite(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer beyond float's range
        return False


def _seed(text: str) -> int:
    v = whole(text)
    if v >= 2 ** 32:
        raise argparse.ArgumentTypeError(f"{text!r}: a seed is below 2**32")
    return v


#: the most NUTS chains a fit takes: each runs on a CPU device of its own, which JAX creates at start-up
MAX_CHAINS = 128


def _chains(text: str) -> int:
    v = count(text)
    if v > MAX_CHAINS:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {MAX_CHAINS} chains (each gets a CPU device)")
    return v


def register(subparsers) -> None:
    """Add ``fit``, ``simulate`` and ``quickstart``."""
    s = subparsers.add_parser("fit", help="fit a model to a run table and save the posterior")
    s.add_argument("runs", help="run table: a CSV/Parquet/JSONL file or a dataset folder")
    s.add_argument("--model", required=True, choices=MODEL_NAMES,
                   help=f"the model to fit, one of {', '.join(MODEL_NAMES)} (required: see docs/models.md)")
    s.add_argument("--format", default=None, metavar="FORMAT",
                   help=f"table format, one of {', '.join(FORMAT_NAMES)} (default: detect from the columns)")
    s.add_argument("--where", default=None, help="pandas query selecting the runs to fit, e.g. 'N <= 6e8'")
    s.add_argument("--n-kind", default="total", choices=("total", "active"), help="MoE: N is total or active")
    s.add_argument("--design", default=None, choices=("full", "fixed_batch", "fixed_lr"),
                   help="surface: the sweep's design (default: from the table: one batch is fixed_batch, one LR "
                        "fixed_lr); full forces the whole surface")
    s.add_argument("--size-scatter", action=argparse.BooleanOptionalAction, default=None,
                   help="surface: each model size (distinct N) scatters around the laws, so predictions at a new "
                        "N carry that scatter (default: on with two or more sizes; --no-size-scatter fits the "
                        "laws alone, 1.5-1.7x faster, with intervals at a new N that leave that scatter out)")
    s.add_argument("--prior", default=None, choices=("population", "default"),
                   help="surface: the priors of the laws' exponents, the sizes' scatter and the valleys' shape: "
                        "population (default: learned across published sweeps, docs/models.md) or default (the "
                        "broad priors alone)")
    s.add_argument("--lr-valley-by-batch", action=argparse.BooleanOptionalAction, default=None,
                   help="surface: the LR valley's curvature and asymmetry move with the batch's distance from the "
                        "optimal batch (two parameters more; docs/models.md). Default: off, the separable valley")
    s.add_argument("--method", default=None, choices=("nuts", "map", "laplace", "bootstrap"),
                   help="nuts, map, laplace or bootstrap (default: the model's, nuts; classic: bootstrap only)")
    s.add_argument("--chains", type=_chains, default=4, help=f"NUTS chains, 1 to {MAX_CHAINS} (default 4)")
    s.add_argument("--warmup", type=whole, default=500, help="NUTS warmup steps per chain, >= 0 (default 500)")
    s.add_argument("--samples", type=count, default=None,
                   help="draws per chain, >= 1 (default 1000, and more while not converged: --max-samples)")
    s.add_argument("--max-samples", type=count, default=None,
                   help="where the draws have not converged (R-hat > 1.01 or bulk ESS < 400), draw half of "
                        "--samples more per chain at a time until they have or this many are drawn (default 4000 "
                        "with the default --samples, else --samples: exactly the draws asked for)")
    s.add_argument("--seed", type=_seed, default=0, help="random seed, 0 to 2**32 - 1 (default 0)")
    s.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="NUTS's progress bar on stderr (default: only when stderr is a terminal)")
    s.add_argument("-o", "--output", required=True, help="the fit file to write (netCDF)")
    add_force(s)
    s.set_defaults(func=cmd_fit)

    s = subparsers.add_parser("simulate", help="draw a run table from a model at known parameters")
    s.add_argument("model", choices=MODEL_NAMES, help=f"one of {', '.join(MODEL_NAMES)}")
    s.add_argument("--params", default=None,
                   help="JSON object of true parameters; those not given keep the model's values")
    s.add_argument("--seed", type=_seed, default=0, help="random seed, 0 to 2**32 - 1 (default 0)")
    s.add_argument("-o", "--output", required=True, help="CSV file to write (a .manifest.json goes beside it)")
    add_force(s)
    s.set_defaults(func=cmd_simulate)

    s = subparsers.add_parser("quickstart", help="fit the bundled calibration data and predict a larger run")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_quickstart)
