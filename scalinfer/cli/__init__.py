"""The `scalinfer` command line. Thin: every command calls one library function a notebook can call too.

    scalinfer fit RUNS --model M [--format F] [--where EXPR] [--method nuts|map|laplace|bootstrap]
                  [--chains C --warmup W --samples S --seed K] -o FIT.nc
    scalinfer summary FIT.nc [--json]
    scalinfer predict FIT.nc --N X --D Y [--ci 0.9] [--lr A --batch B] [--target-loss L] [--grid] [--json]
    scalinfer predict --baseline steplaw|deepseek|zhou2026 --N X --D Y [--json]
    scalinfer plot FIT.nc KIND -o FILE
    scalinfer recommend FIT.nc --N X --D Y [--batch B | --max-batch B] [--excess X] [--prob Q] [--lr A] [--json]
    scalinfer simulate MODEL -o RUNS.csv
    scalinfer quickstart
    scalinfer compare FIT1.nc FIT2.nc ...          scalinfer schedule FIT.nc --N X --D Y
    scalinfer train [key=value ...] --out DIR      scalinfer plan ... / scalinfer sweep SWEEP.toml --out DIR

Each command group is a module of this package (`fit`, `query`, `decide`, `batch`, `train`, `sweep`) with a
``register(subparsers)`` that adds its sub-commands without importing any heavy library; a command imports
what it needs when it runs. With --json the JSON alone goes to stdout; progress goes to stderr when it is a
terminal. Errors in the input print one line ``error: ...`` to stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scalinfer.errors import ScalinferError

__all__ = ["main", "build_parser"]

#: the command modules, in the order their commands are listed in ``--help``
_COMMANDS = ("fit", "query", "decide", "batch", "train", "sweep")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command; each sets ``func``, the function that runs it."""
    from scalinfer import __version__

    p = argparse.ArgumentParser(prog="scalinfer", description="Bayesian scaling-law inference for LLM pre-training.")
    p.add_argument("--version", action="version", version=f"scalinfer {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``scalinfer ARGV`` (default: the process's arguments); returns the exit code."""
    args = build_parser().parse_args(argv)
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
