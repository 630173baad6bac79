"""The run table: one row per training run (or per (run, step) for loss curves).

Units (checked by `validate`):

=================  ===========================================================================
column             meaning and unit
=================  ===========================================================================
``N``              parameters the laws use: non-embedding; for MoE total *or* active (see
                   ``RunTable.meta["N_kind"]``); count, > 0
``D``              training tokens, > 0
``loss``           final loss in nats/token (NaN or inf allowed only where ``diverged`` is true)
``lr``             peak learning rate, > 0 (optional)
``batch_tokens``   global batch in tokens, > 0 (optional; from ``batch_seqs * seq_len``)
``steps``          optimizer steps (optional; when given, ``D`` must be about ``steps * batch_tokens``)
``N_total``        total non-embedding parameters (MoE; equals N for dense)
``N_active``       active non-embedding parameters per token (MoE; equals N for dense)
``diverged``       bool; a diverged run is a censored observation, never silently dropped
``group``          free label of a family of runs (architecture, MoE config, dataset...)
``run_id``         unique id of the run (``row<k>`` from the source row when absent)
``step``           curves only: optimizer step of this record
``target_loss``    steps-to-target tables only: the target loss (nats/token)
``steps_to_target``/``tokens_to_target``  steps-to-target tables only; NaN = never reached
=================  ===========================================================================

Rows that fail a check are either an error (the table is unusable) or excluded with a reason that
`RunTable.excluded` keeps and `RunTable.report()` prints: nothing is dropped silently.

Unit checks. A loss above 30 nats/token, or a table whose every loss is above 12.5 nats/token
(worse than a uniform guess over a 262,144-token vocabulary), is a perplexity or a loss in other units;
a ``batch_tokens`` below 64, or a ``D`` that is not within a factor 4 of ``steps * batch_tokens``, is a
batch in sequences (or D in other units); ``N_active > N_total`` has the two swapped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from scalinfer.errors import RunTableError

__all__ = ["RunTable", "validate", "NUMERIC_COLUMNS", "KINDS", "REQUIRED", "CONFIG_COLUMNS"]

NUMERIC_COLUMNS = (
    "N", "D", "loss", "lr", "batch_tokens", "steps", "N_total", "N_active", "step",
    "target_loss", "steps_to_target", "tokens_to_target", "seq_len", "batch_seqs",
)
POSITIVE_COLUMNS = (
    "N", "D", "lr", "batch_tokens", "steps", "N_total", "N_active", "target_loss", "seq_len",
    "batch_seqs",
)
NONNEGATIVE_COLUMNS = ("step", "steps_to_target", "tokens_to_target")
KINDS = ("runs", "curves", "steps_to_target")
Kind = Literal["runs", "curves", "steps_to_target"]

REQUIRED = {
    "runs": ("N", "D", "loss"),
    "curves": ("N", "D", "loss", "step", "run_id"),
    "steps_to_target": ("N", "batch_tokens", "target_loss", "steps_to_target"),
}
# What makes two runs the same run when the table has no run_id (columns absent are skipped).
CONFIG_COLUMNS = (
    "N", "N_total", "N_active", "D", "lr", "batch_tokens", "steps", "seed", "group", "arch",
    "schedule", "dataset", "target_loss",
)

CANONICAL_ORDER = (
    "run_id", "group", "N", "N_total", "N_active", "D", "lr", "batch_tokens", "steps", "step", "loss",
    "diverged", "target_loss", "steps_to_target", "tokens_to_target",
)

MAX_LOSS_NATS = 30.0          # no per-token loss in nats is this large; a perplexity can be
MAX_TABLE_MIN_LOSS = 12.5     # ln(262144): worse than uniform over the largest common vocabulary
MIN_BATCH_TOKENS = 64         # a smaller "token" batch is a batch counted in sequences
TOKENS_RATIO_LIMIT = 4.0      # D within this factor of steps * batch_tokens
_MISSING_TOKENS = frozenset({"", "nan", "none", "null", "na", "n/a", "<na>"})
_TRUE_TOKENS = frozenset({"true", "1", "1.0", "yes", "y", "t"})
_FALSE_TOKENS = frozenset({"false", "0", "0.0", "no", "n", "f"})


def _one_line(text: str) -> str:
    """Collapse a message onto one line (values and pandas messages may contain newlines)."""
    return " ".join(str(text).split())


def _show(value: Any, width: int = 40) -> str:
    """A short repr of a cell value for an error message."""
    if isinstance(value, (float, np.floating)):
        text = repr(float(value))
    elif isinstance(value, (np.integer,)):
        text = repr(int(value))
    else:
        text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _error(message: str) -> RunTableError:
    return RunTableError(_one_line(message))


@dataclasses.dataclass(frozen=True)
class RunTable:
    """A validated run table.

    Attributes
    ----------
    df : the rows used for fitting (canonical columns, see module docstring).
    excluded : rows left out, with their source row label in ``row`` and a ``reason`` column.
    source : where the rows came from (a path or a description), used in messages.
    kind : ``"runs"`` (one final loss per run), ``"curves"`` (loss per step) or
        ``"steps_to_target"`` (steps needed to reach a target loss per batch size).
    meta : units and provenance notes, e.g. ``{"N_kind": "total", "format": "steplaw"}``.
    rows : source row label of each row of ``df`` (file line for CSV/JSONL, 1-based row for
        Parquet, index label for a DataFrame); empty when the table was built by hand.
    """

    df: pd.DataFrame
    excluded: pd.DataFrame
    source: str
    kind: Kind = "runs"
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    rows: tuple[Hashable, ...] = ()

    def __len__(self) -> int:
        return len(self.df)

    def where(self, expr: str) -> RunTable:
        """Keep the rows matching a pandas query (e.g. ``"N <= 6e8 and D >= 1e10"``); the rest are
        reported as excluded with the expression as the reason."""
        try:
            mask = self.df.eval(expr)
        except Exception as e:  # pandas raises many types here; the message is what matters
            raise _error(f"{self.source}: --where {expr!r} is not a valid query: "
                         f"{type(e).__name__}: {e}") from None
        if not isinstance(mask, pd.Series) or mask.dtype != bool:
            raise _error(f"{self.source}: --where {expr!r} does not give true/false per row")
        if mask.sum() == 0:
            raise _error(f"{self.source}: --where {expr!r} matches none of {len(self.df)} rows")
        rows = list(self.rows) if len(self.rows) == len(self.df) else list(self.df.index)
        keep = mask.to_numpy()
        dropped = self.df.loc[~keep].assign(
            row=[r for r, k in zip(rows, keep) if not k], reason=f"not matched by --where {expr!r}")
        return dataclasses.replace(
            self, df=self.df.loc[keep].reset_index(drop=True),
            excluded=_concat(self.excluded, dropped),
            rows=tuple(r for r, k in zip(rows, keep) if k),
        )

    def report(self) -> str:
        """One line of counts, then one line per exclusion reason with its count."""
        what = {"runs": "runs", "curves": "curve points", "steps_to_target": "cells"}[self.kind]
        fmt = f" [{self.meta['format']}]" if "format" in self.meta else ""
        lines = [f"{self.source}{fmt}: {len(self.df)} {what} used, {len(self.excluded)} excluded"]
        if len(self.excluded):
            for reason, n in self.excluded["reason"].value_counts(sort=True).items():
                lines.append(f"  excluded {n}: {reason}")
        return "\n".join(lines)


def _concat(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    parts = [x for x in (a, b) if len(x)]
    if not parts:
        return a if len(a.columns) >= len(b.columns) else b
    return parts[0].reset_index(drop=True) if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def empty_excluded() -> pd.DataFrame:
    """An empty exclusion table (columns ``row`` and ``reason``)."""
    return pd.DataFrame({"row": pd.Series(dtype=object), "reason": pd.Series(dtype=object)})


def to_float(values: pd.Series) -> tuple[np.ndarray, int | None]:
    """Convert a column to float64; return it and the position of the first non-number (or None).

    Missing markers (empty, ``nan``, ``null``, ``NA``...) become NaN; ``inf`` and overflowing
    literals become +-inf (checked later); booleans, bytes and other objects are not numbers.
    """
    dtype = values.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return np.full(len(values), np.nan), (0 if len(values) else None)
    if pd.api.types.is_numeric_dtype(dtype):
        return values.to_numpy(dtype=float, na_value=np.nan), None
    out = np.empty(len(values))
    for i, v in enumerate(values.to_numpy(dtype=object)):
        if v is None or v is pd.NA or v is pd.NaT:
            out[i] = np.nan
        elif isinstance(v, (bool, np.bool_)):
            return out, i
        elif isinstance(v, (int, float, np.integer, np.floating)):
            try:
                out[i] = float(v)
            except OverflowError:
                out[i] = math.inf if v > 0 else -math.inf
        elif isinstance(v, str):
            s = v.strip()
            if s.lower() in _MISSING_TOKENS:
                out[i] = np.nan
                continue
            try:
                out[i] = float(s)
            except ValueError:
                return out, i
        else:
            return out, i
    return out, None


def _to_bool(values: pd.Series) -> tuple[np.ndarray, int | None]:
    """Parse a true/false column (bool, 0/1, or words); missing means false."""
    if pd.api.types.is_bool_dtype(values.dtype):
        return values.fillna(False).to_numpy(dtype=bool), None
    out = np.zeros(len(values), dtype=bool)
    for i, v in enumerate(values.to_numpy(dtype=object)):
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            continue
        if isinstance(v, (bool, np.bool_)):
            out[i] = bool(v)
            continue
        s = str(v).strip().lower()
        if s in _TRUE_TOKENS:
            out[i] = True
        elif s not in _FALSE_TOKENS and s not in _MISSING_TOKENS:
            return out, i
    return out, None


def validate(
    df: pd.DataFrame, source: str, kind: Kind = "runs", meta: dict[str, Any] | None = None,
    row_offset: int | None = 2, *, excluded: pd.DataFrame | None = None,
) -> RunTable:
    """Check a table in canonical columns and return a `RunTable`.

    Errors (raise `RunTableError`, one line naming the source, the row and the column): an empty
    table, a duplicated column, a missing required column, a non-numeric value in a numeric
    column, a missing, non-positive or infinite size, a NaN loss on a run not marked diverged, a
    loss that cannot be in nats (<= 0, > 30, or every loss > 12.5: a perplexity), batch in
    sequences (without a sequence length, or a ``batch_tokens`` that looks like one), ``D`` that
    disagrees with ``steps * batch_tokens``, ``N_active > N_total``, a duplicated run (same
    ``run_id``; without run ids, the same configuration, see ``CONFIG_COLUMNS``).

    Parameters
    ----------
    df : the table in canonical columns (see the module docstring); extra columns are kept.
    source : a path or description, used in messages.
    kind : ``"runs"``, ``"curves"`` or ``"steps_to_target"``.
    meta : units and provenance notes to keep with the table.
    row_offset : added to an integer index to name rows in messages: 2 makes a 0-based index a
        CSV line number (header on line 1); None or 0 uses the index labels as they are.
    excluded : rows a loader already excluded (with ``row`` and ``reason`` columns).
    """
    with np.errstate(all="ignore"):  # huge values overflow to inf, which the checks then name
        return _validate(df, source, kind, meta, row_offset, excluded)


def _validate(df, source, kind, meta, row_offset, excluded) -> RunTable:
    if kind not in KINDS:
        raise _error(f"{source}: unknown table kind {kind!r} (one of {', '.join(KINDS)})")
    if df is None or len(df) == 0:
        raise _error(f"{source}: the table is empty (no rows)")
    # Work on a dict of 1-d arrays (one DataFrame is built at the end: faster than setitem).
    t: dict[str, np.ndarray] = {}
    for j, name in enumerate(df.columns):
        c = str(name).strip()
        if c in t:
            raise _error(f"{source}: column {c!r} appears more than once")
        t[c] = df.iloc[:, j]
    if row_offset and pd.api.types.is_integer_dtype(df.index.dtype):
        rows = [int(i) + row_offset for i in df.index]
    else:
        rows = list(df.index)

    def at(i: int, col: str) -> str:
        return f"{source}: row {rows[i]}, column {col!r}"

    def first(mask: np.ndarray) -> int | None:
        hits = np.flatnonzero(mask)
        return int(hits[0]) if len(hits) else None

    # numbers first, so that the sequence -> token conversion sees clean values
    for col in NUMERIC_COLUMNS:
        if col in t:
            values, bad = to_float(t[col])
            if bad is not None:
                raise _error(f"{at(bad, col)}: {_show(t[col].iloc[bad])} is not a number")
            t[col] = values
    for col in t:
        if not isinstance(t[col], np.ndarray):
            t[col] = t[col].to_numpy()

    if "batch_seqs" in t:
        if "seq_len" not in t:
            if "batch_tokens" not in t:
                raise _error(
                    f"{source}: batch is given in sequences (column 'batch_seqs') but there is no "
                    f"'seq_len' column to convert it to tokens")
        else:
            from_seqs = t["batch_seqs"] * t["seq_len"]
            if "batch_tokens" in t:
                given = t["batch_tokens"]
                both = np.isfinite(given) & np.isfinite(from_seqs)
                off = first(both & ~np.isclose(given, from_seqs, rtol=1e-6))
                if off is not None:
                    raise _error(
                        f"{at(off, 'batch_tokens')}: {_show(given[off])} is not batch_seqs * seq_len "
                        f"= {_show(from_seqs[off])}")
                t["batch_tokens"] = np.where(np.isnan(given), from_seqs, given)
            else:
                t["batch_tokens"] = from_seqs

    missing = [c for c in REQUIRED[kind] if c not in t]
    if missing:
        hint = _missing_hint(missing, list(t))
        raise _error(
            f"{source}: missing required column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(c) for c in missing)} for a {kind} table "
            f"(have: {', '.join(map(repr, t))}){hint}")

    if "diverged" in t:
        flags, bad = _to_bool(pd.Series(t["diverged"]))
        if bad is not None:
            raise _error(f"{at(bad, 'diverged')}: {_show(t['diverged'][bad])} is not true/false")
        t["diverged"] = flags
    else:
        t["diverged"] = np.zeros(len(rows), dtype=bool)
    diverged = t["diverged"]

    for col in NUMERIC_COLUMNS:
        if col not in t or col == "loss":
            continue
        v = t[col]
        if col in REQUIRED[kind] and col != "steps_to_target":
            i = first(np.isnan(v))
            if i is not None:
                raise _error(f"{at(i, col)}: value is missing (the column is required)")
        i = first(np.isinf(v))
        if i is not None:
            raise _error(f"{at(i, col)}: {_show(v[i])} is not a finite number")
        limit_ok = (v > 0) if col in POSITIVE_COLUMNS else (v >= 0) if col in NONNEGATIVE_COLUMNS else None
        if limit_ok is not None:
            i = first(~np.isnan(v) & ~limit_ok)
            if i is not None:
                sign = "positive" if col in POSITIVE_COLUMNS else "non-negative"
                raise _error(f"{at(i, col)}: {_show(v[i])} is not a {sign} number")

    for col in ("loss", "target_loss"):
        if col not in t:
            continue
        v = t[col]
        finite = np.isfinite(v)
        if col == "loss":
            i = first(~finite & ~diverged)
            if i is not None:
                raise _error(
                    f"{at(i, col)}: {_show(v[i])} is not a finite loss and the run is not marked "
                    f"diverged (add diverged=true to keep it as a censored run)")
        i = first(finite & ((v <= 0) | (v > MAX_LOSS_NATS)))
        if i is not None:
            raise _error(
                f"{at(i, col)}: {_show(v[i])} is not a loss in nats/token (expected 0 < {col} <= "
                f"{MAX_LOSS_NATS:g}; a perplexity or a loss in bits must be converted)")
        usable = finite & ~diverged if col == "loss" else finite
        if usable.any() and v[usable].min() > MAX_TABLE_MIN_LOSS:
            i = int(np.flatnonzero(usable)[np.argmin(v[usable])])
            raise _error(
                f"{at(i, col)}: every {col} is above {MAX_TABLE_MIN_LOSS} nats/token (smallest "
                f"{_show(v[i])}), worse than a uniform guess: is it a perplexity? give log(perplexity)")

    _check_units(t, kind, at, first)
    _check_duplicates(t, kind, source, rows)

    for col in ("N_total", "N_active"):
        if col not in t:
            t[col] = t["N"]
    if "run_id" not in t:
        t["run_id"] = np.array([f"row{r}" for r in rows], dtype=object)
    else:
        t["run_id"] = np.array([str(v) for v in t["run_id"]], dtype=object)
    front = [c for c in CANONICAL_ORDER if c in t]
    out = pd.DataFrame({c: t[c] for c in front + [c for c in t if c not in front]})
    return RunTable(df=out, excluded=excluded if excluded is not None else empty_excluded(),
                    source=source, kind=kind, meta=dict(meta or {}), rows=tuple(rows))


def _missing_hint(missing: Sequence[str], columns: Sequence[str]) -> str:
    lower = {c.lower(): c for c in columns}
    if "loss" in missing:
        for bad in ("ppl", "perplexity", "bpb", "bits_per_byte", "loss_bits", "bits"):
            if bad in lower:
                return (f"; {lower[bad]!r} is not a loss in nats/token: convert it and name it "
                        f"'loss'")
        cands = [c for c in columns if "loss" in c.lower()]
        if cands:
            return f"; pick the loss with loss_column= (candidates: {', '.join(map(repr, cands))})"
    if "batch_tokens" in missing and ("batch_size" in lower or "bs" in lower):
        return "; name the batch 'batch_tokens' (tokens) or 'batch_seqs' with 'seq_len' (sequences)"
    return ""


def _check_units(t: dict[str, np.ndarray], kind: str, at, first) -> None:
    """Cross-column unit checks: batch in sequences, D not in tokens, N_active above N_total."""
    if "batch_tokens" in t:
        b = t["batch_tokens"]
        i = first(b < MIN_BATCH_TOKENS)
        if i is not None:
            raise _error(
                f"{at(i, 'batch_tokens')}: {_show(b[i])} tokens is a batch in sequences, not tokens "
                f"(give 'batch_seqs' and 'seq_len' instead)")
        tokens, steps = {"runs": ("D", "steps"), "curves": ("D", "step"),
                         "steps_to_target": ("tokens_to_target", "steps_to_target")}[kind]
        if tokens in t and steps in t:
            ratio = t[tokens] / (t[steps] * b)
            bad = np.isfinite(ratio) & (ratio > 0) & (
                (ratio > TOKENS_RATIO_LIMIT) | (ratio < 1 / TOKENS_RATIO_LIMIT))
            i = first(bad)
            if i is not None:
                likely = (" (batch in sequences?)" if 16 <= ratio[i] <= 65536 else
                          f" ({tokens} in other units?)")
                raise _error(
                    f"{at(i, tokens)}: {_show(t[tokens][i])} tokens is {ratio[i]:.4g} x "
                    f"{steps} * batch_tokens = {_show(t[steps][i] * b[i])}: the units of "
                    f"{tokens!r}, {steps!r} and 'batch_tokens' disagree{likely}")
        if kind == "runs" and "D" in t:
            i = first(t["D"] < b)
            if i is not None:
                raise _error(
                    f"{at(i, 'D')}: {_show(t['D'][i])} tokens is less than one batch of "
                    f"{_show(b[i])} tokens: is D in other units (millions, billions)?")
    if "N_total" in t and "N_active" in t:
        i = first(t["N_active"] > t["N_total"] * (1 + 1e-9))
        if i is not None:
            raise _error(
                f"{at(i, 'N_active')}: {_show(t['N_active'][i])} active parameters exceed "
                f"N_total = {_show(t['N_total'][i])} (swapped columns?)")


def _check_duplicates(t: dict[str, np.ndarray], kind: str, source: str, rows: list) -> None:
    """A run that appears twice is an error naming both rows."""
    if "run_id" in t:
        missing = pd.isna(t["run_id"])
        if missing.any():
            raise _error(f"{source}: row {rows[int(np.flatnonzero(missing)[0])]}, column 'run_id': "
                         f"value is missing")
        key_frame = pd.DataFrame({"run_id": [str(v) for v in t["run_id"]]})
        if kind == "curves":
            key_frame["step"] = t["step"]
    else:
        cols = [c for c in CONFIG_COLUMNS if c in t] + (["step"] if kind == "curves" else [])
        key_frame = pd.DataFrame({c: t[c] for c in cols})
    try:
        dup_first = key_frame.duplicated(keep="first").to_numpy()
    except TypeError:  # unhashable cells (lists from JSON) in a label column: compare as text
        key_frame = key_frame.astype(str)
        dup_first = key_frame.duplicated(keep="first").to_numpy()
    if not dup_first.any():
        return
    j = int(np.flatnonzero(dup_first)[0])
    same = (key_frame == key_frame.iloc[j]) | (key_frame.isna() & key_frame.iloc[j].isna())
    i = int(np.flatnonzero(same.all(axis=1).to_numpy())[0])
    desc = ", ".join(f"{c}={_show(key_frame.iloc[j][c], 24)}" for c in key_frame.columns
                     if not pd.isna(key_frame.iloc[j][c]))
    fix = ("give them distinct run ids" if "run_id" in t
           else "if they are repeats, add a 'seed' or 'run_id' column")
    raise _error(f"{source}: rows {rows[i]} and {rows[j]} are the same run ({desc}); {fix}")
