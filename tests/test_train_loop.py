"""The train loop end to end on the default corpus: learning, records, exact resume (also after a real
``kill -9``), divergence, decay branches, batch-size schedules, and 2 devices against 1.

One tiny MoE run (the ``trained`` fixture, ~200 steps) is the reference the other tests compare to;
they reuse its shapes, so the persistent compilation cache makes their compiles cheap.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from scalinfer.errors import TrainError
from scalinfer.schedules.file import write_schedule
from scalinfer.train import apply_overrides, param_counts, preset, stop_on_signal, train
from scalinfer.train.checkpoint import Checkpointer
from scalinfer.train.config import DataConfig
from scalinfer.runtime import cache_root
from scalinfer.train.data import load_corpus, unigram_entropy
from scalinfer.train.records import append_records, read_records

ROOT = Path(__file__).resolve().parent.parent
OVERRIDES = ["name=t", "total_tokens=409600", "batch_tokens=2048", "micro_batch_tokens=1024", "lr=1e-2",
             "warmup=0.05", "decay=0.2", "decay_points=[0.5]", "eval_every=100", "checkpoint_every=50",
             "eval_tokens=16384"]


def _config(*extra):
    return apply_overrides(preset("tiny"), [*OVERRIDES, *extra])


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _losses(path: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in _metrics(path) if "loss" in r and "eval_loss" not in r}


def _subprocess_env(**extra) -> dict[str, str]:
    env = {**os.environ, "SCALINFER_CACHE": str(cache_root()), "PYTHONPATH": str(ROOT), **extra}
    env.pop("XLA_FLAGS", None)
    env.update({k: v for k, v in extra.items()})
    return env


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("trained")
    records = train(_config(), out)
    return out, records


@pytest.mark.slow
def test_loss_falls_well_below_unigram_entropy(trained):
    out, records = trained
    eval_tokens = load_corpus(DataConfig(), 256).eval
    entropy = unigram_entropy(eval_tokens)       # the best model that ignores context
    assert 3.0 < entropy < 3.6
    main = records[0]
    assert main["loss"] < entropy - 0.8, (main["loss"], entropy)
    evals = [r["eval_loss"] for r in _metrics(out / "metrics.jsonl") if "eval_loss" in r]
    assert len(evals) == 2 and evals[0] > evals[1] == main["loss"]
    losses = _losses(out / "metrics.jsonl")
    assert np.mean([losses[s] for s in range(1, 11)]) > np.mean([losses[s] for s in range(191, 201)]) + 1.0


@pytest.mark.slow
def test_records_load_as_a_run_table(trained):
    out, records = trained
    from scalinfer.runs import load_runs

    table = load_runs(out / "runs.jsonl")
    assert len(table) == 2 and len(table.excluded) == 0
    df = table.df.set_index("run_id")
    main, branch = records
    counts = param_counts(_config().model)
    assert main["N"] == main["N_total"] == counts.non_embedding
    assert main["N_active"] == counts.non_embedding_active < main["N_total"]
    assert (main["D"], main["steps"], main["batch_tokens"], main["lr"]) == (409600, 200, 2048, 1e-2)
    assert main["diverged"] is False and main["seq_len"] == 64 and main["group"] == "moe-e4k2"
    assert main["schedule"] == "wsd-linear" and main["wall_time_s"] > 0
    # the decay branch forks at half the run and decays over 20% of its own length
    assert branch["branch_of"] == main["run_id"] and branch["fork_tokens"] == 204800
    assert branch["D"] == 204800 + 51200 and branch["steps"] == 125
    assert branch["schedule"] == "wsd-linear/decay@204800"
    assert main["loss"] < branch["loss"] < 3.0
    assert set(df.index) == {main["run_id"], branch["run_id"]}
    assert df.loc[branch["run_id"], "D"] == branch["D"]
    # training again in the same folder is a no-op returning the same records
    assert train(_config(), out) == records
    assert len(read_records(out / "runs.jsonl")) == 2


@pytest.mark.slow
def test_metrics_report_router_and_gradient_noise(trained):
    out, records = trained
    rows = [r for r in _metrics(out / "metrics.jsonl") if "loss" in r]
    assert len(rows) == 200
    last = rows[-1]
    for key in ("lr", "batch_tokens", "grad_norm", "router_balance", "router_z", "dropped_fraction",
                "expert_load_max", "grad_sq_small", "grad_sq_big", "b_simple", "b_simple_ema", "step_time_s"):
        assert key in last, key
    assert 0.0 <= last["dropped_fraction"] < 0.5
    assert last["grad_sq_small"] > last["grad_sq_big"]    # a micro-batch gradient is noisier
    assert records[0]["b_simple_ema"] > 0
    lrs = [r["lr"] for r in rows]
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(1e-2) and lrs[-1] < 1e-3
    branch = _metrics(out / "metrics-decay204800.jsonl")
    assert branch[0]["step"] == 101 and branch[-1]["eval_loss"] == records[1]["loss"]


@pytest.mark.slow
def test_a_stop_request_in_a_decay_branch_retrains_the_branch_from_its_fork(trained, tmp_path):
    """`train(..., stop_requested)` asked to stop 5 steps into the decay branch: it returns [] with the main run
    recorded and the branch not; the rerun trains the branch again from its fork (its log holds each step once)
    and its records equal the uninterrupted run's to 1e-6 (the same process, so the same reduction orders)."""
    ref_out, reference = trained

    def in_the_branch() -> bool:
        log = next(tmp_path.glob("metrics-*.jsonl"), None)
        return log is not None and len(log.read_text().splitlines()) >= 5

    assert train(_config(), tmp_path, stop_requested=in_the_branch) == []
    assert [r["run_id"] for r in read_records(tmp_path / "runs.jsonl")] == [reference[0]["run_id"]]
    records = train(_config(), tmp_path)
    assert [r["run_id"] for r in records] == [r["run_id"] for r in reference]
    np.testing.assert_allclose([r["loss"] for r in records], [r["loss"] for r in reference], rtol=1e-6, atol=0)
    (branch_log,) = tmp_path.glob("metrics-*.jsonl")
    steps = [json.loads(line)["step"] for line in branch_log.read_text().splitlines() if "eval_loss" not in line]
    assert len(steps) == len(set(steps)) and steps == sorted(steps)
    ref_steps = [json.loads(line)["step"] for line in (ref_out / branch_log.name).read_text().splitlines()
                 if "eval_loss" not in line]
    assert steps == ref_steps


