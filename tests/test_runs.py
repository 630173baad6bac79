"""The run table: dataset loaders on the real files, round trips, `where`, the report, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scalinfer.errors import RunTableError
from scalinfer.runs import FORMATS, RunTable, detect_format, load_runs, validate

DATASETS = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets"


def dataset(folder: str) -> Path:
    path = DATASETS / folder
    if not path.is_dir():
        pytest.skip(f"published dataset folder {path} is absent (read in place, never copied)")
    return path


def raw(folder: str, name: str) -> pd.DataFrame:
    return pd.read_csv(dataset(folder) / name)


# ------------------------------------------------------------------ dataset loaders on the real files

def test_steplaw_dense_rows_units_and_groups():
    src = raw("steplaw", "dense_runs.csv")
    runs = load_runs(dataset("steplaw"), format="steplaw")
    assert runs.kind == "runs" and runs.meta["format"] == "steplaw"
    assert len(runs) == 1911 and len(runs.excluded) == 0
    df = runs.df
    np.testing.assert_array_equal(df["batch_tokens"], src["bs_seqs"] * 2048)
    np.testing.assert_array_equal(df["loss"], src["loss_smooth"])   # the paper's target metric
    np.testing.assert_array_equal(df["lr_grid"], src["lr_grid"])
    np.testing.assert_array_equal(df["N"], df["N_total"])
    np.testing.assert_array_equal(df["N"], df["N_active"])
    assert df.groupby(["N", "D"]).ngroups == df["group"].nunique() == 17
    assert df["run_id"].is_unique
    assert not df["diverged"].any()


def test_steplaw_folder_holds_two_formats():
    folder = dataset("steplaw")
    with pytest.raises(RunTableError, match=r"steplaw \(dense_runs.csv\), steplaw-moe \(moe_runs.csv\)"):
        load_runs(folder)
    assert detect_format(folder / "dense_runs.csv") == "steplaw"
    assert detect_format(folder / "moe_runs.csv") == "steplaw-moe"


def test_steplaw_moe_n_kind_switch():
    src = raw("steplaw", "moe_runs.csv")
    total = load_runs(dataset("steplaw") / "moe_runs.csv")
    active = load_runs(dataset("steplaw"), format="steplaw-moe", n_kind="active")
    assert len(total) == len(active) == 708
    assert total.meta["N_kind"] == "total" and active.meta["N_kind"] == "active"
    np.testing.assert_array_equal(total.df["N"], src["N"])
    np.testing.assert_array_equal(active.df["N"], src["N_active"])
    for t in (total, active):  # both counts kept whichever is N
        np.testing.assert_array_equal(t.df["N_total"], src["N"])
        np.testing.assert_array_equal(t.df["N_active"], src["N_active"])
    assert (active.df["N"] < total.df["N"]).all()
    assert sorted(total.df["group"].unique()) == sorted(src["moe_name"].unique())


def test_zhang2024_steps_to_target():
    runs = load_runs(dataset("critical_batch_size_zhang2024"))
    assert runs.kind == "steps_to_target" and len(runs) == 36
    df = runs.df
    np.testing.assert_array_equal(df["batch_tokens"], df["batch_seqs"] * 512)
    np.testing.assert_array_equal(df["tokens_to_target"], df["steps_to_target"] * df["batch_tokens"])
    src = raw("critical_batch_size_zhang2024", "steps_to_target.csv")
    np.testing.assert_array_equal(df["N"], src["N_nonembed"])
    np.testing.assert_array_equal(df["target_loss"], src["target_loss_c4_eval"])
    assert "loss" not in df.columns


def test_gemstones_curves():
    runs = load_runs(dataset("gemstones_mcleish2025"))
    src = raw("gemstones_mcleish2025", "curves.csv")
    assert runs.kind == "curves" and len(runs) == len(src) == 5248
    df = runs.df
    assert "lr" not in df.columns and "unknown" in runs.meta["lr"]
    np.testing.assert_array_equal(df["N"], src["N_nonembed"])
    assert (df["N_with_embed"] > df["N"]).all()
    np.testing.assert_array_equal(df["D"], df["step"] * 4_194_304)
    np.testing.assert_array_equal(df["loss"], src["val_loss"])
    keys = src.groupby(["shape", "lr_variant", "phase", "cooldown_start_step"], dropna=False)
    assert df["run_id"].nunique() == keys.ngroups
    assert set(df["phase"]) == {"constant_lr", "cooldown_start", "cooldown_end"}
    assert set(df["lr_variant"]) == {"main", "half_lr"}


def test_gadre2024_loss_column_and_missing_7b_batch():
    runs = load_runs(dataset("gadre2024_overtraining"))
    src = raw("gadre2024_overtraining", "models.csv")
    assert len(runs) == 104 and runs.meta["loss_column"] == "loss_c4_val"
    np.testing.assert_array_equal(runs.df["loss"], src["loss_c4_val"])
    np.testing.assert_array_equal(runs.df["N"], src["N_nonembed"])
    seven_b = runs.df["run_id"].str.contains("open_lm_7b")
    assert seven_b.sum() == 3 and runs.df.loc[seven_b, "batch_tokens"].isna().all()
    assert runs.df.loc[~seven_b, "batch_tokens"].notna().all()
    other = load_runs(dataset("gadre2024_overtraining"), loss_column="loss_paloma_c4_en")
    np.testing.assert_array_equal(other.df["loss"], src["loss_paloma_c4_en"])
    with pytest.raises(RunTableError, match=r"missing column 'loss_nope'.*loss_c4_val"):
        load_runs(dataset("gadre2024_overtraining"), loss_column="loss_nope")


def test_chinchilla_points():
    runs = load_runs(dataset("chinchilla_epoch2024"))
    assert runs.meta["format"] == "chinchilla" and len(runs) == 245
    np.testing.assert_allclose(runs.df["D"], runs.df["C_flops"] / (6 * runs.df["N"]), rtol=1e-9)


def test_misfitting_keeps_repeated_runs_and_excludes_exact_copies():
    src = raw("misfitting_li2025", "final_runs.csv")
    runs = load_runs(dataset("misfitting_li2025"))
    assert len(runs) + len(runs.excluded) == len(src) == 261
    assert len(runs.excluded) == src.duplicated().sum()
    assert set(runs.excluded["reason"]) == {"exact copy of an earlier record of the same run"}
    assert runs.df["run_id"].is_unique
    assert runs.df["run_id"].str.startswith(tuple(src["sweep_id"].unique())).all()
    repeats = runs.df[runs.df["run_id"].str.contains("#")]
    assert len(repeats) > 0   # same (sweep, run) with another loss: a second execution, kept
    np.testing.assert_array_equal(runs.df["lr"], src.drop_duplicates()["peak_lr"])


def test_porian_excludes_placeholders_with_reason():
    src = raw("porian2024_isoflop", "isoflop_points.csv")
    runs = load_runs(dataset("porian2024_isoflop"))
    placeholders = src[["N", "D", "loss"]].isna().all(axis=1)
    assert len(runs.excluded) == placeholders.sum() > 0
    assert len(runs) + len(runs.excluded) == len(src)
    assert runs.excluded["reason"].str.startswith("placeholder").all()
    assert runs.df["group"].nunique() == src[["dataset", "hparams", "warmup", "decay", "param_count",
                                              "val"]].drop_duplicates().shape[0]
    assert "placeholder" in runs.report()


@pytest.mark.parametrize("folder, fmt", [
    ("critical_batch_size_zhang2024", "zhang2024"), ("gemstones_mcleish2025", "gemstones"),
    ("gadre2024_overtraining", "gadre2024"), ("chinchilla_epoch2024", "chinchilla"),
    ("misfitting_li2025", "misfitting"), ("porian2024_isoflop", "porian"),
])
def test_detect_format_from_folder_and_columns(folder, fmt):
    path = dataset(folder)
    assert detect_format(path) == fmt
    assert detect_format(path / FORMATS[fmt].filename) == fmt


# ------------------------------------------------------------------ round trips, where, report

def _canonical_runs() -> pd.DataFrame:
    return pd.DataFrame({
        "run_id": ["a", "b", "c", "d"], "group": ["dense", "dense", "moe", "moe"],
        "N": [1e8, 2e8, 4e8, 4e8], "N_active": [1e8, 2e8, 1e8, 1e8],
        "D": [2**20 * 1000, 2**20 * 2000, 2**20 * 4000, 2**20 * 4000],
        "lr": [1e-3, 2e-3, 3e-3, 4e-3], "batch_tokens": [2**20] * 4, "steps": [1000, 2000, 4000, 4000],
        "loss": [3.1, 2.9, 2.8, np.nan], "diverged": [False, False, False, True],
    })


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
def test_round_trip(tmp_path, suffix):
    direct = load_runs(_canonical_runs())
    path = tmp_path / f"runs{suffix}"
    df = _canonical_runs()
    if suffix == ".csv":
        df.to_csv(path, index=False)
    elif suffix == ".parquet":
        df.to_parquet(path)
    else:
        df.to_json(path, orient="records", lines=True)
    loaded = load_runs(path)
    assert loaded.meta["format"] == suffix[1:] and loaded.rows[0] == (2 if suffix == ".csv" else 1)
    pd.testing.assert_frame_equal(loaded.df, direct.df, check_dtype=False)
    assert loaded.df["diverged"].tolist() == [False, False, False, True]
    assert math.isnan(loaded.df["loss"].iloc[3])   # a censored run, kept


def test_batch_in_sequences_is_converted(tmp_path):
    df = _canonical_runs().drop(columns="batch_tokens").assign(batch_seqs=512, seq_len=2048)
    runs = load_runs(df)
    np.testing.assert_array_equal(runs.df["batch_tokens"], 512 * 2048)


def test_curves_from_a_canonical_file(tmp_path):
    path = tmp_path / "curves.csv"
    pd.DataFrame({"run_id": ["x"] * 3, "step": [100, 200, 300], "N": 1e8, "batch_tokens": 4096,
                  "D": [409600, 819200, 1228800], "loss": [4.0, 3.5, 3.3]}).to_csv(path, index=False)
    runs = load_runs(path)
    assert runs.kind == "curves" and len(runs) == 3


def test_n_kind_on_a_canonical_table():
    active = load_runs(_canonical_runs(), n_kind="active")
    np.testing.assert_array_equal(active.df["N"], [1e8, 2e8, 1e8, 1e8])
    np.testing.assert_array_equal(active.df["N_total"], [1e8, 2e8, 4e8, 4e8])


def test_where_excludes_with_reason_and_keeps_rows():
    runs = load_runs(_canonical_runs(), where="group == 'moe'")
    assert runs.df["run_id"].tolist() == ["c", "d"] and runs.rows == (2, 3)
    assert runs.excluded["row"].tolist() == [0, 1]
    assert set(runs.excluded["reason"]) == {"not matched by --where \"group == 'moe'\""}
    assert runs.report().splitlines() == [
        "<DataFrame> [canonical]: 2 runs used, 2 excluded",
        "  excluded 2: not matched by --where \"group == 'moe'\"",
    ]


def test_detect_format_of_dataframes():
    assert detect_format(_canonical_runs()) is None
    assert detect_format(raw("chinchilla_epoch2024", "points.csv")) == "chinchilla"
    runs = load_runs(raw("chinchilla_epoch2024", "points.csv"))
    assert runs.meta["format"] == "chinchilla" and runs.source == "<DataFrame>"


def test_where_on_a_dataset():
    src = raw("steplaw", "dense_runs.csv")
    runs = load_runs(dataset("steplaw") / "dense_runs.csv", where="N <= 3e8 and D >= 1e10")
    expected = ((src["N"] <= 3e8) & (src["D"] >= 1e10)).sum()
    assert len(runs) == expected and len(runs.excluded) == len(src) - expected
    assert runs.report().splitlines()[0].endswith(f"{expected} runs used, {len(src) - expected} excluded")


def test_where_errors():
    with pytest.raises(RunTableError, match="not a valid query"):
        load_runs(_canonical_runs(), where="N >")
    with pytest.raises(RunTableError, match="matches none of 4 rows"):
        load_runs(_canonical_runs(), where="N > 1e12")


def test_validate_keeps_its_api():
    table = validate(_canonical_runs().drop(columns="run_id"), "sim", meta={"origin": "test"})
    assert isinstance(table, RunTable) and table.meta == {"origin": "test"}
    assert table.df["run_id"].tolist() == ["row2", "row3", "row4", "row5"]
    assert len(table.where("N > 1e8")) == 3


# ------------------------------------------------------------------ bad input: one line, file, row, column

GOOD_CSV = "N,D,loss,batch_tokens,steps\n1e8,4096000,3.2,4096,1000\n2e8,8192000,3.0,4096,2000\n"

BAD_FILES = {
    # id: (file name, content, load_runs kwargs, fragments the message must contain)
    "missing_column": ("runs.csv", "N,D\n1e8,1e9\n", {}, ["missing required column 'loss'"]),
    "zero_N": ("runs.csv", "N,D,loss\n1e8,1e9,3\n0,1e9,3\n", {}, ["row 3", "'N'", "positive"]),
    "negative_N": ("runs.jsonl", '{"N": 1e8, "D": 1e9, "loss": 3}\n{"N": -5, "D": 1e9, "loss": 3}\n', {},
                   ["row 2", "'N'", "-5.0 is not a positive"]),
    "nan_loss": ("runs.csv", "N,D,loss\n1e8,1e9,3\n2e8,1e9,nan\n", {},
                 ["row 3", "'loss'", "not marked diverged"]),
    "unknown_format": ("runs.csv", GOOD_CSV, {"format": "stepLaw"}, ["unknown format 'stepLaw'", "steplaw"]),
    "empty_0_bytes": ("runs.csv", "", {}, ["empty (0 bytes)"]),
    "empty_header_only": ("runs.csv", "N,D,loss\n", {}, ["header but no data rows"]),
    "empty_parquet_0_bytes": ("runs.parquet", "", {}, ["empty (0 bytes)"]),
    "batch_seqs_without_seq_len": ("runs.csv", "N,D,loss,batch_seqs\n1e8,1e9,3,32\n", {},
                                   ["'batch_seqs'", "no 'seq_len'"]),
    "non_utf8": ("runs.csv", b"N,D,loss,group\n1e8,1e9,3,ok\n2e8,1e9,3,caf\xe9\n", {},
                 ["row 3", "column 'group'", "0xe9", "not UTF-8"]),
    "non_utf8_jsonl": ("runs.jsonl", b'{"N": 1e8, "D": 1e9, "loss": 3, "group": "\xff"}\n', {},
                       ["row 1", "column 'group'", "not UTF-8"]),
    "string_in_numeric": ("runs.csv", "N,D,loss\n1e8,1e9,3\n2e8,1e9,three\n", {},
                          ["row 3", "'loss'", "'three' is not a number"]),
    "inf": ("runs.csv", "N,D,loss\n1e8,inf,3\n", {}, ["row 2", "'D'", "inf is not a finite"]),
    "duplicated_run": ("runs.csv", "N,D,lr,loss\n1e8,1e9,1e-3,3\n2e8,1e9,1e-3,3\n1e8,1e9,1e-3,3.1\n", {},
                       ["rows 2 and 4 are the same run", "N=100000000.0"]),
    "duplicated_run_id": ("runs.csv", "run_id,N,D,loss\na,1e8,1e9,3\na,2e8,1e9,3\n", {},
                          ["rows 2 and 3", "run_id='a'"]),
    "perplexity": ("runs.csv", "N,D,loss\n1e8,1e9,25.3\n2e8,1e9,19.0\n", {},
                   ["every loss is above 12.5", "perplexity"]),
    "loss_out_of_range": ("runs.csv", "N,D,loss\n1e8,1e9,3\n2e8,1e9,80.1\n", {},
                          ["row 3", "'loss'", "not a loss in nats"]),
    "batch_tokens_in_sequences": ("runs.csv", "N,D,loss,batch_tokens,steps\n1e8,4194304000,3,1024,1000\n",
                                  {}, ["row 2", "'D'", "batch in sequences"]),
    "tiny_token_batch": ("runs.csv", "N,D,loss,batch_tokens\n1e8,1e9,3,32\n", {},
                         ["row 2", "'batch_tokens'", "batch in sequences"]),
    "D_in_billions": ("runs.csv", "N,D,loss,batch_tokens\n1e8,4.2,3,4096\n", {},
                      ["row 2", "'D'", "less than one batch"]),
    "active_above_total": ("runs.csv", "N,N_total,N_active,D,loss\n1e8,1e8,4e8,1e9,3\n", {},
                           ["row 2", "'N_active'", "exceed"]),
    "inconsistent_batch": ("runs.csv", "N,D,loss,batch_tokens,batch_seqs,seq_len\n1e8,1e9,3,4096,4,2048\n",
                           {}, ["row 2", "'batch_tokens'", "batch_seqs * seq_len"]),
    "unknown_columns": ("runs.csv", "x,y\n1,2\n", {}, ["cannot tell the format", "steplaw"]),
    "bad_n_kind": ("runs.csv", GOOD_CSV, {"n_kind": "expert"}, ["n_kind", "total, active"]),
    "duplicate_header": ("runs.csv", "N,D,loss,N\n1e8,1e9,3,2\n", {}, ["column 'N' appears more than once"]),
    "ragged_csv": ("runs.csv", "N,D,loss\n1e8,1e9,3\n1e8,1e9,3,4,5\n", {}, ["not a valid CSV"]),
    "bad_json": ("runs.jsonl", '{"N": 1e8, "D": 1e9, "loss": 3}\n{"N": 1e8,\n', {}, ["row 2", "not valid JSON"]),
    "not_parquet": ("runs.parquet", "N,D,loss\n1,2,3\n", {}, ["not a valid Parquet"]),
    "bad_diverged": ("runs.csv", "N,D,loss,diverged\n1e8,1e9,3,maybe\n", {},
                     ["row 2", "'diverged'", "not true/false"]),
    "format_missing_columns": ("runs.csv", GOOD_CSV, {"format": "steplaw"},
                               ["missing columns", "for format steplaw"]),
}


@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_bad_input_is_a_one_line_typed_error(tmp_path, case):
    name, content, kwargs, fragments = BAD_FILES[case]
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(RunTableError) as info:
        load_runs(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    if not case.startswith(("unknown_format", "bad_n_kind")):
        assert str(path) in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_diverged_nan_loss_is_kept_as_censored(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("N,D,loss,diverged\n1e8,1e9,3,false\n2e8,1e9,nan,true\n")
    runs = load_runs(path)
    assert runs.df["diverged"].tolist() == [False, True] and len(runs.excluded) == 0


def test_missing_file_and_folders(tmp_path):
    with pytest.raises(RunTableError, match="no such file or folder"):
        load_runs(tmp_path / "nope.csv")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(RunTableError, match=r"no known dataset in this folder \(looked for dense_runs.csv"):
        load_runs(tmp_path)
    with pytest.raises(RunTableError, match="no dense_runs.csv in this folder"):
        load_runs(tmp_path, format="steplaw")
    with pytest.raises(RunTableError, match="is a folder; format csv reads a single file"):
        load_runs(tmp_path, format="csv")
    with pytest.raises(RunTableError, match="must be a path or a pandas DataFrame"):
        load_runs(42)


def test_row_numbers_are_file_lines_even_with_blank_lines(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text('N,D,loss,group\n1e8,1e9,3,"two\nlines"\n\n2e8,1e9,-1,b\n')
    with pytest.raises(RunTableError, match=r"row 5, column 'loss': -1.0"):
        load_runs(path)
