"""`scalinfer sweep`: parsing sweep files, a small real sweep with workers, --only/--index/--merge, and resume
after a worker is killed with SIGKILL (no duplicate and no missing records)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from scalinfer.errors import TrainError
from scalinfer.sweep import load_sweep, merge, parse_sweep, run_status

TINY = """
[sweep]
name = "tiny"
preset = "tiny"

[base]
total_tokens = {total}
batch_tokens = 512
eval_tokens = 1024
checkpoint_every = {ckpt}
decay_points = [{fork}]
# the sweep machinery is under test, not the model: a one-layer dense model compiles fastest
model = {{n_layers = 1, n_experts = 1, top_k = 1, capacity_factor = "none"}}

[base.optimizer]
decay = 0.2

[[grid]]
name = "t"
[grid.axes]
"optimizer.lr" = [0.003, 0.01]
"""


def _write(tmp_path: Path, total=4096, ckpt=0, fork=2048) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(TINY.format(total=total, ckpt=ckpt, fork=fork))
    return path


def _ids(table: Path) -> list[str]:
    return [json.loads(line)["run_id"] for line in table.read_text().splitlines() if line.strip()]


# ---- parsing ---------------------------------------------------------------------------------------------
def test_parse_grid_runs_and_overrides():
    data = {
        "sweep": {"name": "s", "preset": "tiny"},
        "base": {"total_tokens": 8192, "optimizer": {"decay": 0.2}},
        "grid": [{"name": "g", "model": {"d_model": 48, "n_heads": 3},
                  "axes": {"optimizer.lr": [0.001, 0.01], "batch_tokens": [512, 1024]}}],
        "run": [{"name": "dense", "model": {"n_experts": 1, "top_k": 1, "capacity_factor": "none"}}],
    }
    sweep = parse_sweep(data, "s.toml")
    names = [r.name for r in sweep.runs]
    assert names == ["g-lr0.001-b512", "g-lr0.001-b1024", "g-lr0.01-b512", "g-lr0.01-b1024", "dense"]
    g = sweep.runs[3].config
    assert (g.optimizer.lr, g.batch_tokens, g.model.d_model, g.model.n_heads, g.total_tokens) == (
        0.01, 1024, 48, 3, 8192)
    assert g.optimizer.decay == 0.2 and g.model.seq_len == 64  # the preset's value survives
    dense = sweep.runs[4].config.model
    assert dense.n_experts == 1 and dense.capacity_factor is None
    assert len({r.run_id for r in sweep.runs}) == 5
    assert sweep.find("dense") is sweep.runs[4] and sweep.find(sweep.runs[0].run_id) is sweep.runs[0]


@pytest.mark.parametrize("data, message", [
    ({"grid": [{"axes": {"seed": [1]}}]}, r"grid\[0\] needs a name"),
    ({"run": [{"name": "a"}, {"name": "a"}]}, "used twice"),
    ({"grid": [{"name": "g", "axes": {"optimizer.lr": []}}]}, "non-empty list"),
    ({"grid": [{"name": "g", "axes": {"optimizer.rate": [1e-3]}}]}, r"grid\[0\] \(g\).*unknown key 'rate'"),
    ({"run": [{"name": "a", "total_tokens": "many"}]}, r"run\[0\] \(a\).total_tokens"),
    ({"runs": [{"name": "a"}]}, "unknown top-level"),
    ({"sweep": {"name": "x"}}, "no runs"),
    ({"sweep": {"preset": "huge"}, "run": [{"name": "a"}]}, "unknown preset"),
])
def test_parse_errors_name_the_entry(data, message):
    with pytest.raises(TrainError, match=message):
        parse_sweep(data, "bad.toml")


def test_cli_reports_bad_sweep_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[run]]\nname = 'a'\nbatch_tokens = 100\n")
    r = run_cli("sweep", bad, "--out", tmp_path / "o")
    assert r.code == 2 and r.err.startswith("error:") and "batch_tokens" in r.err
    r = run_cli("sweep", tmp_path / "missing.toml", "--out", tmp_path / "o")
    assert r.code == 2 and "does not exist" in r.err
    r = run_cli("sweep", "--merge", tmp_path / "nothing")
    assert r.code == 2 and "not a sweep folder" in r.err


# ---- running ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_small_sweep_with_workers_only_index_and_merge(tmp_path):
    path = _write(tmp_path)
    out = tmp_path / "out"
    sweep = load_sweep(path)
    # one run in this process, the way a scheduler's array task launches it
    r = run_cli("sweep", path, "--out", out, "--index", "1")
    assert r.code == 0, r.err
    assert run_status(sweep.runs[1], out).state == "done" and run_status(sweep.runs[0], out).state == "pending"
    assert set(_ids(out / "runs.jsonl")) == set(sweep.runs[1].expected_ids)

    # the rest by two worker processes: only the unfinished run is trained
    r = run_cli("sweep", path, "--out", out, "--workers", "2")
    assert r.code == 0, r.err
    expected = [i for run in sweep.runs for i in run.expected_ids]
    assert _ids(out / "runs.jsonl") == expected  # sweep order, each record once
    records = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert {rec["lr"] for rec in records} == {0.003, 0.01}
    assert sorted({rec["D"] for rec in records}) == [2560, 4096]  # the branch: fork 2048 + decay 512
    manifest = json.loads((out / "manifest.json").read_text())
    assert [m["state"] for m in manifest["runs"]] == ["done", "done"]
    assert all(m["wall_s"] > 0 and m["config"]["seed"] == 0 for m in manifest["runs"])
    assert manifest["machine"]["cpu_count"] and "commit" in manifest["runs"][0]["code"]
    assert (out / "logs" / "worker-0.log").exists()

    # nothing left to do: a re-run, --only and --merge change nothing
    before = (out / "runs.jsonl").read_text()
    r = run_cli("sweep", path, "--out", out, "--only", sweep.runs[0].name)
    assert r.code == 0, r.err
    r = run_cli("sweep", "--merge", out)
    assert r.code == 0, r.err
    assert (out / "runs.jsonl").read_text() == before
    r = run_cli("sweep", path, "--out", out, "--list")
    assert r.code == 0 and r.out.count("done") == 2

    # export: the results without checkpoints, with the diagnostics a run with diagnostics_every writes
    (sweep.runs[0].directory(out) / "diagnostics.jsonl").write_text('{"step": 10}\n')
    r = run_cli("sweep", "--merge", out, "--export", tmp_path / "export")
    assert r.code == 0, r.err
    exported = tmp_path / "export"
    assert (exported / "runs.jsonl").read_text() == before and (exported / "manifest.json").exists()
    for run in sweep.runs:
        files = {p.name for p in (exported / "runs" / run.run_id).iterdir()}
        assert {"config.json", "runs.jsonl", "sweep_run.json", "metrics.jsonl"} <= files
        assert not any(n.startswith("checkpoint") or n == "stable" for n in files)
    assert (exported / "runs" / sweep.runs[0].run_id / "diagnostics.jsonl").read_text() == '{"step": 10}\n'

    # a run id claimed by two folders with different records is an error, not a silent choice
    (out / "runs" / "copy").mkdir()
    rec = json.loads(before.splitlines()[0])
    rec["loss"] = 9.9
    (out / "runs" / "copy" / "runs.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.raises(TrainError, match="different records"):
        merge(out)


@pytest.mark.slow
def test_resume_after_worker_killed(tmp_path):
    """SIGKILL the worker mid-run, re-run the sweep: every record exactly once, the run resumed."""
    path = _write(tmp_path, total=512 * 120, ckpt=10, fork=0.5)
    out = tmp_path / "out"
    sweep = load_sweep(path)
    first = sweep.runs[0]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-m", "scalinfer.cli", "sweep", str(path), "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    run_dir = first.directory(out)
    pid = None
    deadline = time.time() + 240
    while time.time() < deadline:
        ckpts = run_dir / "checkpoints"
        if ckpts.is_dir() and any(p.name.isdigit() for p in ckpts.iterdir()) and (run_dir / ".lock").exists():
            text = (run_dir / ".lock").read_text().split()
            if text:
                pid = int(text[0])
                break
        assert parent.poll() is None, parent.communicate()
        time.sleep(0.02)
    assert pid is not None, "the worker never wrote a checkpoint"
    os.kill(pid, signal.SIGKILL)
    _, err = parent.communicate(timeout=120)
    assert parent.returncode == 1 and "killed by signal 9" in err, err
    st = run_status(first, out)
    assert st.state == "partial" and st.records == 0
    assert run_status(sweep.runs[1], out).state == "pending"

    r = run_cli("sweep", path, "--out", out)
    assert r.code == 0, r.err
    expected = [i for run in sweep.runs for i in run.expected_ids]
    ids = _ids(out / "runs.jsonl")
    assert ids == expected and len(set(ids)) == len(ids)
    # the killed run resumed from its checkpoint: its metrics cover every step exactly once
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines if "loss" in m] == list(range(1, 121))


def test_write_summary_writes_the_rows_atomically_with_the_umask(tmp_path):
    # the studies' summaries (data/*/summarize.py) write through it: one CSV, header from the first row
    import csv as _csv

    from scalinfer.sweep.store import write_summary

    old = os.umask(0o027)
    try:
        path = write_summary(tmp_path, [{"size": "d32", "loss": 2.5}, {"size": "d64", "loss": 2.25}])
    finally:
        os.umask(old)
    assert list(_csv.DictReader(path.open())) == [{"size": "d32", "loss": "2.5"}, {"size": "d64", "loss": "2.25"}]
    assert path.stat().st_mode & 0o777 == 0o640 and [p.name for p in tmp_path.iterdir()] == ["summary.csv"]
    assert write_summary(tmp_path, []).read_text() == ""