def test_stop_on_signal_records_the_first_signal_and_lets_a_second_act():
    """The first SIGINT inside `stop_on_signal` is recorded, not raised; the handler before it is back at once
    (a second SIGINT is a KeyboardInterrupt) and after the block; SIGTERM is recorded the same way; a signal the
    process ignores stays ignored."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with stop_on_signal() as stop:
            assert not stop() and stop.signal is None
            signal.raise_signal(signal.SIGINT)
            assert stop() and stop.signal is signal.SIGINT
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        with stop_on_signal() as stop:
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # else the raise below would kill us
            signal.raise_signal(signal.SIGTERM)
            assert stop.signal is signal.SIGTERM
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with stop_on_signal() as stop:
            signal.raise_signal(signal.SIGINT)
            assert not stop()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        for s, h in before.items():
            signal.signal(s, h)


@pytest.mark.slow
def test_an_interrupt_in_python_stops_train_with_a_checkpoint(trained, tmp_path):
    """A notebook's "interrupt kernel" (SIGINT) during `train(..., stop_requested=stop)` under `stop_on_signal`:
    no KeyboardInterrupt, `train` returns [] with a checkpoint of the last step it logged, and the rerun continues
    to the uninterrupted run's losses (to 1e-6: the same process, so the same reduction orders)."""
    ref = _losses(trained[0] / "metrics.jsonl")
    asked = 0
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stop_on_signal() as stop:
            def stop_requested() -> bool:  # the interrupt arrives while step 37 is in flight
                nonlocal asked
                asked += 1
                if asked == 38:
                    signal.raise_signal(signal.SIGINT)
                return stop()

            assert train(_config(), tmp_path, stop_requested=stop_requested) == []
    finally:
        signal.signal(signal.SIGINT, before)
    assert stop.signal is signal.SIGINT
    ckpt = Checkpointer(tmp_path / "checkpoints", keep=None)
    try:
        assert ckpt.latest_step() == max(_losses(tmp_path / "metrics.jsonl")) == 37
    finally:
        ckpt.close()
    assert len(train(_config(), tmp_path)) == 2
    got = _losses(tmp_path / "metrics.jsonl")
    assert sorted(got) == sorted(ref)
    np.testing.assert_allclose([got[s] for s in ref], [ref[s] for s in ref], rtol=1e-6, atol=0)


