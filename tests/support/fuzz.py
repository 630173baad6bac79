"""Malformed run tables for property tests and the loader fuzz benchmark.

`make_case` draws one input from a ``random.Random`` (a seeded one in the benchmark, hypothesis's
``st.randoms()`` in the tests, so failures shrink): a small table in the canonical layout or in one
of the dataset layouts, one mutation from `CATEGORIES`, written as CSV, JSONL or Parquet bytes.
`run_case` loads it and classifies the outcome: a clean `RunTable` whose used and excluded rows
account for every input row, a `RunTableError` with a one-line message naming the file, or a bug
(anything else, or an error on an unmutated table read with its own format).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from scalinfer.errors import RunTableError

__all__ = ["CATEGORIES", "ENCODINGS", "LAYOUTS", "FuzzCase", "Outcome", "make_case", "run_case"]

CATEGORIES = (
    "unmutated", "missing_column", "renamed_column", "string_in_numeric", "nan", "inf",
    "nonpositive_size", "duplicated_run", "mixed_units", "empty_file", "huge_values", "non_utf8",
)
ENCODINGS = ("csv", "jsonl", "parquet")
_BAD_BYTES = (b"\xff", b"\xfe\xfe", b"\xc3\x28", b"\x80abc", b"caf\xe9", b"\xed\xa0\x80")
_MARK = "\x00BADBYTES\x00"
Row = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class FuzzCase:
    """One fuzz input: the bytes of a file and what the loader must account for."""

    category: str
    encoding: str
    layout: str          # "canonical" or a dataset format name
    payload: bytes
    n_rows: int          # data rows in the file
    format: str | None   # the ``format=`` passed to load_runs (None: detect)
    where: str | None
    note: str            # what the mutation did, for failure messages

    @property
    def must_load(self) -> bool:
        """An unmutated table read with its own format and no query: rejecting it is a bug."""
        own = self.encoding if self.layout == "canonical" else self.layout
        return self.category == "unmutated" and self.where is None and self.format in (None, own)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """``status`` is ``clean``, ``typed_error``, ``rejected_valid`` (a bug: a `RunTableError` on a
    table that `FuzzCase.must_load`) or ``unhandled`` (a bug: any other exception, a clean load
    that loses rows, or an error message on several lines or without the file name)."""

    status: str
    detail: str


# ---------------------------------------------------------------- base tables, one row at a time

def _log_uniform(rnd: random.Random, lo: float, hi: float) -> float:
    return math.exp(rnd.uniform(math.log(lo), math.log(hi)))


def _run(rnd: random.Random) -> dict[str, float]:
    """A plausible run: sizes in consistent units."""
    seq_len = rnd.choice([512, 1024, 2048, 4096])
    batch_seqs = rnd.choice([16, 32, 64, 128, 256, 512, 1024])
    steps = rnd.randint(100, 100_000)
    n = _log_uniform(rnd, 1e6, 1e10)
    return {"N": round(n), "seq_len": seq_len, "batch_seqs": batch_seqs,
            "batch_tokens": batch_seqs * seq_len, "steps": steps, "D": steps * batch_seqs * seq_len,
            "lr": _log_uniform(rnd, 1e-4, 3e-2), "loss": rnd.uniform(1.6, 6.0)}


def _canonical_row(rnd: random.Random, i: int, kind: str, base: dict[str, float], in_seqs: bool) -> Row:
    r = _run(rnd)
    if kind == "steps_to_target":
        return {"N": base["N"], "batch_tokens": r["batch_tokens"], "target_loss": base["loss"],
                "steps_to_target": r["steps"], "tokens_to_target": r["steps"] * r["batch_tokens"],
                "run_id": f"cell{i}"}
    if kind == "curves":
        step = (i + 1) * 100
        return {"run_id": "run0", "N": base["N"], "D": step * base["batch_tokens"], "step": step,
                "batch_tokens": base["batch_tokens"], "loss": 6.0 / (1 + i) ** 0.2}
    row: Row = {"N": r["N"], "D": r["D"], "loss": r["loss"], "lr": r["lr"], "steps": r["steps"]}
    if in_seqs:
        row["batch_seqs"], row["seq_len"] = r["batch_seqs"], r["seq_len"]
    else:
        row["batch_tokens"] = r["batch_tokens"]
    row["N_active"] = round(r["N"] * rnd.choice([1.0, 0.25]))
    row["diverged"] = rnd.random() < 0.1
    if row["diverged"] and rnd.random() < 0.5:
        row["loss"] = math.nan
    row["group"] = rnd.choice(["a", "b", "moe-1in8"])
    row["seed"] = i
    return row


def _steplaw(rnd: random.Random, i: int) -> Row:
    r = _run(rnd)
    return {"N": r["N"], "D": r["D"], "lr": r["lr"], "lr_grid": r["lr"], "bs_seqs": r["batch_seqs"],
            "seq_len": r["seq_len"], "bs_tokens": r["batch_tokens"], "steps": r["steps"],
            "loss_smooth": r["loss"], "loss_last": r["loss"] + 0.01, "exp_name": f"run_{i}"}


def _steplaw_moe(rnd: random.Random, i: int) -> Row:
    row = _steplaw(rnd, i)
    row.update(moe_name=rnd.choice(["1in8", "2in88"]), N_active=round(row["N"] / 4),
               active_ratio=0.25, topk=1, n_experts=8)
    return row


def _zhang(rnd: random.Random, i: int) -> Row:
    r = _run(rnd)
    seqs = 16 * 2 ** i  # one cell per batch size
    return {"model": "85M", "N_nonembed": 84934656, "batch_size_seqs": seqs, "seq_len": 512,
            "batch_size_tokens": seqs * 512, "target_loss_c4_eval": 3.42, "steps_to_target": r["steps"],
            "tokens_to_target": r["steps"] * seqs * 512, "steps_to_target_hardcoded_cell5": r["steps"],
            "best_run_lr": 0.00316}


def _gemstones(rnd: random.Random, i: int) -> Row:
    return {"shape": "256x23", "N_total": 48377600, "N_nonembed": 22621952, "lr_variant": "main",
            "phase": "constant_lr", "step": 477 * (i + 1), "D_seen": 477 * (i + 1) * 4194304,
            "batch_tokens": 4194304, "val_loss": 4.6 / (1 + i) ** 0.1, "cooldown_start_step": math.nan,
            "width": 256, "depth": 23}


def _gadre(rnd: random.Random, i: int) -> Row:
    r = _run(rnd)
    return {"name": f"c4-{i}", "dataset": "c4_original", "N_total": r["N"] * 2, "N_nonembed": r["N"],
            "D": r["D"], "lr": 0.003, "global_bs_seqs": r["batch_seqs"], "seq_len": r["seq_len"],
            "batch_tokens": r["batch_tokens"], "chinchilla_multiplier": 1.0, "tokens_per_param": 20.0,
            "args_consistent": True, "loss_c4_val": r["loss"], "loss_openlm": r["loss"] + 1}


def _chinchilla(rnd: random.Random, i: int) -> Row:
    r = _run(rnd)
    return {"N": r["N"], "C_flops": 6.0 * r["N"] * r["D"], "loss": r["loss"], "D": r["D"],
            "svg_x": rnd.uniform(0, 300), "svg_y": rnd.uniform(0, 300), "svg_color": "#ec4a3e"}


def _misfitting(rnd: random.Random, i: int) -> Row:
    r = _run(rnd)
    return {"model": "misfitting_12m", "N_total": r["N"] * 4, "N_nonembed": r["N"], "peak_lr": r["lr"],
            "batch_tokens": 1048576, "seq_len": 2048, "total_steps": r["steps"],
            "D": r["steps"] * 1048576, "loss_c4_eval": r["loss"], "sweep_id": "s1", "run_id": i,
            "n_dupes_same_config": 1}


def _porian(rnd: random.Random, i: int) -> Row:
    r = _run(rnd)
    return {"dataset": "rw", "hparams": "base", "warmup": "long", "decay": "kaplan",
            "param_count": "kaplan", "val": "train", "source_file": "x.pickle.xz",
            "flops_budget": 1.25e16 * 2 ** i, "N": r["N"], "D": r["D"], "loss": r["loss"]}


LAYOUTS: dict[str, Callable[[random.Random, int], Row]] = {
    "steplaw": _steplaw, "steplaw-moe": _steplaw_moe, "zhang2024": _zhang, "gemstones": _gemstones,
    "gadre2024": _gadre, "chinchilla": _chinchilla, "misfitting": _misfitting, "porian": _porian,
}
# Which columns play which role in each layout (mutations that need meaning use these).
_ROLES = {
    "canonical": {"loss": "loss", "sizes": ("N", "D", "lr", "batch_tokens", "steps", "batch_seqs",
                                            "seq_len", "N_active"), "batch": "batch_tokens"},
    "steplaw": {"loss": "loss_smooth", "sizes": ("N", "D", "lr", "bs_seqs", "seq_len", "bs_tokens",
                                                 "steps"), "batch": "bs_tokens"},
    "steplaw-moe": {"loss": "loss_smooth", "sizes": ("N", "N_active", "D", "bs_tokens"), "batch": "bs_tokens"},
    "zhang2024": {"loss": "target_loss_c4_eval", "sizes": ("N_nonembed", "batch_size_tokens",
                                                           "batch_size_seqs"), "batch": "batch_size_tokens"},
    "gemstones": {"loss": "val_loss", "sizes": ("N_nonembed", "D_seen", "batch_tokens"), "batch": "batch_tokens"},
    "gadre2024": {"loss": "loss_c4_val", "sizes": ("N_nonembed", "D", "lr", "batch_tokens"), "batch": "batch_tokens"},
    "chinchilla": {"loss": "loss", "sizes": ("N", "D"), "batch": None},
    "misfitting": {"loss": "loss_c4_eval", "sizes": ("N_nonembed", "D", "peak_lr", "total_steps"),
                   "batch": "batch_tokens"},
    "porian": {"loss": "loss", "sizes": ("N", "D"), "batch": None},
}
_STRINGS = ("abc", "1,5", "3.2.1", "", "nan", "NaN", "None", "null", "True", "1e", "0x10", "--",
            " 2.5 ", "2.5e", "∞", "½", "1 000", "N/A", "\"quoted\"", "a\nb", "=1+1", "-", "1e-3x")
_HUGE = (1e308, 1.7976931348623157e308, 10 ** 400, 2 ** 70, 5e-324, "1e400", "-1e400",
         "9" * 400, 1e200)


# ---------------------------------------------------------------- mutations

def _numeric_cells(rows: list[Row]) -> list[tuple[int, str]]:
    return [(i, k) for i, row in enumerate(rows) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _mutate(rnd: random.Random, category: str, rows: list[Row], layout: str) -> str:
    """Apply one mutation in place; return a note saying what it did."""
    roles = _ROLES[layout]
    cols = list(rows[0])
    cells = _numeric_cells(rows)
    i = rnd.randrange(len(rows))
    if category == "missing_column":
        col = rnd.choice(cols)
        for row in rows:
            row.pop(col, None)
        return f"dropped {col!r}"
    if category == "renamed_column":
        col = rnd.choice(cols)
        new = rnd.choice([col.upper(), col.lower(), f" {col} ", f"{col}_x", "ppl", "perplexity",
                          "loss_bits", "n", "tokens", "bs", "", col + "\t", "N", "loss", "D"])
        for row in rows:
            value = row.pop(col, None)
            row[new] = value
        return f"renamed {col!r} to {new!r}"
    if category == "string_in_numeric" and cells:
        j, col = rnd.choice(cells)
        rows[j][col] = rnd.choice(_STRINGS)
        return f"row {j} {col!r} = {rows[j][col]!r}"
    if category == "nan" and cells:
        j, col = rnd.choice(cells)
        rows[j][col] = math.nan
        if rnd.random() < 0.3:
            rows[j]["diverged"] = True
        return f"row {j} {col!r} = nan"
    if category == "inf" and cells:
        j, col = rnd.choice(cells)
        rows[j][col] = rnd.choice([math.inf, -math.inf, "inf", "-Infinity"])
        return f"row {j} {col!r} = {rows[j][col]!r}"
    if category == "nonpositive_size":
        col = rnd.choice([c for c in roles["sizes"] if c in rows[i]] or cols)
        rows[i][col] = rnd.choice([0, -1, -1e9, -0.0, 0.0])
        return f"row {i} {col!r} = {rows[i][col]!r}"
    if category == "duplicated_run":
        copy = dict(rows[i])
        if rnd.random() < 0.5 and roles["loss"] in copy:
            copy[roles["loss"]] = rnd.uniform(1.6, 6.0)
        rows.insert(rnd.randrange(len(rows) + 1), copy)
        return f"duplicated row {i}"
    if category == "mixed_units":
        choice = rnd.randrange(4)
        loss = roles["loss"]
        if choice == 0 and loss in rows[0]:
            every = rnd.random() < 0.5
            for row in (rows if every else [rows[i]]):
                if isinstance(row.get(loss), float) and math.isfinite(row[loss]):
                    row[loss] = math.exp(row[loss]) * rnd.choice([1.0, 10.0])
            return f"{loss!r} as perplexity ({'all rows' if every else f'row {i}'})"
        if choice == 1 and roles["batch"] in rows[0]:
            for row in rows:
                if isinstance(row.get(roles["batch"]), (int, float)):
                    row[roles["batch"]] = row[roles["batch"]] // rnd.choice([512, 2048])
            return f"{roles['batch']!r} in sequences"
        if choice == 2 and "D" in rows[0]:
            for row in rows:
                if isinstance(row["D"], (int, float)):
                    row["D"] = row["D"] / 1e9
            return "D in billions"
        if "loss" in rows[0] and isinstance(rows[i].get("loss"), float):
            rows[i]["loss"] = rows[i]["loss"] / math.log(2)
        return "a loss in bits (undetectable)"
    if category == "huge_values" and cells:
        j, col = rnd.choice(cells)
        rows[j][col] = rnd.choice(_HUGE)
        return f"row {j} {col!r} = {str(rows[j][col])[:20]}"
    if category == "non_utf8":
        if rnd.random() < 0.15:
            col = rnd.choice(cols)
            for row in rows:
                row[col + _MARK] = row.pop(col)
            return f"bad bytes in header {col!r}"
        col = rnd.choice(list(rows[i]))
        rows[i][col] = f"{rows[i][col]}{_MARK}"
        return f"bad bytes in row {i} {col!r}"
    return "unchanged"


# ---------------------------------------------------------------- encoders

def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _encode(rnd: random.Random, rows: list[Row], encoding: str, header_only: bool) -> bytes:
    bad = rnd.choice(_BAD_BYTES)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    if encoding == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator=rnd.choice(["\n", "\r\n"]))
        writer.writerow(columns)
        if not header_only:
            for row in rows:
                writer.writerow([_cell(row.get(c)) for c in columns])
        return out.getvalue().encode().replace(_MARK.encode(), bad)
    if encoding == "jsonl":
        if header_only:
            return rnd.choice([b"\n", b"\n\n  \n"])
        lines = [json.dumps({k: v for k, v in row.items()}, allow_nan=True) for row in rows]
        # json.dumps escapes the marker's NUL as \u0000: substitute the escaped form
        return ("\n".join(lines) + "\n").encode().replace(
            json.dumps(_MARK)[1:-1].encode(), bad)
    frame = pd.DataFrame({c: [row.get(c) for row in rows] for c in columns})
    if header_only:
        frame = frame.iloc[:0]
    for c in frame.columns:  # Parquet needs one type per column: mixed columns become text
        values = list(frame[c])
        if any(isinstance(v, str) and _MARK in v for v in values):
            frame[c] = [None if v is None else (str(v).replace(_MARK, "").encode() + bad
                                                if _MARK in str(v) else str(v).encode()) for v in values]
        elif len({type(v) for v in values if v is not None}) > 1 or any(
                isinstance(v, int) and abs(v) >= 2 ** 63 for v in values):
            frame[c] = [None if v is None else str(v) for v in values]
    frame.columns = [c.replace(_MARK, "\ufffd") for c in frame.columns]
    buffer = io.BytesIO()
    try:
        frame.to_parquet(buffer, index=False)
    except Exception:  # noqa: BLE001 - an input pyarrow cannot store: fall back to all-text
        buffer = io.BytesIO()
        frame.astype(str).to_parquet(buffer, index=False)
    return buffer.getvalue()


def make_case(rnd: random.Random, category: str | None = None, encoding: str | None = None) -> FuzzCase:
    """Draw one (usually malformed) table and encode it."""
    category = category or rnd.choice(CATEGORIES)
    encoding = encoding or rnd.choice(ENCODINGS)
    n = rnd.randint(1, 6)
    layout = "canonical" if rnd.random() < 0.6 else rnd.choice(list(LAYOUTS))
    if layout == "canonical":
        kind = rnd.choice(["runs", "runs", "runs", "curves", "steps_to_target"])
        base = _run(rnd)
        base["batch_tokens"] = max(base["batch_tokens"], 4096)
        in_seqs = rnd.random() < 0.5
        rows = [_canonical_row(rnd, i, kind, base, in_seqs) for i in range(n)]
        if kind == "runs" and rnd.random() < 0.3:
            for row in rows:
                row.pop("seed")
                row["run_id"] = f"r{rnd.randrange(10 ** 6)}"
    else:
        rows = [LAYOUTS[layout](rnd, i) for i in range(n)]
    if category == "empty_file":
        kind_of_empty = rnd.randrange(3)
        payload = (b"" if kind_of_empty == 0 else b"  \n\n" if kind_of_empty == 1 and encoding != "parquet"
                   else _encode(rnd, rows, encoding, header_only=True))
        return FuzzCase(category, encoding, layout, payload, 0, None, None,
                        ["0 bytes", "whitespace", "header only"][kind_of_empty])
    note = _mutate(rnd, category, rows, layout)
    fmt = None
    r = rnd.random()
    if r < 0.25:
        fmt = layout if layout != "canonical" else encoding
    elif r < 0.28:
        fmt = rnd.choice(["steplaw", "csv", "jsonl", "gemstones", "bogus"])
    where = None
    if rnd.random() < 0.15:
        where = rnd.choice(["N > 1e8", "D < 1e11", "loss < 4", "N >", "not_a_column > 1", "1"])
    payload = _encode(rnd, rows, encoding, header_only=False)
    return FuzzCase(category, encoding, layout, payload, len(rows), fmt, where, note)


def run_case(case: FuzzCase, directory: Path) -> Outcome:
    """Write the case to ``directory`` and load it; classify what happened."""
    from scalinfer.runs import load_runs

    suffix = {"csv": ".csv", "jsonl": ".jsonl", "parquet": ".parquet"}[case.encoding]
    path = Path(directory) / f"fuzz_input{suffix}"
    path.write_bytes(case.payload)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a warning leaking to the user counts as a bug
            table = load_runs(path, format=case.format, where=case.where)
    except RunTableError as e:
        message = str(e)
        if "\n" in message or not message.strip():
            return Outcome("unhandled", f"error message not on one line: {message!r}")
        if str(path) not in message and not message.startswith(("unknown format", "n_kind")):
            return Outcome("unhandled", f"error message does not name the file: {message!r}")
        if case.must_load:
            return Outcome("rejected_valid", message)
        return Outcome("typed_error", message)
    except Exception as e:  # noqa: BLE001 - classifying every other exception is the point
        return Outcome("unhandled", f"{type(e).__name__}: {e}")
    accounted = len(table.df) + len(table.excluded)
    if accounted != case.n_rows:
        return Outcome("unhandled", f"{case.n_rows} input rows but {len(table.df)} used + "
                                    f"{len(table.excluded)} excluded")
    return Outcome("clean", table.report().splitlines()[0])
