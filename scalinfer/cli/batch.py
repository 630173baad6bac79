"""``scalinfer compare`` and ``schedule``: rank fits by PSIS-LOO; a batch-size schedule from a fit.

    scalinfer compare FIT1.nc FIT2.nc ... [--json]
    scalinfer schedule FIT.nc --N X --D Y [--max-batch B] [--every TOKENS] [--lr PEAK]
                       [--multiple-of TOKENS] [--decay-fraction F] [--plot PNG] [--json] [-o FILE] [--force]

``compare`` ranks fits of the same data by PSIS-LOO (`scalinfer.inference.compare.compare_fits`) and
refuses fits of different data. ``schedule`` builds a batch-size schedule that follows B_opt along the run
(`scalinfer.schedules.batch.batch_schedule`) and writes it, with its WSD learning-rate schedule, in the
trainer's file format (``scalinfer.schedule/1``).
"""

from __future__ import annotations

import argparse
import math
import sys

from scalinfer.cli._args import (DECAY_SHAPES, add_force, add_strict, count, exit_code, fit_labels, fit_path,
                                 positive, print_json)

__all__ = ["register", "cmd_compare", "cmd_schedule"]


def cmd_compare(args: argparse.Namespace) -> int:
    from scalinfer.inference.compare import compare_fits, loo_table

    table = compare_fits(fit_labels(args.fits))
    if args.json:
        rows = [{"fit": k, **{c: (v.item() if hasattr(v, "item") else v) for c, v in r.items()}}
                for k, r in table.iterrows()]
        print_json({"comparison": rows, "criterion": "PSIS-LOO elpd (higher is better)"})
        return exit_code(args, table[table["bad_k"] > 0])
    print(loo_table(table))
    bad = table[table["bad_k"] > 0]
    for name, r in bad.iterrows():
        print(f"warning: {name}: {r['bad_k']} of {r['n_obs']} observations have Pareto k > 0.7; "
              "their LOO estimate is unreliable")
    return exit_code(args, bad)


def cmd_schedule(args: argparse.Namespace) -> int:
    from scalinfer._io import check_output
    from scalinfer.inference import load_fit

    if args.output:
        check_output(args.output, inputs=[args.fit], force=args.force, what="schedule file")
    if args.plot:
        check_output(args.plot, inputs=[args.fit, args.output], force=args.force, what="figure")
    from scalinfer.schedules.batch import batch_schedule, write_schedule

    f = load_fit(args.fit)
    sched = batch_schedule(f, N=args.N, D=args.D, max_batch=args.max_batch, every=args.every, lr_peak=args.lr,
                           warmup_fraction=args.warmup_fraction, decay_fraction=args.decay_fraction,
                           decay_shape=args.decay_shape, multiple_of=args.multiple_of)
    if args.output:
        path = write_schedule(sched, args.output)
        print(f"wrote {path}", file=sys.stderr)
    if args.plot:
        from scalinfer.plots import plot

        path = plot(f, "batch-schedule", output=args.plot, schedule=sched)
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print_json(sched.to_dict())
        return exit_code(args, sched.warnings)
    print(f"batch schedule for N = {sched.N:.4g}, D = {sched.D:.4g} tokens ({sched.model})")
    print(f"{'from_tokens':>12} {'to_tokens':>12} {'exp. loss':>9} {'B_min':>10} {'B_opt':>10} {'batch':>10}")
    for s in sched.segments:
        loss = "decay" if not math.isfinite(s.loss) else f"{s.loss:.4f}"
        b_min = "" if not math.isfinite(s.batch_min) else f"{s.batch_min:.4g}"
        b_opt = "" if not math.isfinite(s.batch_opt) else f"{s.batch_opt:.4g}"
        print(f"{s.from_tokens:>12.4g} {s.to_tokens:>12.4g} {loss:>9} {b_min:>10} {b_opt:>10} {s.batch_tokens:>10d}")
    if sched.lr:
        lr = sched.lr
        print(f"lr: peak {lr['peak']:g}, warmup {lr['warmup_tokens']:.4g} tokens, {lr['decay_shape']} decay from "
              f"{lr['decay_start_tokens']:.4g} to {lr['total_tokens']:.4g} tokens "
              f"(final {lr['final_fraction']:g} x peak)")
    for w in sched.warnings:
        print(f"warning: {w}")
    return exit_code(args, sched.warnings)


def register(subparsers) -> None:
    """Add ``compare`` and ``schedule``."""
    s = subparsers.add_parser("compare", help="rank fits of the same data by PSIS-LOO")
    s.add_argument("fits", nargs="+", metavar="FIT", type=fit_path, help="fit files (netCDF) of the same data")
    s.add_argument("--json", action="store_true")
    add_strict(s)
    s.set_defaults(func=cmd_compare)

    s = subparsers.add_parser("schedule", help="a batch-size (and WSD LR) schedule that follows B_opt along a run")
    s.add_argument("fit", type=fit_path, help="a batch-floor or batch-wsd fit file")
    s.add_argument("--N", type=positive, required=True, help="parameters of the run (as the fit counts them)")
    s.add_argument("--D", type=positive, required=True, help="training tokens of the run")
    s.add_argument("--max-batch", type=positive, default=None, help="largest batch the hardware takes (tokens)")
    s.add_argument("--every", type=positive, default=None,
                   help="tokens between batch changes (default: an eighth of the stable phase)")
    s.add_argument("--lr", type=positive, default=None,
                   help="peak learning rate (default: the fitted runs' LR if they share one)")
    s.add_argument("--multiple-of", type=count, default=1, help="round batches to a multiple of this (tokens)")
    s.add_argument("--warmup-fraction", type=float, default=0.01, help="LR warmup as a fraction of D (0.01)")
    s.add_argument("--decay-fraction", type=float, default=0.2, help="LR decay as a fraction of D (0.2)")
    s.add_argument("--decay-shape", default="linear", choices=DECAY_SHAPES)
    s.add_argument("--plot", default=None, help="also save a figure of the schedule (PNG, PDF...)")
    s.add_argument("--json", action="store_true")
    s.add_argument("-o", "--output", default=None, help="write the schedule file the trainer reads (JSON)")
    add_force(s)
    add_strict(s)
    s.set_defaults(func=cmd_schedule)
