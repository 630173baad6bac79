"""The trainer as a real multi-process job: two processes on this machine joined by ``jax.distributed`` (a
localhost coordinator, gloo's CPU collectives over TCP), one CPU device each, against one process with two
devices and the same global batch. Losses, the resume after both processes stopped, the checkpoints and the
records must be those of the one-process run, written once.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scalinfer.errors import TrainError
from scalinfer.runtime import cache_root
from scalinfer.train import apply_overrides, preset

ROOT = Path(__file__).resolve().parent.parent
# 24 steps of 2 micro-batches of 16 sequences (8 per device), a checkpoint every 10 steps, no decay branch
OVERRIDES = ["name=mp", "total_tokens=49152", "batch_tokens=2048", "micro_batch_tokens=1024", "lr=1e-2",
             "checkpoint_every=10", "eval_tokens=8192", "decay_points=[]"]
TIMEOUT_S = 600  # per launch; a process whose peer died waits for it up to JAX's own timeouts


def _env(devices: int) -> dict[str, str]:
    env = {**os.environ, "SCALINFER_CACHE": str(cache_root()), "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


def _train(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "scalinfer.cli", "train", "--preset", "tiny", *OVERRIDES, *extra, "--out", str(out)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(cmds: list[tuple[list[str], dict[str, str]]]) -> list[subprocess.CompletedProcess]:
    """Run the commands at once; wait for all (killing the rest when one times out)."""
    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c, e in cmds]
    done = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT_S)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for d in done:
        assert d.returncode == 0, d.stderr[-3000:]
    return done


def _job(out: Path, *extra: str) -> list[tuple[list[str], dict[str, str]]]:
    """The two processes of one job (a fresh coordinator port each launch)."""
    job = ["multihost=true", f"coordinator_address=127.0.0.1:{_free_port()}", "num_processes=2"]
    return [(_train(out, *job, f"process_id={i}", *extra), _env(1)) for i in range(2)]


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _losses(path: Path) -> dict[int, float]:
    rows = [r for r in _metrics(path) if "eval_loss" not in r]
    steps = [r["step"] for r in rows]
    assert len(steps) == len(set(steps)), f"a step logged twice in {path}: {steps}"
    return {r["step"]: r["loss"] for r in rows}


@pytest.mark.slow
def test_two_processes_match_one_and_resume(tmp_path):
    """~100 CPU s in all (three processes each compile the step): the reference (one process, 2 devices)
    runs beside the first half of the 2-process job."""
    ref, job = tmp_path / "reference", tmp_path / "job"
    first = _launch([(_train(ref), _env(2)), *_job(job, "stop_after_steps=12")])
    assert all("stopped after 12 steps" in p.stderr for p in first[1:])
    assert sorted(_losses(job / "metrics.jsonl")) == list(range(1, 13))
    assert sorted(int(p.name) for p in (job / "checkpoints").iterdir()) == [10, 12]
    assert not (job / "runs.jsonl").exists()

    # both processes stopped; the same command again resumes them from step 12
    second = _launch(_job(job))
    want = _losses(ref / "metrics.jsonl")
    got = _losses(job / "metrics.jsonl")
    assert sorted(got) == list(range(1, 25))
    # Each device computes its half of the batch with the same program in both runs; only the cross-device
    # sums differ (gloo's all-reduce over TCP against XLA's in-process one), and a sum of two terms is the same
    # in either order. The trajectories agree bitwise here; rtol 1e-6 (the resume tests' bound) would still
    # catch a wrong shard (another process's rows, a batch fed twice), which changes the loss at 1e-2.
    np.testing.assert_allclose([got[s] for s in got], [want[s] for s in got], rtol=1e-6, atol=0)

    (rec,) = [json.loads(line) for line in (job / "runs.jsonl").read_text().splitlines()]  # once, not twice
    (ref_rec,) = [json.loads(line) for line in (ref / "runs.jsonl").read_text().splitlines()]
    assert rec["run_id"] == ref_rec["run_id"]       # where and how many processes ran it is not a result
    assert rec["n_devices"] == 2 and rec["steps"] == 24
    assert rec["loss"] == pytest.approx(ref_rec["loss"], rel=1e-6)
    evals = [r["eval_loss"] for r in _metrics(job / "metrics.jsonl") if "eval_loss" in r]
    assert evals == [rec["loss"]]
    assert all(f"loss {ref_rec['loss']:.4f}" in p.stdout for p in second)   # both processes report it
    assert sorted(int(p.name) for p in (job / "checkpoints").iterdir()) == [20, 24]  # keep_checkpoints=2


def test_multihost_fields_are_checked():
    base = preset("tiny")
    with pytest.raises(TrainError, match="need multihost=true"):
        apply_overrides(base, ["num_processes=2"])
    with pytest.raises(TrainError, match=r"process_id=2 must be in \[0, num_processes=2\)"):
        apply_overrides(base, ["multihost=true", "num_processes=2", "process_id=2"])
    with pytest.raises(TrainError, match="num_processes must be > 0"):
        apply_overrides(base, ["multihost=true", "num_processes=0"])
    cfg = apply_overrides(base, ["multihost=true", "coordinator_address=10.0.0.1:1234", "num_processes=4",
                                 "process_id=3"])
    assert (cfg.coordinator_address, cfg.num_processes, cfg.process_id) == ("10.0.0.1:1234", 4, 3)
