"""Run tables: load training runs from files or published datasets into one checked layout.

``load_runs(source, format=None, where=None, n_kind="total", loss_column=None)`` reads a file, a
dataset folder or a DataFrame, converts it to the canonical columns of `scalinfer.runs.schema`
(N non-embedding parameters, D tokens, loss in nats/token, lr, batch_tokens...), validates it and
returns a `RunTable`. Every row is either used or excluded with a reason (``RunTable.report()``);
bad input raises `scalinfer.errors.RunTableError` with one line naming the file, row and column.

Formats (``FORMATS``; ``format=None`` detects it from a file's columns or a folder's file names):

=============  =====================  ==================================================================
format         file (in its folder)   layout and unit conversions
=============  =====================  ==================================================================
csv            any ``.csv``           canonical columns; batch as ``batch_tokens`` or ``batch_seqs`` +
                                      ``seq_len``; ``N_total``/``N_active`` pick N by ``n_kind``;
                                      a ``step`` column makes curves, ``steps_to_target`` a
                                      steps-to-target table
parquet        any ``.parquet``       same, Parquet
jsonl          any ``.jsonl``         same, one JSON object per line
steplaw        dense_runs.csv         Step Law dense grid: loss = ``loss_smooth`` (smoothed final train
                                      loss, the paper's metric), batch_tokens = bs_seqs*2048, keeps
                                      ``lr_grid``, ``loss_last``; group = the (N, D) setting
steplaw-moe    moe_runs.csv           Step Law MoE: N = total or active non-embedding by ``n_kind``
                                      (both kept); group = ``moe_name``
zhang2024      steps_to_target.csv    kind ``steps_to_target``: N = ``N_nonembed``, batch_tokens =
                                      seqs*512, target_loss (C4, nats), steps/tokens_to_target
gemstones      curves.csv             kind ``curves``: one run per (shape, lr_variant, phase, cooldown
                                      start); N = ``N_nonembed``, D = ``D_seen``, loss = ``val_loss``;
                                      LR unknown (no ``lr`` column)
gadre2024      models.csv             N = ``N_nonembed``, loss = ``loss_column`` (default
                                      ``loss_c4_val``), group = dataset; the 7B's unknown batch stays
                                      missing
chinchilla     points.csv             Epoch AI's extraction: N, D = C/(6N), loss
misfitting     final_runs.csv         N = ``N_nonembed``, lr = ``peak_lr``, loss = ``loss_c4_eval``,
                                      run_id = sweep/run (``#2`` on a repeated record with another
                                      loss; exact copies excluded)
porian         isoflop_points.csv     group = dataset/hparams/warmup/decay/param_count/val; empty
                                      budgets (placeholders) excluded
=============  =====================  ==================================================================

Dataset formats keep ``N_with_embed`` where the source counts embeddings. Never pool losses across
datasets: corpora, tokenizers and loss definitions differ.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from scalinfer.errors import RunTableError
from scalinfer.runs.formats import FORMATS, GENERIC, Format, Options, infer_kind, matching_layouts, prepare
from scalinfer.runs.readers import encoding_of, read_table
from scalinfer.runs.schema import KINDS, RunTable, _one_line, validate

__all__ = ["load_runs", "RunTable", "validate", "FORMATS", "detect_format", "KINDS"]

N_KINDS = ("total", "active")


def _error(message: str) -> RunTableError:
    return RunTableError(_one_line(message))


def _format_list() -> str:
    return ", ".join(FORMATS)


def _check_format(format: str | None) -> Format | None:
    if format is None:
        return None
    if not isinstance(format, str) or format not in FORMATS:
        raise _error(f"unknown format {format!r} (valid formats: {_format_list()})")
    return FORMATS[format]


def _layout_of(columns: pd.Index, source: str) -> Format | None:
    """The dataset format a table's columns identify; None for canonical; error if unknown/ambiguous."""
    hits = matching_layouts(columns)
    if len(hits) > 1:
        raise _error(f"{source}: the columns fit several formats ({', '.join(hits)}): pass format=")
    if hits:
        return FORMATS[hits[0]]
    if not {"N", "D", "loss", "N_total", "N_active", "batch_tokens"} & set(map(str, columns)):
        shown = ", ".join(map(repr, list(columns)[:12])) + (", ..." if len(columns) > 12 else "")
        raise _error(f"{source}: cannot tell the format from the columns ({shown}); they are neither "
                     f"canonical (N, D, loss...) nor a known dataset; formats: {_format_list()}")
    return None


