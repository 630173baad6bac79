"""Column layouts: the canonical one, and one small converter per published dataset.

A converter takes the source table (its own column names, index = source row labels) and returns
the canonical table (same index), the rows it excluded (with ``row`` and ``reason``) and notes for
``RunTable.meta``. Before a converter runs, `prepare` checks that its ``needs`` columns exist and
parses its ``numeric`` columns, so converters only rename and combine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from scalinfer.errors import RunTableError
from scalinfer.runs.schema import Kind, _one_line, _show, empty_excluded, to_float

__all__ = ["Format", "Options", "FORMATS", "GENERIC", "prepare", "infer_kind", "matching_layouts"]


@dataclasses.dataclass(frozen=True)
class Options:
    """What the caller chose: which N (``"total"`` or ``"active"``) and which loss column."""

    n_kind: str = "total"
    loss_column: str | None = None


Converted = tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Format:
    """One entry of `FORMATS`.

    Attributes
    ----------
    name : the ``format=`` value.
    description : one line: what a row is and how its units map to the canonical columns.
    kind : table kind it produces (None: inferred from the columns, for the generic formats).
    encoding : generic formats only: the file encoding they read (csv, jsonl, parquet).
    filename : dataset formats only: the file holding it inside the dataset's folder.
    signature : columns that identify the layout when detecting a file's format.
    needs : source columns the converter reads (missing one is an error).
    numeric : source columns parsed as numbers before converting.
    loss_default : the source column used as ``loss`` unless ``loss_column`` picks another.
    convert : source table, options -> (canonical table, exclusions, meta notes).
    """

    name: str
    description: str
    kind: Kind | None
    convert: Callable[[pd.DataFrame, Options], Converted]
    encoding: str | None = None
    filename: str | None = None
    signature: frozenset[str] = frozenset()
    needs: tuple[str, ...] = ()
    numeric: tuple[str, ...] = ()
    loss_default: str | None = None


def _error(message: str) -> RunTableError:
    return RunTableError(_one_line(message))


def _text(col: pd.Series) -> pd.Series:
    """Labels as strings (missing stays visible as 'nan')."""
    return col.astype(str).str.strip()


def _loss(src: pd.DataFrame, fmt_loss: str | None, opt: Options) -> pd.Series:
    return src[opt.loss_column or fmt_loss]


def _n_both(df: pd.DataFrame, total: pd.Series, active: pd.Series | None = None) -> pd.DataFrame:
    """Set N_total and N_active (dense: both the same); `prepare` then picks N by n_kind."""
    df["N_total"] = total
    df["N_active"] = total if active is None else active
    return df


def _canonical(src: pd.DataFrame, opt: Options) -> Converted:
    df = src.copy()
    if opt.loss_column and opt.loss_column != "loss":
        df["loss"] = df[opt.loss_column]
    if "N" not in df.columns:  # a table may give only the split counts
        pick = "N_active" if opt.n_kind == "active" else "N_total"
        if pick in df.columns:
            df["N"] = df[pick]
    else:
        if "N_total" not in df.columns and "N_active" in df.columns:
            df["N_total"] = df["N"]
        if "N_active" not in df.columns and "N_total" in df.columns:
            df["N_active"] = df["N"]
    return df, empty_excluded(), {}


def _steplaw(src: pd.DataFrame, opt: Options) -> Converted:
    df = pd.DataFrame(index=src.index)
    df["run_id"] = _text(src["exp_name"])
    df["group"] = [f"N{n / 1e6:.1f}M_D{d / 1e9:g}B" for n, d in zip(src["N"], src["D"])]
    _n_both(df, src["N"])
    for out, col in (("D", "D"), ("lr", "lr"), ("lr_grid", "lr_grid"), ("batch_seqs", "bs_seqs"),
                     ("seq_len", "seq_len"), ("batch_tokens", "bs_tokens"), ("steps", "steps")):
        df[out] = src[col]
    df["loss"] = _loss(src, "loss_smooth", opt)
    df["loss_last"] = src["loss_last"]
    return df, empty_excluded(), {}


def _steplaw_moe(src: pd.DataFrame, opt: Options) -> Converted:
    df, excluded, meta = _steplaw(src, opt)
    df["group"] = _text(src["moe_name"])
    _n_both(df, src["N"], src["N_active"])
    for col in ("active_ratio", "topk", "n_experts"):
        df[col] = src[col]
    return df, excluded, meta


def _zhang2024(src: pd.DataFrame, opt: Options) -> Converted:
    df = pd.DataFrame(index=src.index)
    df["group"] = _text(src["model"])
    df["run_id"] = df["group"] + "/bs" + [f"{b:g}" for b in src["batch_size_seqs"]]
    _n_both(df, src["N_nonembed"])
    for out, col in (("batch_seqs", "batch_size_seqs"), ("seq_len", "seq_len"),
                     ("batch_tokens", "batch_size_tokens"), ("target_loss", "target_loss_c4_eval"),
                     ("steps_to_target", "steps_to_target"), ("tokens_to_target", "tokens_to_target"),
                     ("steps_to_target_hardcoded_cell5", "steps_to_target_hardcoded_cell5"),
                     ("best_run_lr", "best_run_lr")):
        df[out] = src[col]
    return df, empty_excluded(), {}


def _gemstones(src: pd.DataFrame, opt: Options) -> Converted:
    df = pd.DataFrame(index=src.index)
    df["group"] = _text(src["shape"])
    cooldown = ["" if np.isnan(s) else f"@{s:g}" for s in src["cooldown_start_step"]]
    df["run_id"] = df["group"] + "/" + _text(src["lr_variant"]) + "/" + _text(src["phase"]) + cooldown
    _n_both(df, src["N_nonembed"])
    df["N_with_embed"] = src["N_total"]
    for out, col in (("D", "D_seen"), ("step", "step"), ("batch_tokens", "batch_tokens"),
                     ("phase", "phase"), ("lr_variant", "lr_variant"),
                     ("cooldown_start_step", "cooldown_start_step"), ("width", "width"),
                     ("depth", "depth")):
        df[out] = src[col]
    df["loss"] = _loss(src, "val_loss", opt)
    return df, empty_excluded(), {"lr": "unknown (not in the source; half_lr runs use half of it)"}


def _gadre2024(src: pd.DataFrame, opt: Options) -> Converted:
    df = pd.DataFrame(index=src.index)
    df["run_id"] = _text(src["name"])
    df["group"] = _text(src["dataset"])
    df["dataset"] = df["group"]
    _n_both(df, src["N_nonembed"])
    df["N_with_embed"] = src["N_total"]
    for out, col in (("D", "D"), ("lr", "lr"), ("batch_seqs", "global_bs_seqs"), ("seq_len", "seq_len"),
                     ("batch_tokens", "batch_tokens"), ("chinchilla_multiplier", "chinchilla_multiplier"),
                     ("args_consistent", "args_consistent")):
        df[out] = src[col]
    df["loss"] = _loss(src, "loss_c4_val", opt)
    return df, empty_excluded(), {"loss_column": opt.loss_column or "loss_c4_val"}


def _chinchilla(src: pd.DataFrame, opt: Options) -> Converted:
    df = pd.DataFrame(index=src.index)
    _n_both(df, src["N"])
    df["D"] = src["D"]
    df["C_flops"] = src["C_flops"]
    df["loss"] = _loss(src, "loss", opt)
    return df, empty_excluded(), {}


def _misfitting(src: pd.DataFrame, opt: Options) -> Converted:
    # The source repeats some (sweep, run id) records: an exact copy adds no information and is
    # excluded; a repeat with a different loss is a second execution and kept as its own run.
    key = _text(src["sweep_id"]) + "/" + _text(src["run_id"])
    exact = src.duplicated(keep="first").to_numpy()
    excluded = src.loc[exact].assign(row=list(src.index[exact]),
                                     reason="exact copy of an earlier record of the same run")
    kept = src.loc[~exact]
    key = key[~exact]
    repeat = key.groupby(key).cumcount().to_numpy()
    df = pd.DataFrame(index=kept.index)
    df["run_id"] = key + ["" if r == 0 else f"#{r + 1}" for r in repeat]
    df["group"] = _text(kept["model"])
    _n_both(df, kept["N_nonembed"])
    df["N_with_embed"] = kept["N_total"]
    for out, col in (("D", "D"), ("lr", "peak_lr"), ("batch_tokens", "batch_tokens"),
                     ("seq_len", "seq_len"), ("steps", "total_steps"), ("sweep_id", "sweep_id")):
        df[out] = kept[col]
    df["loss"] = _loss(kept, "loss_c4_eval", opt)
    return df, excluded, {}


_PORIAN_CONFIG = ("dataset", "hparams", "warmup", "decay", "param_count", "val")


def _porian(src: pd.DataFrame, opt: Options) -> Converted:
    # Budgets at which a configuration has no model are placeholder rows (N, D and loss empty).
    empty = (src[["N", "D", opt.loss_column or "loss"]].isna().all(axis=1)).to_numpy()
    excluded = src.loc[empty].assign(row=list(src.index[empty]),
                                     reason="placeholder: no model at this FLOP budget (N, D, loss empty)")
    kept = src.loc[~empty]
    df = pd.DataFrame(index=kept.index)
    df["group"] = _text(kept[_PORIAN_CONFIG[0]])
    for col in _PORIAN_CONFIG[1:]:
        df["group"] = df["group"] + "/" + _text(kept[col])
    df["run_id"] = df["group"] + [f"/C{c:g}/N{n:g}" for c, n in zip(kept["flops_budget"], kept["N"])]
    _n_both(df, kept["N"])
    df["D"] = kept["D"]
    df["flops_budget"] = kept["flops_budget"]
    for col in _PORIAN_CONFIG:
        df[col] = _text(kept[col])
    df["loss"] = _loss(kept, "loss", opt)
    return df, excluded, {"N": "meaning depends on param_count (kaplan: non-embedding; standard: "
                               "with output layer; attention: attention-FLOP adjusted)"}


_CANONICAL_NOTE = ("canonical columns N, D, loss (+ lr, batch_tokens or batch_seqs+seq_len, steps, "
                   "N_active, diverged, group, run_id, seed; step for curves)")

FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("csv", f"CSV in {_CANONICAL_NOTE}", None, _canonical, encoding="csv"),
    Format("parquet", f"Parquet in {_CANONICAL_NOTE}", None, _canonical, encoding="parquet"),
    Format("jsonl", f"JSON lines in {_CANONICAL_NOTE}", None, _canonical, encoding="jsonl"),
    Format("steplaw", "Step Law dense grid (dense_runs.csv): loss = loss_smooth, batch_tokens = "
           "bs_seqs*seq_len, group = (N, D) setting", "runs", _steplaw, filename="dense_runs.csv",
           signature=frozenset({"exp_name", "loss_smooth", "bs_seqs", "lr_grid"}),
           needs=("exp_name", "N", "D", "lr", "lr_grid", "bs_seqs", "seq_len", "bs_tokens", "steps",
                  "loss_smooth", "loss_last"),
           numeric=("N", "D"), loss_default="loss_smooth"),
    Format("steplaw-moe", "Step Law MoE grid (moe_runs.csv): N total or active by n_kind, "
           "group = moe_name", "runs", _steplaw_moe, filename="moe_runs.csv",
           signature=frozenset({"exp_name", "loss_smooth", "bs_seqs", "lr_grid", "moe_name"}),
           needs=("moe_name", "exp_name", "N", "N_active", "D", "lr", "lr_grid", "bs_seqs", "seq_len",
                  "bs_tokens", "steps", "loss_smooth", "loss_last", "active_ratio", "topk", "n_experts"),
           numeric=("N", "D"), loss_default="loss_smooth"),
    Format("zhang2024", "Zhang et al. critical batch (steps_to_target.csv): steps to reach the "
           "target C4 loss per (model, batch); N = N_nonembed", "steps_to_target", _zhang2024,
           filename="steps_to_target.csv",
           signature=frozenset({"target_loss_c4_eval", "batch_size_seqs", "steps_to_target"}),
           needs=("model", "N_nonembed", "batch_size_seqs", "seq_len", "batch_size_tokens",
                  "target_loss_c4_eval", "steps_to_target", "tokens_to_target",
                  "steps_to_target_hardcoded_cell5", "best_run_lr"),
           numeric=("batch_size_seqs",)),
    Format("gemstones", "Gemstones curves (curves.csv): N = N_nonembed, D = D_seen, loss = val_loss, "
           "run per (shape, lr_variant, phase, cooldown start); LR unknown", "curves", _gemstones,
           filename="curves.csv",
           signature=frozenset({"val_loss", "D_seen", "lr_variant", "phase"}),
           needs=("shape", "N_total", "N_nonembed", "lr_variant", "phase", "step", "D_seen",
                  "batch_tokens", "val_loss", "cooldown_start_step", "width", "depth"),
           numeric=("cooldown_start_step",), loss_default="val_loss"),
    Format("gadre2024", "Gadre et al. over-training (models.csv): N = N_nonembed, loss from "
           "loss_column (default loss_c4_val), group = dataset; 7B batch left missing", "runs",
           _gadre2024, filename="models.csv",
           signature=frozenset({"chinchilla_multiplier", "tokens_per_param", "N_nonembed"}),
           needs=("name", "dataset", "N_total", "N_nonembed", "D", "lr", "global_bs_seqs", "seq_len",
                  "batch_tokens", "chinchilla_multiplier", "args_consistent", "loss_c4_val"),
           loss_default="loss_c4_val"),
    Format("chinchilla", "Chinchilla points as extracted by Epoch AI (points.csv): N, D = C/(6N), "
           "loss", "runs", _chinchilla, filename="points.csv",
           signature=frozenset({"C_flops", "svg_x", "svg_y"}),
           needs=("N", "D", "C_flops", "loss"), loss_default="loss"),
    Format("misfitting", "(Mis)Fitting final runs (final_runs.csv): N = N_nonembed, lr = peak_lr, "
           "loss = loss_c4_eval, run_id = sweep/run; exact repeated records excluded", "runs",
           _misfitting, filename="final_runs.csv",
           signature=frozenset({"sweep_id", "peak_lr", "total_steps", "loss_c4_eval", "D"}),
           needs=("model", "N_total", "N_nonembed", "peak_lr", "batch_tokens", "seq_len", "total_steps",
                  "D", "loss_c4_eval", "sweep_id", "run_id"),
           loss_default="loss_c4_eval"),
    Format("porian", "Porian et al. isoFLOP points (isoflop_points.csv): group = dataset/hparams/"
           "warmup/decay/param_count/val; empty budgets excluded", "runs", _porian,
           filename="isoflop_points.csv",
           signature=frozenset({"flops_budget", "param_count", "hparams", "warmup", "decay"}),
           needs=(*_PORIAN_CONFIG, "flops_budget", "N", "D", "loss"),
           numeric=("flops_budget", "N"), loss_default="loss"),
)}
GENERIC = tuple(name for name, f in FORMATS.items() if f.encoding)


def infer_kind(columns: pd.Index) -> Kind:
    """Kind of a canonical table from its columns."""
    if "steps_to_target" in columns:
        return "steps_to_target"
    return "curves" if "step" in columns else "runs"


def matching_layouts(columns: pd.Index) -> list[str]:
    """Dataset formats whose signature the columns contain (the most specific ones only)."""
    cols = set(map(str, columns))
    hits = [f for f in FORMATS.values() if f.signature and f.signature <= cols]
    return [f.name for f in hits if not any(f.signature < g.signature for g in hits)]


def _decode_bytes(src: pd.DataFrame, source: str) -> None:
    """Byte strings (a Parquet binary column, a DataFrame cell) must be UTF-8 text; decode them."""
    for col in src.columns:
        if src[col].dtype != object:
            continue
        values = src[col].to_numpy()
        if not any(isinstance(v, (bytes, bytearray)) for v in values):
            continue
        decoded = []
        for label, v in zip(src.index, values):
            if isinstance(v, (bytes, bytearray)):
                try:
                    v = bytes(v).decode("utf-8")
                except UnicodeDecodeError as e:
                    raise _error(f"{source}: row {label}, column {col!r}: byte 0x{v[e.start]:02x} "
                                 f"is not UTF-8") from None
            decoded.append(v)
        src[col] = pd.Series(decoded, index=src.index, dtype=object)


def prepare(fmt: Format, src: pd.DataFrame, source: str, opt: Options) -> Converted:
    """Check the source columns a format needs, parse its numeric ones, and convert it."""
    cols = list(map(str, src.columns))
    for i, c in enumerate(cols):
        if c in cols[:i]:
            raise _error(f"{source}: column {c!r} appears more than once")
    src = src.copy()
    src.columns = cols
    _decode_bytes(src, source)
    needs = list(fmt.needs)
    if opt.loss_column:
        if fmt.loss_default is None and fmt.encoding is None:
            raise _error(f"{source}: format {fmt.name} has no loss column to choose "
                         f"(loss_column={opt.loss_column!r})")
        needs = [c for c in needs if c != fmt.loss_default] + [opt.loss_column]
    missing = [c for c in dict.fromkeys(needs) if c not in src.columns]
    if missing:
        hint = ""
        if opt.loss_column in missing:
            losses = [c for c in cols if "loss" in c.lower()]
            hint = f" (loss columns here: {', '.join(map(repr, losses)) or 'none'})"
        raise _error(
            f"{source}: missing column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(repr, missing))} for format {fmt.name}{hint}")
    for col in (*fmt.numeric, *(("N_total", "N_active") if fmt.encoding else ())):
        if col not in src.columns:
            continue
        values, bad = to_float(src[col])
        if bad is not None:
            raise _error(f"{source}: row {src.index[bad]}, column {col!r}: "
                         f"{_show(src[col].iloc[bad])} is not a number")
        src[col] = values
    df, excluded, meta = fmt.convert(src, opt)
    if "N_total" in df.columns and "N_active" in df.columns:
        df["N"] = df["N_active" if opt.n_kind == "active" else "N_total"]
    meta = {"format": fmt.name, "N_kind": opt.n_kind, **meta}
    if opt.loss_column:
        meta["loss_column"] = opt.loss_column
    return df, excluded, meta
