"""``scalinfer plan`` and ``scalinfer sweep``: design a calibration sweep, run it, merge it.

    scalinfer plan --size d32l2 --size d64l2 ... --target-N 1e7 --target-D 2e8 [--budget FLOPS]
                   [--prior steplaw|deepseek|zhou2026|FIT.nc] [--lrs 6 --lr-factor 2] [--decays 3]
                   [--batches 512,1024 | --batch-count 3] [--tokens T | --tokens-per-param R]
                   [-o SWEEP.toml [--force]] [--json]
    scalinfer sweep SWEEP.toml --out DIR [--workers K] [--delete-checkpoints]
    scalinfer sweep SWEEP.toml --out DIR --only RUN_ID|NAME      (or --index I: one run, in this process)
    scalinfer sweep --merge DIR [--export DEST]
    scalinfer sweep SWEEP.toml --list

A sweep re-run with the same ``--out`` skips finished runs and resumes interrupted ones. ``--only`` and
``--index`` let a scheduler launch one run per task (Slurm: ``--index $SLURM_ARRAY_TASK_ID``) on machines
that share ``DIR``; ``--merge`` then (re)builds ``DIR/runs.jsonl`` and ``DIR/manifest.json``. Exit codes:
0 every run done, 1 some runs failed, are unfinished or a worker died (rerun to resume), 2 bad input, 128 +
the signal's number when SIGINT (Ctrl-C) or SIGTERM stopped ``--only``'s or ``--index``'s run (after its step
in flight, with a checkpoint of it: a rerun loses nothing; a second signal stops it at once). With workers,
Ctrl-C stops each worker's run the same way (`scalinfer.sweep.runner`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from scalinfer.cli._args import PRESET_NAMES, add_force, ints, positive
from scalinfer.errors import TrainError

__all__ = ["register", "cmd_plan", "cmd_sweep", "worker_main"]


def cmd_plan(args: argparse.Namespace) -> int:
    from pathlib import Path

    from scalinfer._io import atomic_write_text, check_output

    if args.output:
        prior = args.prior if Path(args.prior).exists() else None
        check_output(args.output, inputs=[prior], force=args.force, what="sweep file")
    from scalinfer.sweep import PlanSpec, check_plan_configs, make_plan, parse_size
    from scalinfer.train.config import preset

    base = preset(args.preset).model
    sizes = [parse_size(s, base, what="--size") for spec in args.size for s in spec.split(",") if s.strip()]
    sizes += [parse_size(s if s.endswith("-dense") else f"{s}-dense", base, what="--dense")
              for spec in (args.dense or []) for s in spec.split(",") if s.strip()]
    spec = PlanSpec(
        sizes=tuple(sizes), target_N=args.target_N, target_D=args.target_D, prior=args.prior,
        lr_count=args.lrs, lr_factor=args.lr_factor, lr_scale=args.lr_scale, decay_count=args.decays,
        batches=args.batches or (), batch_count=args.batch_count,
        tokens=int(args.tokens) if args.tokens else None, tokens_per_param=args.tokens_per_param,
        budget_flops=args.budget, seed=args.seed, preset=args.preset, eval_tokens=args.eval_tokens,
        name=args.name)
    plan = make_plan(spec)
    configs = check_plan_configs(plan)
    if args.output:
        atomic_write_text(args.output, plan.to_toml())
    if args.json:
        json.dump(plan.summary(), sys.stdout, indent=2)
        print()
    else:
        print(plan.table())
    if args.output:
        print(f"wrote {args.output} ({len(configs)} runs)", file=sys.stderr)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from scalinfer._io import check_output_dir
    from scalinfer.sweep import export, load_sweep, merge, run_status, run_sweep
    from scalinfer.train.interrupt import stop_on_signal

    if args.merge:
        if args.sweep or args.out:
            raise TrainError("--merge DIR takes the sweep folder alone")
        if args.export:
            check_output_dir(args.export, inputs=[args.merge], what="export folder")
        res = merge(args.merge)
        _report(res, sys.stderr)
        if args.export:
            copied = export(args.merge, args.export)
            print(f"exported {len(copied)} finished runs (no checkpoints) to {args.export}", file=sys.stderr)
        return 0 if res.complete or not res.status else 1
    if args.export:
        raise TrainError("--export DEST goes with --merge DIR")
    if not args.sweep:
        raise TrainError("give a sweep file (scalinfer sweep SWEEP.toml --out DIR) or --merge DIR")
    if args.list:
        sweep = load_sweep(args.sweep)
        for r in sweep.runs:
            state = run_status(r, args.out).state if args.out else ""
            print(f"{r.index:>4}  {r.name:<40} {r.run_id:<50} {len(r.expected_ids)} records  {state}")
        return 0
    if not args.out:
        raise TrainError("scalinfer sweep needs --out DIR")
    check_output_dir(args.out, inputs=[args.sweep], what="sweep folder")
    one = args.only is not None or args.index is not None
    # one run in this process: a signal stops it after its step in flight, with a checkpoint (workers: their own)
    with stop_on_signal(enabled=one) as stop:
        res = run_sweep(args.sweep, args.out, workers=args.workers, only=args.only, index=args.index,
                        delete_checkpoints=args.delete_checkpoints, progress=args.progress,
                        stop_requested=stop)
    _report(res, sys.stderr, one=one)
    if one:
        sweep = load_sweep(args.sweep)
        run = sweep.find(args.only) if args.only is not None else sweep.runs[args.index]
        if res.status[run.name].state != "done" and stop.signal is not None:
            return 128 + stop.signal.value
        return 0 if res.status[run.name].state == "done" else 1
    return 0 if res.complete else 1


def _report(res, stream, one: bool = False) -> None:
    counts = res.counts()
    parts = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    print(f"merged {res.n_records} records into {res.table}" + (f" ({parts})" if parts and not one else ""),
          file=stream)
    for name, st in res.status.items():
        if st.state == "failed":
            print(f"failed: {name}: {st.error}", file=stream)
    for w in res.worker_failures:
        print(f"warning: {w}; rerun the same command to resume", file=stream)
    if res.extra:
        print(f"note: {len(res.extra)} run folder(s) not in the sweep file were merged too: "
              f"{', '.join(res.extra[:5])}{'...' if len(res.extra) > 5 else ''}", file=stream)


def register(subparsers) -> None:
    """Add ``plan`` and ``sweep``."""
    p = subparsers.add_parser("plan", help="design a calibration sweep (sizes x LRs x decay branches) and price it",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", action="append", required=True, metavar="SIZE",
                   help="a model size: preset (cal-s), shape (d64l2, d64l2h4, d48l2-dense) or N (2e5); "
                        "repeat or comma-separate")
    p.add_argument("--dense", action="append", metavar="SIZE", help="also plan the dense counterpart of SIZE")
    p.add_argument("--target-N", dest="target_N", type=positive, required=True,
                   help="target non-embedding parameters")
    p.add_argument("--target-D", dest="target_D", type=positive, required=True, help="target training tokens")
    p.add_argument("--budget", type=positive, help="FLOPs the whole sweep may cost")
    p.add_argument("--prior", default="steplaw",
                   help="law centring the LR grids: steplaw, deepseek, zhou2026, or a fit file (default steplaw)")
    p.add_argument("--lr-scale", type=positive, default=1.0, help="multiply the prior's LR (default 1)")
    p.add_argument("--lrs", type=int, default=6, help="C_eta: learning rates per size (default 6)")
    p.add_argument("--lr-factor", type=positive, default=2.0, help="ratio of neighbouring LRs (default 2)")
    p.add_argument("--decays", type=int, default=3, help="C_D: decay branches per run (default 3)")
    p.add_argument("--batches", type=ints, help="batch sizes in tokens, comma-separated")
    p.add_argument("--batch-count", type=int, default=1,
                   help="without --batches: this many batch sizes around the prior's B* (default 1)")
    p.add_argument("--tokens", type=positive, help="tokens per main run (D_max), the same for every size")
    p.add_argument("--tokens-per-param", type=positive,
                   help="D_max / N_total per size (default: the target's D / N)")
    p.add_argument("--eval-tokens", type=int, help="held-out tokens of each final evaluation")
    p.add_argument("--preset", default="cal-xs", choices=sorted(PRESET_NAMES), help="trainer defaults (default cal-xs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="calibration", help="the sweep's name")
    p.add_argument("-o", "--output", metavar="SWEEP.toml", help="write the sweep file")
    add_force(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=cmd_plan)

    s = subparsers.add_parser("sweep", help="run a sweep file with the trainer (resumable); merge its run table",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("sweep", nargs="?", metavar="SWEEP.toml", help="the sweep file")
    s.add_argument("--out", metavar="DIR", help="sweep folder (reused to resume)")
    s.add_argument("--workers", type=int, default=1, help="parallel worker processes (default 1)")
    s.add_argument("--only", metavar="RUN_ID", help="run only this run (id or name), in this process")
    s.add_argument("--index", type=int, metavar="I", help="run only the I-th run (0-based), in this process")
    s.add_argument("--merge", metavar="DIR", help="merge the run folders of DIR into DIR/runs.jsonl")
    s.add_argument("--export", metavar="DEST", help="with --merge: copy the results without checkpoints to DEST")
    s.add_argument("--list", action="store_true", help="list the runs (and their state with --out)")
    s.add_argument("--delete-checkpoints", action="store_true",
                   help="delete a run's checkpoints once all its records are written")
    s.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a bar on stderr of the runs done, running and failed (default: only when stderr is a "
                        "terminal)")
    s.set_defaults(func=cmd_sweep)


def worker_main(argv: Sequence[str] | None = None) -> int:
    """``python -m scalinfer.cli.sweep --sweep FILE --out DIR [--worker-id K] [--delete-checkpoints]
    [--since T]``: one of the worker processes `scalinfer.sweep.run_sweep` starts. The work and the exit code
    are `scalinfer.sweep.run_worker`'s."""
    p = argparse.ArgumentParser(prog="python -m scalinfer.cli.sweep")
    p.add_argument("--sweep", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--worker-id", type=int, default=0)
    p.add_argument("--delete-checkpoints", action="store_true")
    p.add_argument("--since", type=float, default=None, help="do not retry runs that failed after this time")
    args = p.parse_args(argv)
    from scalinfer.sweep import run_worker

    return run_worker(args.sweep, args.out, args.worker_id, args.delete_checkpoints, args.since)


if __name__ == "__main__":
    sys.exit(worker_main())
