"""Argument helpers shared by the command modules: value parsers, the names offered as choices, JSON output.

Nothing here imports numpy, pandas, JAX or any other heavy library at import time: the parser is built from
these before a command runs, and ``scalinfer --help`` must not pay for what no command has asked for yet.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

__all__ = ["MODEL_NAMES", "FORMAT_NAMES", "PLOT_KINDS", "PRESET_NAMES", "DECAY_SHAPES", "BASELINES",
           "SUGGEST_DECAY_FRACTION", "SUGGEST_MAX_BRANCHES",
           "floats", "range_or_floats", "positive", "count", "whole", "ints", "fit_path", "fit_labels", "add_force", "quiet",
           "print_json", "negative_values", "add_strict", "STRICT_EXIT", "exit_code"]

# The names the parser offers. Each has one home in the library (the module named beside it); the copies
# here keep parser-building free of the imports those modules need, and tests/test_cli_speed.py checks that
# they match.
#: `scalinfer.models.MODEL_NAMES`
MODEL_NAMES = ("chinchilla", "surface", "classic", "batch-openai", "batch-wsd", "batch-floor")
#: the keys of `scalinfer.runs.formats.FORMATS`
FORMAT_NAMES = ("csv", "parquet", "jsonl", "steplaw", "steplaw-moe", "zhang2024", "gemstones", "gadre2024",
                "chinchilla", "misfitting", "porian")
#: the keys of `scalinfer.plots.kinds()`
PLOT_KINDS = ("batch-curves", "batch-law", "batch-schedule", "batch-sizes", "batch-steps", "batch-valley",
              "batch-vs-N", "chinchilla-ppc", "loss-vs-D", "loss-vs-N", "lr-law", "lr-valley", "ppc", "rank",
              "trace")
#: the keys of `scalinfer.train.config.PRESETS`
PRESET_NAMES = ("tiny", "tiny-dense", "cal-xs", "cal-xs-dense", "cal-s", "cal-s-dense", "cal-m", "cal-m-dense",
                "cal-l", "cal-l-dense")
#: `scalinfer.schedules.wsd.DECAY_SHAPES`
DECAY_SHAPES = ("linear", "cosine", "1-sqrt")
#: `scalinfer.suggest.DECAY_FRACTION` and `scalinfer.suggest.MAX_BRANCHES`
SUGGEST_DECAY_FRACTION, SUGGEST_MAX_BRANCHES = 0.2, 10
#: ``--baseline`` name -> the key of `scalinfer.laws.BASELINES`
BASELINES = {"steplaw": "step_law", "deepseek": "deepseek_llm", "zhou2026": "zhou2026"}


# ---- value parsers (argparse ``type=``) ----------------------------------------------------------------------
def floats(text: str) -> float | list[float]:
    """'1e9' -> 1e9; '1e9,2e9' -> [1e9, 2e9]; each value positive and finite."""
    try:
        vals = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or a comma-separated list of numbers")
    bad = [v for v in vals if not (math.isfinite(v) and v > 0)]
    if not vals or bad:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive finite number(s)"
                                         + (f", not {bad[0]:g}" if len(vals) > 1 and bad else ""))
    return vals[0] if len(vals) == 1 else vals


def range_or_floats(text: str) -> float | list[float]:
    """'LO:HI:K' -> K log-spaced values from LO to HI (for ``--grid``); else as `floats`."""
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
    return floats(text)


def positive(text: str) -> float:
    """A positive finite number."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive finite number")
    return v


def count(text: str) -> int:
    """A positive whole number ('4096', '4.096e3')."""
    v = positive(text)
    if v != int(v):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number")
    return int(v)


def whole(text: str) -> int:
    """A whole number >= 0 ('0', '500', '1e3'): warmup steps, seeds."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(v) and v >= 0 and v == int(v)):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 0")
    return int(v)


def fit_path(text: str) -> str:
    """A fit file's path: an existing file (a folder, a device or a missing path is an error at parsing, in one
    line, before any import; whether it is a fit file `scalinfer.inference.load_fit` says)."""
    from scalinfer._io import check_input_file

    try:
        check_input_file(text, "fit file")
    except OSError as e:
        raise argparse.ArgumentTypeError(e.strerror) from None
    return text


def fit_labels(paths) -> dict[str, str]:
    """Label -> path for fit files given on the command line: the path itself, ``PATH#i`` for a repeat (the i-th
    file given), so that a file named twice is two entries in a comparison."""
    labels: dict[str, str] = {}
    for path in paths:
        labels[path if path not in labels else f"{path}#{len(labels)}"] = path
    return labels


def ints(text: str) -> tuple[int, ...]:
    """'512,1024' -> (512, 1024); each value a positive integer."""
    try:
        vals = tuple(int(float(t)) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not vals or min(vals) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers")
    return vals


def negative_values(argv: list[str]) -> list[str]:
    """`argv` with a negative-looking number that follows an option joined to it (``--N -7e9`` -> ``--N=-7e9``).

    argparse takes '-7e9' (and '-inf', '-1e9,2e9') for an option, its test for a negative number missing
    exponents and the rest, and answers "expected one argument"; joined, the value reaches the option's own
    parser, which says what is wrong with it (a size must be positive). Nothing else changes."""
    out: list[str] = []
    for tok in argv:
        prev = out[-1] if out else ""
        if prev.startswith("--") and prev != "--" and "=" not in prev and _negative_number(tok):
            out[-1] = f"{prev}={tok}"
        else:
            out.append(tok)
    return out


def _negative_number(tok: str) -> bool:
    if not tok.startswith("-") or tok.startswith("--"):
        return False
    try:
        float(tok.split(",")[0].split(":")[0])
    except ValueError:
        return False
    return True


# ---- output --------------------------------------------------------------------------------
#: the exit code of a command run with --strict whose answer carries a warning
STRICT_EXIT = 3


def add_strict(parser: argparse.ArgumentParser) -> None:
    """``--strict``: exit with code 3 when the answer carries any warning (printed first, as always)."""
    parser.add_argument("--strict", action="store_true",
                        help=f"exit with code {STRICT_EXIT} (after printing the answer) when any warning fires: "
                             "for scripts and pipelines that must not use a doubtful answer")


def exit_code(args: argparse.Namespace, warnings) -> int:
    """0, or `STRICT_EXIT` when the command was run with ``--strict`` and `warnings` is not empty."""
    return STRICT_EXIT if getattr(args, "strict", False) and len(warnings) else 0


def add_force(parser: argparse.ArgumentParser) -> None:
    """``--force``: the command may replace an existing output file (`scalinfer._io.check_output` refuses
    otherwise; it never replaces an input, a folder or a device)."""
    parser.add_argument("--force", action="store_true",
                        help="replace the output file if it exists (never an input, a folder or a device)")


def quiet() -> bool:
    """Progress bars only when stderr is a terminal."""
    return not sys.stderr.isatty()


def print_json(obj: Any) -> None:
    """`obj` as indented JSON on stdout. JSON has no NaN or infinity: a number that is not finite (the R-hat
    of a one-chain fit) is written as null, as `scalinfer.predict.Prediction.to_dict` writes it."""
    json.dump(_finite(obj), sys.stdout, indent=2, allow_nan=False, default=str)
    sys.stdout.write("\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj

