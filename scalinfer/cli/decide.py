"""``scalinfer recommend`` and ``scalinfer suggest``: from a ``surface`` fit to a decision at a target.

    scalinfer recommend FIT.nc --N X --D Y [--batch B | --max-batch B] [--excess 0.005] [--prob 0.9]
                        [--lr A] [--ci 0.9] [--json]
    scalinfer suggest FIT.nc --N X --D Y [--candidates RUNS.csv] [--target lr_opt] [--picks K]
                      [--branches K [--decay-fraction 0.2]] [--top 10] [--out RANKED.csv] [--json]

``recommend``: the point of lowest posterior expected loss beside the median optimum, the near-optimal region,
the expected excess loss and what a batch costs; with ``--lr`` (and ``--batch``) the user's own choice
(`scalinfer.decide.recommend`, whose docstring defines each quantity). ``suggest``: the calibration runs to buy
next, ranked by the expected reduction of the target's posterior variance per FLOP (`scalinfer.suggest`);
``--candidates`` is a CSV with columns N, D, lr, batch (default: a grid around the fit's design); with
``--branches K`` each candidate is a run with K decay branches, valued and priced as one.
"""

from __future__ import annotations

import argparse

from scalinfer.cli._args import SUGGEST_DECAY_FRACTION as DECAY_FRACTION
from scalinfer.cli._args import SUGGEST_MAX_BRANCHES as MAX_BRANCHES
from scalinfer.cli._args import add_force, add_strict, count, exit_code, fit_path, positive, print_json

__all__ = ["register", "cmd_recommend", "cmd_suggest"]


def cmd_recommend(args: argparse.Namespace) -> int:
    from scalinfer.decide import recommend
    from scalinfer.inference import load_fit

    f = load_fit(args.fit)
    r = recommend(f, args.N, args.D, batch=args.batch, max_batch=args.max_batch, excess=args.excess,
                  prob=args.prob, lr=args.lr, ci=args.ci)
    if args.json:
        print_json(r.to_dict())
    else:
        print(r.to_text())
    return exit_code(args, r.warnings)


def cmd_suggest(args: argparse.Namespace) -> int:
    from scalinfer._io import atomic_write_with, check_output
    from scalinfer.errors import ScalinferError
    from scalinfer.inference import load_fit
    from scalinfer.suggest import suggest

    if args.out:
        check_output(args.out, inputs=[args.fit, args.candidates], force=args.force, what="ranked candidates")
    cands = None
    if args.candidates:
        import pandas as pd

        from scalinfer.suggest import check_candidates

        try:
            table = pd.read_csv(args.candidates)
        except (OSError, ValueError) as e:
            raise ScalinferError(f"--candidates {args.candidates}: not a readable CSV ({e})") from None
        cands = check_candidates(table)
    s = suggest(load_fit(args.fit), args.N, args.D, cands, target=args.target, ci=args.ci, picks=args.picks,
                branches=args.branches, decay_fraction=args.decay_fraction)
    if args.out:
        atomic_write_with(args.out, lambda tmp: s.table.to_csv(tmp, index=False))
    if args.json:
        print_json(s.to_dict(args.top))
    else:
        print(s.to_text(args.top))
    return exit_code(args, s.warnings)


def _branches(text: str) -> int:
    """A whole number of decay branches, 0 to `MAX_BRANCHES`."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of branches") from None
    if not 0 <= v <= MAX_BRANCHES:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0 to {MAX_BRANCHES} branches")
    return v


def _fraction(text: str) -> float:
    """A number strictly between 0 and 1."""
    v = positive(text)
    if not v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number between 0 and 1")
    return v


def register(subparsers) -> None:
    """Add ``recommend``."""
    s = subparsers.add_parser("recommend", help="the peak LR and batch to run at a target, and what they risk "
                                                "(surface fits)")
    s.add_argument("fit", type=fit_path, help="a fit file of the surface model")
    s.add_argument("--N", type=positive, required=True, help="target parameters (as fitted: non-embedding)")
    s.add_argument("--D", type=positive, required=True, help="target training tokens")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--batch", type=positive, help="a fixed batch in tokens per step: the LR for it and its "
                                                  "loss penalty against B* (with --lr: your choice's batch)")
    g.add_argument("--max-batch", type=positive, help="the largest batch allowed, tokens per step")
    s.add_argument("--excess", type=_fraction, default=0.005,
                   help="near-optimal: relative excess loss loss/loss* - 1 at most this (default 0.005 = 0.5%%)")
    s.add_argument("--prob", type=_fraction, default=0.9,
                   help="near-optimal: with posterior probability at least this (default 0.9)")
    s.add_argument("--lr", type=positive, help="a proposed peak LR: its expected excess loss and interval")
    s.add_argument("--ci", type=_fraction, default=0.9, help="credible mass of the intervals (default 0.9)")
    s.add_argument("--json", action="store_true")
    add_strict(s)
    s.set_defaults(func=cmd_recommend)

    s = subparsers.add_parser("suggest", help="the calibration runs to buy next: expected variance cut of the "
                                              "target's log lr_opt per FLOP (surface fits)")
    s.add_argument("fit", type=fit_path, help="a fit file of the surface model")
    s.add_argument("--N", type=positive, required=True, help="target parameters (as fitted: non-embedding)")
    s.add_argument("--D", type=positive, required=True, help="target training tokens")
    s.add_argument("--candidates", help="CSV of candidate runs with columns N, D, lr, batch (tokens per step); "
                                        "default: a grid around the fit's design")
    s.add_argument("--target", default="lr_opt", choices=("lr_opt", "batch_loss_opt", "loss_opt"),
                   help="the quantity at the target whose log variance to cut (default lr_opt)")
    s.add_argument("--picks", type=count, default=1,
                   help="how many runs to buy at once: chosen one after another, each scored given the ones "
                        "before it, so that two runs that teach the same thing are not both picked (default 1: "
                        "each candidate's value alone)")
    s.add_argument("--branches", type=_branches, default=0,
                   help=f"decay branches per candidate run, 0 to {MAX_BRANCHES}: each candidate is a WSD run to D that "
                        "also reports its loss at D/2, D/4, ... (as `scalinfer plan` lays runs out), valued for "
                        "all its records and priced with its branches' decays (default 0: one record per run)")
    s.add_argument("--decay-fraction", type=_fraction, default=DECAY_FRACTION,
                   help=f"with --branches: the share of a branch's tokens spent decaying (default {DECAY_FRACTION}, "
                        "plan's)")
    s.add_argument("--top", type=count, default=10, help="how many candidates to print (default 10)")
    s.add_argument("--out", help="write every candidate, ranked, as CSV")
    add_force(s)
    s.add_argument("--ci", type=_fraction, default=0.9, help="credible mass of the interval widths (default 0.9)")
    s.add_argument("--json", action="store_true")
    add_strict(s)
    s.set_defaults(func=cmd_suggest)
