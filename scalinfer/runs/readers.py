"""File readers: bytes on disk -> a DataFrame whose index labels are the rows a user sees.

The index of what these return is the file line number for CSV and JSONL (header on line 1) and the
1-based row number for Parquet, so every later message can name the row. Every failure is a
`RunTableError` naming the file (and the row and column where there is one).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd

from scalinfer.errors import RunTableError
from scalinfer.runs.schema import _one_line

__all__ = ["ENCODINGS", "encoding_of", "read_table"]

ENCODINGS = ("csv", "jsonl", "parquet")
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
             ".parquet": "parquet", ".pq": "parquet"}
# Label-like columns read as text, so that run ids such as "007" keep their zeros.
_TEXT_COLUMNS = ("run_id", "group", "arch", "schedule", "dataset")


def _error(message: str) -> RunTableError:
    return RunTableError(_one_line(message))


def encoding_of(path: Path) -> str:
    """The file encoding from the suffix, else from the first bytes (Parquet magic, ``{`` for JSONL)."""
    suffix = path.suffix.lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"PAR1"):
        return "parquet"
    return "jsonl" if head.lstrip().startswith(b"{") else "csv"


def read_table(path: Path, encoding: str) -> pd.DataFrame:
    """Read a CSV, JSONL or Parquet file into a DataFrame indexed by user-facing row numbers."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise _error(f"{path}: cannot read the file ({e.strerror or e})") from None
    if len(raw) == 0:
        raise _error(f"{path}: the file is empty (0 bytes)")
    if encoding == "parquet":
        return _read_parquet(path, raw)
    if not raw.strip():
        raise _error(f"{path}: the file is empty (only whitespace)")
    text = _decode(path, raw, encoding)
    return _read_jsonl(path, text) if encoding == "jsonl" else _read_csv(path, text)


def _decode(path: Path, raw: bytes, encoding: str) -> str:
    """UTF-8 (with or without a BOM); a bad byte is an error naming its line and column."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        line_start = raw.rfind(b"\n", 0, e.start) + 1
        where = _column_of(raw, line_start, e.start, line, encoding)
        raise _error(
            f"{path}: row {line}{where}: byte 0x{raw[e.start]:02x} at offset {e.start} is not UTF-8 "
            f"(save the file as UTF-8)") from None


def _column_of(raw: bytes, line_start: int, bad: int, line: int, encoding: str) -> str:
    """Name the column holding a bad byte, as well as the bytes around it allow."""
    try:
        if encoding == "jsonl":
            line_end = raw.find(b"\n", bad)
            record = json.loads(raw[line_start: len(raw) if line_end < 0 else line_end]
                                .decode("utf-8", errors="replace"))
            if isinstance(record, dict):
                for key, value in record.items():
                    if "\ufffd" in key or "\ufffd" in str(value):
                        return f", column {key!r}"
            return ""
        if line == 1:
            return " (the header)"
        header_end = raw.find(b"\n")
        header = next(csv.reader([raw[:header_end].decode("utf-8", errors="replace")]))
        prefix = raw[line_start:bad].decode("utf-8", errors="replace")
        field = len(next(csv.reader([prefix]), [""])) - 1 if prefix else 0
        if prefix.endswith(","):
            field += 1
        return f", column {header[field].strip()!r}" if 0 <= field < len(header) else ""
    except (ValueError, StopIteration, csv.Error, RecursionError):
        return ""


def _read_csv(path: Path, text: str) -> pd.DataFrame:
    try:
        header = next(csv.reader(io.StringIO(text, newline="")))
    except (csv.Error, StopIteration) as e:
        raise _error(f"{path}: not a valid CSV header ({e})") from None
    names = [h.strip() for h in header]
    for i, name in enumerate(names):
        if name and name in names[:i]:
            raise _error(f"{path}: row 1 (the header): column {name!r} appears more than once")
    try:
        df = pd.read_csv(io.StringIO(text), low_memory=False,
                         dtype={c: "str" for c in _TEXT_COLUMNS if c in names})
    except pd.errors.EmptyDataError:
        raise _error(f"{path}: the file is empty (no header)") from None
    except (pd.errors.ParserError, ValueError, OverflowError, csv.Error) as e:
        raise _error(f"{path}: not a valid CSV table: {e}") from None
    if len(df) == 0:
        raise _error(f"{path}: the file has a header but no data rows")
    df.columns = [str(c).strip() for c in df.columns]
    df.index = _csv_lines(text, len(df))
    return df


def _csv_lines(text: str, n_rows: int) -> list[int]:
    """File line where each data record starts (records may span lines; blank lines are skipped)."""
    starts: list[int] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        next(reader)
        line = reader.line_num
        for record in reader:
            if record:
                starts.append(line + 1)
            line = reader.line_num
    except csv.Error:
        starts = []
    return starts if len(starts) == n_rows else list(range(2, n_rows + 2))


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for i, k in enumerate(keys) if k in keys[:i])
        raise ValueError(f"key {dup!r} appears more than once")
    return dict(pairs)


def _read_jsonl(path: Path, text: str) -> pd.DataFrame:
    records, lines = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as e:
            raise _error(f"{path}: row {number}: not valid JSON ({e.msg} at character {e.colno})") from None
        except (ValueError, RecursionError) as e:
            raise _error(f"{path}: row {number}: not a usable JSON record ({e})") from None
        if not isinstance(record, dict):
            raise _error(f"{path}: row {number}: a JSON {type(record).__name__} where a record "
                         f"{{\"column\": value, ...}} was expected")
        records.append(record)
        lines.append(number)
    if not records:
        raise _error(f"{path}: the file is empty (no JSON records)")
    try:
        df = pd.DataFrame.from_records(records, index=lines)
    except (ValueError, TypeError, OverflowError) as e:
        raise _error(f"{path}: the JSON records do not form a table ({e})") from None
    return df


def _read_parquet(path: Path, raw: bytes) -> pd.DataFrame:
    try:
        df = pd.read_parquet(io.BytesIO(raw))
    except Exception as e:  # pyarrow raises many types (ArrowInvalid, OSError...) for bad files
        raise _error(f"{path}: not a valid Parquet file ({type(e).__name__}: {e})") from None
    if not isinstance(df.index, pd.RangeIndex):
        try:  # a stored index is data (e.g. run ids): keep it as a column
            df = df.reset_index()
        except ValueError as e:
            raise _error(f"{path}: the stored index clashes with a column ({e})") from None
    if len(df) == 0:
        raise _error(f"{path}: the Parquet file has no rows")
    df.columns = [str(c).strip() for c in df.columns]
    df.index = range(1, len(df) + 1)
    return df