@pytest.mark.slow
def test_a_notebooks_interrupt_kernel_stops_train_with_a_checkpoint(tmp_path):
    """Jupyter's "interrupt kernel" (jupyter_client's `interrupt_kernel`, a SIGINT to the kernel process) while a
    cell runs `train` under `stop_on_signal`: the cell ends normally with `[]` and the signal recorded, and the
    latest checkpoint is the last step logged."""
    import queue

    from jupyter_client.manager import start_new_kernel

    out = tmp_path / "run"
    cell = (f"from scalinfer.train import apply_overrides, preset, stop_on_signal, train\n"
            f"cfg = apply_overrides(preset('tiny'), ['total_tokens=50000000', 'checkpoint_every=100000', "
            f"'eval_every=0', 'progress=false'])\n"
            f"with stop_on_signal() as stop:\n"
            f"    records = train(cfg, {str(out)!r}, stop_requested=stop)\n"
            f"print('stopped', records, stop.signal.name if stop.signal else None)\n")
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        msg_id = kc.execute(cell)
        metrics, deadline = out / "metrics.jsonl", time.time() + 240
        while time.time() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 25):
            time.sleep(0.05)
        km.interrupt_kernel()
        text, errors = "", []
        while time.time() < deadline:
            try:
                msg = kc.get_iopub_msg(timeout=5)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                text += msg["content"]["text"]
            elif msg["msg_type"] == "error":
                errors.append(msg["content"]["ename"])
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert not errors, (errors, text[-2000:])
    assert "stopped [] SIGINT" in text, text[-2000:]
    ckpt = Checkpointer(out / "checkpoints", keep=None)
    try:
        assert ckpt.latest_step() == max(_losses(out / "metrics.jsonl")) >= 25
    finally:
        ckpt.close()


@pytest.mark.slow
def test_stop_and_resume_is_exact(trained, tmp_path):
    ref = _losses(trained[0] / "metrics.jsonl")
    assert train(_config("stop_after_steps=30"), tmp_path) == []
    assert max(_losses(tmp_path / "metrics.jsonl")) == 30
    assert train(_config("stop_after_steps=60"), tmp_path) == []
    got = _losses(tmp_path / "metrics.jsonl")
    assert sorted(got) == list(range(1, 61))
    np.testing.assert_allclose([got[s] for s in got], [ref[s] for s in got], rtol=1e-6, atol=0)
    with pytest.raises(TrainError, match="another configuration"):
        train(_config("stop_after_steps=60", "lr=2e-2"), tmp_path)


# `scalinfer ...` with SIGINT set to its default first: a test runner started in the background passes on SIGINT
# ignored, and `scalinfer train` keeps a signal ignored that it was started ignoring
_CLI_WITH_SIGINT = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                    "sys.argv = ['scalinfer', *sys.argv[1:]]; runpy.run_module('scalinfer.cli', run_name='__main__')")


