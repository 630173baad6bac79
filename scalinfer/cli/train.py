"""``scalinfer train``: train one configuration and append its records to the run table.

    scalinfer train --config FILE.toml [key=value ...] --out DIR [--preset NAME] [--dry-run]

The preset (default ``tiny``; see ``--help`` for the list) gives the defaults, the TOML file
overrides them, the ``key=value`` pairs override both (`scalinfer.train.config`). Rerunning
with the same ``--out`` resumes from the latest checkpoint. ``--dry-run`` prints the resolved
configuration and plan without training.

Ctrl-C (SIGINT) or SIGTERM (a scheduler's preemption) stops the run after the step in flight and saves a
checkpoint of it, so that the rerun loses nothing (exit code 130, or 143 for SIGTERM); a second signal stops
at once, losing the steps since the latest checkpoint. A decay branch stopped so is trained again from its
fork. Not in a multi-host job (its processes would stop at different steps): there the first signal stops
the process at once. SIGINT stays ignored where the command was started ignoring it (a background job).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scalinfer.cli._args import PRESET_NAMES

__all__ = ["register", "cmd_train"]


def cmd_train(args: argparse.Namespace) -> int:
    # no `configure_runtime` here: `train` sets up JAX itself, from its configuration (multihost)
    from scalinfer.train.config import config_to_dict, load_config
    from scalinfer.train.interrupt import stop_on_signal
    from scalinfer.train.loop import run_id_of, train
    from scalinfer.train.model import flops_per_token, param_counts
    from scalinfer.train.token_plan import make_plan

    cfg = load_config(args.config, args.overrides, args.preset)
    if not args.dry_run:
        from scalinfer._io import check_output_dir

        check_output_dir(args.out, inputs=[args.config], what="output folder")
    if args.dry_run:
        plan = make_plan(cfg)
        counts = param_counts(cfg.model)
        print(json.dumps({
            "run_id": run_id_of(cfg), "config": config_to_dict(cfg),
            "plan": {"steps": plan.steps, "total_tokens": plan.total_tokens, "lr_peak": plan.lr_peak,
                     "warmup_tokens": plan.warmup_tokens, "decay_tokens": plan.decay_tokens,
                     "branches": [{"name": b.name, "fork_tokens": b.fork_tokens, "end_tokens": b.end_tokens}
                                  for b in plan.branches]},
            "params": counts._asdict(), "flops_per_token": flops_per_token(cfg.model),
        }, indent=2))
        return 0
    with stop_on_signal(enabled=not cfg.multihost) as stop:
        records = train(cfg, args.out, stop_requested=stop)
    if not records:
        if stop.signal is not None:
            from scalinfer.train.checkpoint import Checkpointer
            from scalinfer.train.loop import run_table_path
            from scalinfer.train.records import read_records

            if any(r.get("run_id") == run_id_of(cfg) for r in read_records(run_table_path(cfg, args.out))):
                where = "in a decay branch (the main run is done and recorded)"
                then = "train the branches still missing, each from its fork"
            else:
                ckpt = Checkpointer(Path(args.out) / "checkpoints", keep=None)
                where, then = f"at step {ckpt.latest_step()}, its checkpoint saved", "resume"
                ckpt.close()
            print(f"{cfg.name}: stopped on {stop.signal.name} {where}; rerun the same command (--out {args.out}) to "
                  f"{then}", file=sys.stderr)
            return 128 + stop.signal.value
        print(f"{cfg.name}: stopped after {cfg.stop_after_steps} steps; rerun with --out {args.out} to resume",
              file=sys.stderr)
        return 0
    for r in records:
        loss = "diverged" if r["diverged"] else f"loss {r['loss']:.4f}"
        print(f"{r['run_id']}: N {r['N']:.3g} (active {r['N_active']:.3g}), D {r['D']:.3g}, {loss}")
    return 0


def register(subparsers) -> None:
    """Add ``train``."""
    p = subparsers.add_parser(
        "train", help="train a (MoE) calibration model and append its runs to a run table",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="config overrides, e.g. optimizer.lr=1e-3 model.d_model=96 decay_points=[0.5]")
    p.add_argument("--config", metavar="FILE.toml", help="TOML configuration file")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output folder (checkpoints, metrics.jsonl, runs.jsonl); reused to resume")
    p.add_argument("--preset", metavar="NAME", choices=sorted(PRESET_NAMES),
                   help=f"named defaults: {', '.join(PRESET_NAMES)} (default tiny)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved config and plan, do not train")
    p.set_defaults(func=cmd_train)
