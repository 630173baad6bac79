"""``scalinfer recommend``: the peak LR and batch to run at a target, from a ``surface`` fit.

    scalinfer recommend FIT.nc --N X --D Y [--batch B | --max-batch B] [--excess 0.005] [--prob 0.9]
                        [--lr A] [--ci 0.9] [--json]

The point of lowest posterior expected loss beside the median optimum, the near-optimal region, the expected
excess loss and what a batch costs; with ``--lr`` (and ``--batch``) the user's own choice
(`scalinfer.decide.recommend`, whose docstring defines each quantity).
"""

from __future__ import annotations

import argparse

from scalinfer.cli._args import add_strict, exit_code, fit_path, positive, print_json

__all__ = ["register", "cmd_recommend"]


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