def _signal_mid_run(cmd: list[str], metrics: Path, stderr_log: Path, sig: int, lines: int = 25) -> tuple[int, str]:
    """Start the training command `cmd`, send it `sig` once the log `metrics` has `lines` lines, and wait for it
    to end; returns its exit code and stderr. Its stderr goes to a file, not a pipe: nobody reads a pipe while it
    runs (a full one would block the child) and a file leaves no handle open after a kill."""
    with open(stderr_log, "wb") as err:
        proc = subprocess.Popen(cmd, env=_subprocess_env(), stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= lines:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before the signal: {stderr_log.read_text()[-2000:]}"
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, stderr_log.read_text()


@pytest.mark.slow
def test_kill_9_and_resume_is_exact(tmp_path):
    cmd = [sys.executable, "-m", "scalinfer.cli", "train", "--preset", "tiny", *OVERRIDES, "checkpoint_every=10",
           "stop_after_steps=150", "--out", str(tmp_path)]
    # the uninterrupted reference runs in a fresh process too, so that all three runs share one environment
    # (this test process may have other devices or float64 on from earlier tests: other reduction orders)
    ref_dir = tmp_path / "reference"
    ref_cmd = [c if not c.startswith("stop_after_steps=") else "stop_after_steps=50" for c in cmd]
    ref_cmd[ref_cmd.index(str(tmp_path))] = str(ref_dir)
    done = subprocess.run(ref_cmd, env=_subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ref = _losses(ref_dir / "metrics.jsonl")
    tmp_path = tmp_path / "killed"
    cmd[cmd.index(str(tmp_path.parent))] = str(tmp_path)
    metrics = tmp_path / "metrics.jsonl"
    returncode, _ = _signal_mid_run(cmd, metrics, tmp_path.parent / "killed-run.stderr", signal.SIGKILL)
    assert returncode == -signal.SIGKILL
    assert max(_losses(metrics)) >= 25
    # resume as a user would after a crash: the same command again, in a fresh process with the same
    # environment (in-process JAX may have other devices or float64 switched on by earlier tests, which
    # changes reduction order at the 1e-5 level and, through the chaos of training, the trajectory)
    resume = [c if not c.startswith("stop_after_steps=") else "stop_after_steps=50" for c in cmd]
    done = subprocess.run(resume, env=_subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = _losses(metrics)
    assert sorted(got) == list(range(1, 51))    # steps after the last checkpoint were redone, once
    np.testing.assert_allclose([got[s] for s in got], [ref[s] for s in got], rtol=1e-6, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_run_with_a_checkpoint_of_its_last_step(tmp_path, sig):
    """Ctrl-C (SIGINT) or a scheduler's SIGTERM to `scalinfer train`: the run stops after the step in flight and
    saves a checkpoint of it (periodic checkpoints are off here, so it is the signal's), says so on stderr and
    exits 128 + the signal's number; the rerun resumes from that step, redoing nothing, and follows the
    uninterrupted trajectory exactly."""
    out = tmp_path / "run"
    base = ["train", "--preset", "tiny", *OVERRIDES, "checkpoint_every=100000"]
    args = [*base, "--out", str(out)]
    metrics = out / "metrics.jsonl"
    returncode, stderr = _signal_mid_run([sys.executable, "-c", _CLI_WITH_SIGINT, *args], metrics,
                                         tmp_path / "stderr.log", sig)
    assert returncode == 128 + sig.value, stderr[-2000:]
    logged = sorted(_losses(metrics))
    stop = logged[-1]
    assert logged == list(range(1, stop + 1)) and 25 <= stop < 100     # in the main run, before its branch forks
    assert f"stopped on {sig.name} at step {stop}, its checkpoint saved" in stderr, stderr[-2000:]
    assert sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit()) == [stop]
    assert not (out / "runs.jsonl").exists()

    end = f"stop_after_steps={stop + 20}"
    done = subprocess.run([sys.executable, "-m", "scalinfer.cli", *base, end, "--out", str(out)],
                          env=_subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = _losses(metrics)
    assert sorted(got) == list(range(1, stop + 21))                     # nothing redone, nothing skipped
    done = subprocess.run([sys.executable, "-m", "scalinfer.cli", *base, end, "--out", str(tmp_path / "reference")],
                          env=_subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ref = _losses(tmp_path / "reference" / "metrics.jsonl")
    np.testing.assert_allclose([got[s] for s in sorted(got)], [ref[s] for s in sorted(got)], rtol=1e-6, atol=0)


@pytest.mark.slow
def test_a_signal_in_a_decay_branch_says_so_and_the_rerun_trains_the_branch(tmp_path):
    """Ctrl-C to `scalinfer train` while its decay branch trains: exit 130, stderr says the stop came in a decay
    branch with the main run recorded (branches keep no checkpoints), and the same command again trains the
    branch from its fork and records it."""
    out = tmp_path / "run"
    # a branch of 90 steps (forked at step 90, 184,320 tokens, it decays to D = 368,640), long enough to be
    # caught mid-way; the main run decays from step 100 on
    args = ["train", "--preset", "tiny", *OVERRIDES, "decay=0.5", "decay_points=[0.45]", "--out", str(out)]
    branch_log = out / "metrics-decay184320.jsonl"
    returncode, stderr = _signal_mid_run([sys.executable, "-c", _CLI_WITH_SIGINT, *args], branch_log,
                                         tmp_path / "stderr.log", signal.SIGINT, lines=5)
    assert returncode == 130, stderr[-2000:]
    assert ("stopped on SIGINT in a decay branch (the main run is done and recorded); rerun the same command "
            f"(--out {out}) to train the branches still missing, each from its fork") in stderr, stderr[-2000:]
    (main,) = read_records(out / "runs.jsonl")
    assert len(branch_log.read_text().splitlines()) < 90          # stopped mid-branch
    done = subprocess.run([sys.executable, "-m", "scalinfer.cli", *args], env=_subprocess_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = read_records(out / "runs.jsonl")
    assert [r["run_id"] for r in records] == [main["run_id"], main["run_id"] + "-decay184320"]
    steps = [json.loads(line)["step"] for line in branch_log.read_text().splitlines() if "eval_loss" not in line]
    assert steps == list(range(91, 181))                           # the branch once, from its fork to its end


def test_divergence_is_recorded_not_raised(tmp_path):
    records = train(_config("lr=1e30", "total_tokens=40960", "decay_points=[0.6]"), tmp_path)
    assert [r["diverged"] for r in records] == [True, True]
    main, branch = records
    assert main["loss"] is None and main["D"] == 40960 and main["diverged_at_step"] <= 5
    assert branch["loss"] is None and branch["D"] > 0
    from scalinfer.runs import load_runs

    table = load_runs(tmp_path / "runs.jsonl")
    assert table.df["diverged"].all() and table.df["loss"].isna().all()
    last = _metrics(tmp_path / "metrics.jsonl")[-1]
    assert last["diverged"] is True


def test_batch_schedule_file(tmp_path):
    sched = write_schedule(tmp_path / "batch.json", {
        "batch": [{"from_tokens": 0, "batch_tokens": 1024}, {"from_tokens": 20480, "batch_tokens": 2048}],
        "lr": {"peak": 5e-3, "warmup_tokens": 4096, "decay_start_tokens": 32768, "total_tokens": 40960,
               "decay_shape": "1-sqrt"}})
    out = tmp_path / "run"
    (main,) = train(_config(f"schedule_file={json.dumps(str(sched))}", "decay_points=[]", "eval_every=0"), out)
    rows = [r for r in _metrics(out / "metrics.jsonl") if "loss" in r]
    assert [r["batch_tokens"] for r in rows] == [1024] * 20 + [2048] * 10
    assert "b_simple" not in rows[0] and "b_simple" in rows[-1]   # two micro-batches once the batch grew
    assert rows[4]["lr"] == pytest.approx(5e-3) and rows[-1]["lr"] < 5e-3 * 0.5
    assert (main["D"], main["steps"], main["lr"], main["batch_tokens"]) == (40960, 30, 5e-3, 40960 / 30)
    assert main["schedule"] == "wsd-1-sqrt+batch-schedule" and len(main["batch_schedule"]) == 2


@pytest.mark.slow
def test_two_devices_match_one(trained, tmp_path):
    """Data parallel (mesh 2 x 1) and expert parallel (mesh 1 x 2: batch split over both axes,
    experts split over "expert") on 2 CPU devices, in one subprocess, against the 1-device run."""
    ref = _losses(trained[0] / "metrics.jsonl")
    runs = {"data": "mesh_expert=1", "expert": "mesh_expert=2"}
    script = ("import sys; from scalinfer.cli import main\n"
              f"for mesh, out in {[(v, str(tmp_path / k)) for k, v in runs.items()]!r}:\n"
              f"    assert main(['train', '--preset', 'tiny', *{OVERRIDES!r}, 'stop_after_steps=8', mesh,\n"
              "                 '--out', out]) == 0\n"
              "import jax; assert jax.device_count() == 2\n")
    env = _subprocess_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert jax.device_count() != 2, "the reference run must not itself use 2 devices"
    for name in runs:
        got = _losses(tmp_path / name / "metrics.jsonl")
        assert sorted(got) == list(range(1, 9))
        # the mesh changes only the order of float reductions
        np.testing.assert_allclose([got[s] for s in got], [ref[s] for s in got], rtol=2e-4, err_msg=name)


def test_cli_dry_run_and_errors(tmp_path, capsys):
    from scalinfer.cli import main

    assert main(["train", "--preset", "cal-s", "decay_points=[0.5]", "--out", str(tmp_path), "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["plan"]["steps"] == 4_000_000 // 8192 and plan["params"]["non_embedding"] > 3e5
    assert plan["plan"]["branches"][0]["fork_tokens"] >= plan["plan"]["total_tokens"] / 2
    assert main(["train", "model.top_k=9", "--out", str(tmp_path)]) == 2
    assert "model.top_k=9 must be between 1 and model.n_experts=4" in capsys.readouterr().err


def test_run_table_appends_never_duplicate(tmp_path):
    path = tmp_path / "runs.jsonl"
    assert append_records(path, [{"run_id": "a", "loss": 1.0}]) == [{"run_id": "a", "loss": 1.0}]
    assert append_records(path, [{"run_id": "a", "loss": 2.0}, {"run_id": "b", "loss": math.nan}]) == \
        [{"run_id": "b", "loss": math.nan}]
    assert read_records(path) == [{"run_id": "a", "loss": 1.0}, {"run_id": "b", "loss": None}]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".runs.jsonl.lock", "runs.jsonl"]


def test_tune_malloc_only_before_the_backend_and_on_request():
    """`tune_malloc` applies in a fresh process, not once JAX runs or when the user opts out."""
    code = ("from scalinfer.train.loop import tune_malloc; a = tune_malloc(); import jax.numpy as jnp; "
            "jnp.ones(2).block_until_ready(); print(a, tune_malloc())")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    run = lambda **e: subprocess.run([sys.executable, "-c", code], env={**env, **e}, capture_output=True,  # noqa: E731
                                     text=True, check=True, cwd=ROOT).stdout.split()
    if sys.platform.startswith("linux"):
        assert run() == ["True", "False"]
    assert run(SCALINFER_NO_MALLOC_TUNING="1") == ["False", "False"]


def test_the_lr_table_holds_past_two_billion_tokens():
    """The loop evaluates the schedule once for all steps (`_lr_table`): on int64 token counts, so a run past 2^31
    tokens (2.1B) gets its LRs (an int32 count overflowed there, and the per-step call raised OverflowError), and
    the caller's x64 setting is left as it was. The WSD values at hand-computed points (1e-3 peak, 1e8 warmup
    tokens, 2e9 linear decay to 0 at 1e10; batches of 2.5e8 tokens)."""
    from scalinfer.schedules.wsd import wsd_schedule
    from scalinfer.train.loop import _lr_table

    x64 = jax.config.jax_enable_x64
    lr = _lr_table(wsd_schedule(1e-3, 10**10, 10**8, 2 * 10**9), lambda t: 250_000_000, 0, 10**10)
    assert jax.config.jax_enable_x64 == x64
    assert len(lr) == 40
    assert lr[0] == 0.0 and lr[1] == pytest.approx(1e-3)  # warmup over by 2.5e8 tokens
    assert lr[20] == pytest.approx(1e-3)                   # 5e9 tokens: the stable phase
    assert lr[36] == pytest.approx(1e-3 * (1 - (9e9 - 8e9) / 2e9))  # 9e9: halfway down the decay
    assert np.all(np.diff(lr[32:]) < 0)