def _in_folder(folder: Path, fmt: Format | None) -> tuple[Path, Format | None]:
    """The dataset file inside a folder, and its format."""
    if fmt is not None:
        if fmt.filename is None:
            raise _error(f"{folder}: is a folder; format {fmt.name} reads a single file")
        path = folder / fmt.filename
        if not path.is_file():
            raise _error(f"{folder}: no {fmt.filename} in this folder (needed by format {fmt.name})")
        return path, fmt
    found = [f for f in FORMATS.values() if f.filename and (folder / f.filename).is_file()]
    if len(found) > 1:
        raise _error(f"{folder}: holds the files of several formats "
                     f"({', '.join(f'{f.name} ({f.filename})' for f in found)}): pass format=")
    if not found:
        known = ", ".join(f"{f.filename} ({f.name})" for f in FORMATS.values() if f.filename)
        raise _error(f"{folder}: no known dataset in this folder (looked for {known})")
    return folder / found[0].filename, found[0]


def _read(source: str | os.PathLike | pd.DataFrame, fmt: Format | None
          ) -> tuple[pd.DataFrame, str, Format | None, int | None]:
    """Source table (index = row labels), its label for messages, the format if fixed, row offset."""
    if isinstance(source, pd.DataFrame):
        return source, "<DataFrame>", fmt, None
    if not isinstance(source, (str, os.PathLike)):
        raise _error(f"source must be a path or a pandas DataFrame, not {type(source).__name__}")
    path = Path(source)
    label = str(source)
    if not path.exists():
        raise _error(f"{label}: no such file or folder")
    if path.is_dir():
        path, fmt = _in_folder(path, fmt)
        label = str(path)
    encoding = fmt.encoding if fmt is not None and fmt.encoding else encoding_of(path)
    return read_table(path, encoding), label, fmt, 0


def detect_format(source: str | os.PathLike | pd.DataFrame) -> str | None:
    """The format `load_runs` would use for ``source``.

    Returns a name in `FORMATS`: a dataset format when the columns (or, for a folder, the file
    names) identify one, else the generic format of the file's encoding (csv, jsonl, parquet).
    A DataFrame in canonical columns gives None (it has no file format).
    Raises `RunTableError` when the source is unreadable, ambiguous or of no known format.
    """
    src, label, fmt, _ = _read(source, None)
    if fmt is not None:
        return fmt.name
    layout = _layout_of(src.columns, label)
    if layout is not None:
        return layout.name
    return None if isinstance(source, pd.DataFrame) else encoding_of(Path(label))


def load_runs(
    source: str | os.PathLike | pd.DataFrame, format: str | None = None, where: str | None = None,
    n_kind: str = "total", loss_column: str | None = None,
) -> RunTable:
    """Load, convert and validate a run table.

    Parameters
    ----------
    source : a file (CSV, Parquet, JSONL), a dataset folder (e.g. ``../shared/datasets/steplaw/``
        with ``format="steplaw"``) or a DataFrame.
    format : a name in `FORMATS` (see the module docstring); None detects it.
    where : a pandas query applied after loading (``"N <= 6e8 and D >= 1e10"``); unmatched rows
        are excluded with the query as the reason.
    n_kind : ``"total"`` or ``"active"``: which parameter count is ``N`` for MoE tables (both are
        kept as ``N_total`` and ``N_active``).
    loss_column : a source column to use as the loss instead of the format's default.

    Returns
    -------
    RunTable : the rows used, the rows excluded with reasons, and ``meta`` with the format,
        ``N_kind`` and unit notes.

    Raises
    ------
    RunTableError : one line naming the file, row and column of the problem.
    """
    fmt = _check_format(format)
    if n_kind not in N_KINDS:
        raise _error(f"n_kind must be one of {', '.join(N_KINDS)}, not {n_kind!r}")
    if loss_column is not None and not isinstance(loss_column, str):
        raise _error(f"loss_column must be a column name, not {type(loss_column).__name__}")
    src, label, fmt, row_offset = _read(source, fmt)
    if fmt is None:
        fmt = _layout_of(src.columns, label) or FORMATS[
            encoding_of(Path(label)) if row_offset is not None else GENERIC[0]]
    df, excluded, meta = prepare(fmt, src, label, Options(n_kind=n_kind, loss_column=loss_column))
    if row_offset is None and fmt.encoding:
        meta["format"] = "canonical"  # a DataFrame in canonical columns has no file format
    kind = fmt.kind or infer_kind(df.columns)
    if len(df) == 0:
        reasons = ", ".join(sorted(set(excluded["reason"]))) if len(excluded) else "no rows"
        raise _error(f"{label}: every row was excluded ({reasons})")
    table = validate(df, label, kind, meta, row_offset=row_offset, excluded=excluded)
    return table.where(where) if where is not None else table
