"""The `scalinfer` command line. Thin: every command calls one library function a notebook can call too.

    scalinfer fit RUNS --model M [--format F] [--where EXPR] [--method nuts|map|laplace|bootstrap]
                  [--chains C --warmup W --samples S --seed K] -o FIT.nc
    scalinfer summary FIT.nc [--json] [--strict]
    scalinfer predict FIT.nc --N X --D Y [--ci 0.9] [--lr A --batch B] [--target-loss L] [--grid] [--json] [--strict]
    scalinfer predict --baseline steplaw|deepseek|zhou2026 --N X --D Y [--json]
    scalinfer plot FIT.nc KIND -o FILE
    scalinfer recommend FIT.nc --N X --D Y [--batch B | --max-batch B] [--excess X] [--prob Q] [--lr A]
                        [--json] [--strict]
    scalinfer suggest FIT.nc --N X --D Y [--candidates RUNS.csv] [--top K] [--out RANKED.csv] [--json]
    scalinfer simulate MODEL -o RUNS.csv
    scalinfer quickstart
    scalinfer compare FIT1.nc FIT2.nc ...          scalinfer schedule FIT.nc --N X --D Y
    scalinfer train [key=value ...] --out DIR      scalinfer plan ... / scalinfer sweep SWEEP.toml --out DIR

Each command group is a module of this package (`fit`, `query`, `decide`, `batch`, `train`, `sweep`) with a
``register(subparsers)`` that adds its sub-commands without importing any heavy library; a command imports
what it needs when it runs. With --json the JSON alone goes to stdout; progress goes to stderr when it is a
terminal. Errors in the input, the parser's included, print one line ``error: ...`` to stderr and exit with
code 2. With --strict, an answering command (summary, predict, recommend, compare, schedule) that printed a
warning exits with code 3. Warnings of other libraries (ArviZ, xarray, JAX...) are not shown unless
``--verbose``; scalinfer's own warnings always are. A command that writes a file checks the path before it
starts (`scalinfer._io`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from scalinfer.cli._args import negative_values
from scalinfer.errors import ScalinferError

__all__ = ["main", "build_parser"]

#: the command modules, in the order their commands are listed in ``--help``
_COMMANDS = ("fit", "query", "decide", "batch", "train", "sweep")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``error: scalinfer fit: argument --chains: ...``), exit 2,
    instead of argparse's usage block; the sub-commands' parsers are of this class too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


_VERBOSE_HELP = "show other libraries' warnings too (ArviZ, xarray, JAX...)"


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command; each sets ``func``, the function that runs it."""
    from scalinfer import __version__

    p = _Parser(prog="scalinfer", description="Bayesian scaling-law inference for LLM pre-training.")
    p.add_argument("--version", action="version", version=f"scalinfer {__version__}")
    p.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    for command in set(sub.choices.values()):  # `scalinfer fit ... --verbose` as well as `scalinfer --verbose fit`
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=_VERBOSE_HELP)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``scalinfer ARGV`` (default: the process's arguments); returns the exit code."""
    args = build_parser().parse_args(negative_values(sys.argv[1:] if argv is None else list(argv)))
    try:
        with warnings.catch_warnings():
            if not args.verbose:  # other libraries' warnings off; scalinfer's (and those it raises for) on
                warnings.simplefilter("ignore")
                warnings.filterwarnings("default", module=r"scalinfer(\.|$)")
            return int(args.func(args) or 0)
    except ScalinferError as e:
        print(f"error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:  # no such file, a full disk, no permission...: the path and why, no traceback
        print(f"error: {e.filename or 'a file'}: {_one_line(str(e.strerror or e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _one_line(message: str) -> str:
    """A message that a library wrote over several lines (HDF5's error stack), as one."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())
