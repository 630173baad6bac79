"""A user's first hour, part 1 (issue #25): nothing lost, nothing misleading.

Each test runs a command as a user would (in-process through `run_cli`, or as a process where signals are
under test) and asserts the exit code, the one-line message and that no file outside the output path changed
(`_snapshot` of the test's folder before and after).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from scalinfer._io import atomic_write_text, check_output
from scalinfer.errors import OutputError

TABLE = ROOT / "data" / "simulated_chinchilla.csv"


def _snapshot(*roots: Path) -> dict[str, tuple]:
    """Every path under `roots` with its type and mode, and for a file its size and modification time. (A
    folder's own time is left out: the output check creates and removes a probe file in the output's folder.)"""
    out = {}
    for root in roots:
        for p in [root, *root.rglob("*")]:
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            out[str(p)] = (kind, stat.S_IMODE(st.st_mode)) + (() if kind == stat.S_IFDIR else
                                                               (st.st_size, st.st_mtime_ns))
    return out


def _one_line_error(r, *expect: str) -> str:
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.err
    assert "Traceback" not in r.err
    for e in expect:
        assert e in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def work(tmp_path):
    """A folder with a copy of the bundled table and a file posing as a fit (the output checks run before any
    fit file is read)."""
    (tmp_path / "runs.csv").write_bytes(TABLE.read_bytes())
    (tmp_path / "fit.nc").write_bytes(b"not read: the output is refused first")
    return tmp_path


# ---- output safety ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, output, expect", [
    (["fit", "{w}/runs.csv", "--model", "chinchilla", "-o", "{w}/runs.csv"], "runs.csv", "is an input"),
    (["fit", "{w}/runs.csv", "--model", "chinchilla", "-o", "{w}/./runs.csv"], "runs.csv", "is an input"),
    (["fit", "{w}/runs.csv", "--model", "chinchilla", "-o", "{w}/fit.nc"], "fit.nc", "add --force"),
    (["plot", "{w}/fit.nc", "trace", "-o", "{w}/fit.nc", "--force"], "fit.nc", "is an input"),
    (["schedule", "{w}/fit.nc", "--N", "1e8", "--D", "1e9", "-o", "{w}/fit.nc", "--force"], "fit.nc", "is an input"),
    (["schedule", "{w}/fit.nc", "--N", "1e8", "--D", "1e9", "-o", "{w}/s.json", "--plot", "{w}/s.json"], "s.json",
     "is an input"),
    (["simulate", "chinchilla", "-o", "{w}/runs.csv"], "runs.csv", "add --force"),
    (["plan", "--size", "d32l2", "--target-N", "1e7", "--target-D", "2e8", "-o", "{w}/runs.csv"], "runs.csv",
     "add --force"),
    (["plan", "--size", "d32l2", "--target-N", "1e7", "--target-D", "2e8", "--prior", "{w}/fit.nc",
      "-o", "{w}/fit.nc", "--force"], "fit.nc", "is an input"),
])
def test_refuses_to_overwrite_an_input_or_an_existing_output(work, argv, output, expect):
    """``fit victim.csv -o victim.csv`` replaced the table with HDF5; an existing fit was overwritten silently."""
    before = _snapshot(work)
    r = run_cli(*[a.format(w=work) for a in argv])
    _one_line_error(r, expect, output)
    assert _snapshot(work) == before


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_refuses_a_non_regular_output(work, kind):
    """``-o /dev/full`` replaced the device node with a regular file."""
    if kind == "folder":
        target = work / "sub"
        target.mkdir()
    elif kind == "fifo":
        target = work / "pipe"
        os.mkfifo(target)
    else:
        target = Path("/dev/full")
        if not target.exists():
            pytest.skip("no /dev/full here")
    dev = os.stat("/dev/full") if Path("/dev/full").exists() else None
    before = _snapshot(work)
    for argv in (["fit", work / "runs.csv", "--model", "chinchilla", "-o", target, "--force"],
                 ["simulate", "chinchilla", "-o", target, "--force"]):
        r = run_cli(*argv)
        _one_line_error(r, str(target))
    assert _snapshot(work) == before
    if dev is not None:  # the device node is still a device, the same one
        now = os.stat("/dev/full")
        assert stat.S_ISCHR(now.st_mode) and now.st_rdev == dev.st_rdev and now.st_ino == dev.st_ino
    # the library's atomic writes refuse too (a Python caller, no CLI check before)
    with pytest.raises(OutputError, match="not a regular file"):
        atomic_write_text(target, "x")


def test_creates_no_folder_tree(work):
    """``-o /nonexistent_dir/x.nc`` created a folder at the file system root; now one line and nothing made."""
    before = _snapshot(work)
    for out in (work / "missing" / "x.nc", work / "missing" / "deeper" / "x.nc"):
        r = run_cli("fit", work / "runs.csv", "--model", "chinchilla", "-o", out)
        _one_line_error(r, "does not exist", str(work / "missing"))
    r = run_cli("fit", work / "runs.csv", "--model", "chinchilla", "-o", "/nonexistent_dir_scalinfer/x.nc")
    _one_line_error(r, "/nonexistent_dir_scalinfer does not exist")
    assert not Path("/nonexistent_dir_scalinfer").exists()
    # a folder output (sweep --out, train --out) is the last level: made if its parent exists, else an error
    r = run_cli("sweep", work / "fit.nc", "--out", work / "missing" / "deeper")
    _one_line_error(r, "does not exist")
    r = run_cli("train", "--out", work / "missing" / "deeper")
    _one_line_error(r, "does not exist")
    r = run_cli("sweep", work / "fit.nc", "--out", work / "runs.csv")
    _one_line_error(r, "not a folder")
    r = run_cli("sweep", "--merge", work, "--export", work)
    _one_line_error(r, "is an input")
    assert _snapshot(work) == before


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (Linux)")
def test_output_checked_before_the_work(work):
    """``-o /proc/x.nc`` failed after 18 s of NUTS; now before the table is even read (no report line)."""
    before = _snapshot(work)
    t0 = time.perf_counter()
    r = run_cli("fit", work / "runs.csv", "--model", "chinchilla", "-o", "/proc/x.nc")
    line = _one_line_error(r, "/proc/x.nc", "cannot write in /proc")
    assert "runs used" not in r.err and time.perf_counter() - t0 < 5, line
    assert _snapshot(work) == before


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_outputs_honour_the_umask(work, umask):
    """Atomic writes made 0600 files whatever the umask; colleagues on a shared cluster could not read them."""
    old = os.umask(umask)
    try:
        r = run_cli("simulate", "chinchilla", "-o", work / "sim.csv")
    finally:
        os.umask(old)
    assert r.code == 0, r.err
    for p in (work / "sim.csv", work / "sim.csv.manifest.json"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask, (p, oct(p.stat().st_mode))
    # --force replaces the file and keeps the mode its owner gave it
    os.chmod(work / "sim.csv", 0o640)
    before = _snapshot(work)
    r = run_cli("simulate", "chinchilla", "--seed", "1", "-o", work / "sim.csv", "--force")
    assert r.code == 0, r.err
    assert stat.S_IMODE((work / "sim.csv").stat().st_mode) == 0o640
    changed = {p for p in set(before) | set(_snapshot(work)) if before.get(p) != _snapshot(work).get(p)}
    assert changed <= {str(work / "sim.csv"), str(work / "sim.csv.manifest.json")}, changed


def test_check_output_allows_a_new_file_and_force(work):
    assert check_output(work / "new.nc") == work / "new.nc"
    assert check_output(work / "fit.nc", force=True) == work / "fit.nc"
    assert check_output(work / "fit.nc", inputs=[None, work / "runs.csv"], force=True) == work / "fit.nc"
    os.symlink(work / "runs.csv", work / "link.csv")  # another spelling of the same file is the same file
    assert check_output(work / "out.nc", inputs=[work / "link.csv"]) == work / "out.nc"
    with pytest.raises(OutputError, match="is an input"):
        check_output(work / "runs.csv", inputs=[work / "link.csv"], force=True)


# ---- the CLI: one line, exit 2, before any work ---------------------------------------------------------------
@pytest.mark.parametrize("extra, expect", [
    (["--model", "chinchilla", "--chains", "0"], "--chains"),
    (["--model", "chinchilla", "--samples", "-5"], "--samples"),
    (["--model", "chinchilla", "--warmup", "-1"], "--warmup"),
    (["--model", "chinchilla", "--max-samples", "0"], "--max-samples"),
    (["--model", "chinchilla", "--samples", "200", "--max-samples", "100"], "--max-samples 100 is below --samples 200"),
    (["--model", "chinchilla", "--max-samples", "999"], "--max-samples 999 is below --samples 1000"),
    (["--model", "chinchilla", "--seed", "1.5"], "--seed"),
    (["--model", "chinchilla", "--method", "tempering"], "--method"),
    (["--model", "classic", "--method", "nuts"], "bootstrap"),
    ([], "--model"),
])
def test_fit_flags_fail_in_one_line(work, extra, expect):
    """--chains 0, --samples -5, --model classic --method nuts were tracebacks; --warmup -1 was accepted; a fit
    without --model silently fitted chinchilla."""
    argv = ["fit", work / "runs.csv", *extra, "-o", work / "x.nc"]
    before = _snapshot(work)
    r = run_cli(*argv)
    _one_line_error(r, expect)
    assert _snapshot(work) == before


def test_a_folder_is_not_a_fit_file(work):
    """A folder given as a fit file printed a two-line HDF5 dump."""
    for argv in (["summary", work], ["predict", work, "--N", "1e9", "--D", "1e10"], ["compare", work, work],
                 ["plot", work, "trace", "-o", work / "x.png"]):
        r = run_cli(*argv)
        _one_line_error(r, "is a folder")
    r = run_cli("summary", work / "absent.nc")
    _one_line_error(r, "no such file")


@pytest.mark.parametrize("params, expect", [
    ('{"nope": 1}', "'nope'"),
    ('{"alpha": 0.3, "nope": 1, "zzz": 2}', "'nope', 'zzz'"),
    ("{alpha: 0.3}", "not JSON"),
    ("[1, 2]", "JSON object"),
])
def test_simulate_rejects_unknown_parameters(work, params, expect):
    """``simulate --params '{"nope": 1}'`` exited 0 and recorded the bogus parameter."""
    before = _snapshot(work)
    r = run_cli("simulate", "chinchilla", "--params", params, "-o", work / "sim.csv")
    line = _one_line_error(r, "--params", expect)
    if "nope" in params:  # the valid names are listed
        assert all(k in line for k in ("E", "A", "B", "alpha", "beta", "sigma")), line
    assert _snapshot(work) == before


def test_simulate_params_override_the_defaults(work):
    r = run_cli("simulate", "chinchilla", "--params", '{"alpha": 0.3}', "-o", work / "sim.csv")
    assert r.code == 0, r.err
    import json

    manifest = json.loads((work / "sim.csv.manifest.json").read_text())
    assert manifest["true_params"]["alpha"] == 0.3 and manifest["true_params"]["beta"] == 0.3658


def test_predict_at_a_compute_budget(work):
    """The README's ``scalinfer predict chin.nc --C 1e24`` failed (model 'chinchilla' does not take --C), and in
    Python ``predict(C=...)`` returned an empty extrapolation. A MAP fit: the point is the interface, not the
    intervals."""
    fit = work / "chin.nc"
    r = run_cli("fit", work / "runs.csv", "--model", "chinchilla", "--method", "map", "-o", fit)
    assert r.code == 0, r.err
    r = run_cli("predict", fit, "--C", "1e24", "--json")
    assert r.code == 0, r.err
    p = r.json()
    assert {"N_opt", "D_opt", "loss"} <= set(p)
    # C = 6 N D at the optimum
    assert 6 * p["N_opt"]["median"] * p["D_opt"]["median"] == pytest.approx(1e24, rel=1e-6)
    # the simulated table's largest run: N = 5e9, D = 80 x 5e9 = 4e11
    assert p["extrapolation"]["C_ratio"] == pytest.approx(1e24 / (6 * 5e9 * 4e11))
    from scalinfer.inference import load_fit

    assert load_fit(fit).predict(C=1e24).extrapolation["C_ratio"] == pytest.approx(p["extrapolation"]["C_ratio"])
    for argv in (["--C", "1e24", "--N", "1e9"], ["--N", "1e9"], ["--C", "0"]):
        _one_line_error(run_cli("predict", fit, *argv))


@pytest.mark.parametrize("command, listed", [
    ("fit", ("chinchilla", "surface", "classic", "batch-openai", "batch-wsd", "batch-floor", "nuts", "laplace",
             "bootstrap", "gemstones", "--force")),
    ("simulate", ("batch-floor", "--force")),
    ("plot", ("lr-valley", "trace", "--force")),
    ("schedule", ("1-sqrt", "--force")),
    ("plan", ("cal-xs-dense", "--force")),
])
def test_help_lists_every_choice(command, listed):
    r = run_cli(command, "--help")
    assert r.code == 0
    text = " ".join(r.out.split())
    assert all(x in text for x in listed), [x for x in listed if x not in text]


def test_foreign_warnings_hidden_unless_verbose(monkeypatch, tmp_path):
    """ArviZ UserWarnings leaked into `compare`'s output beside scalinfer's own warnings."""
    import scalinfer.cli.query as query

    def noisy(args):
        warnings.warn_explicit("foreign warning", UserWarning, "arviz/stats.py", 1, module="arviz.stats")
        warnings.warn_explicit("our warning", UserWarning, "scalinfer/predict.py", 1, module="scalinfer.predict")
        return 0

    def show(message, category, filename, lineno, file=None, line=None):  # as Python shows them, not pytest
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line=""))

    monkeypatch.setattr(query, "cmd_summary", noisy)
    monkeypatch.setattr(warnings, "showwarning", show)
    (tmp_path / "f.nc").write_bytes(b"")
    quiet = run_cli("summary", tmp_path / "f.nc")
    loud = run_cli("summary", tmp_path / "f.nc", "--verbose")
    loud_first = run_cli("--verbose", "summary", tmp_path / "f.nc")
    assert quiet.code == loud.code == loud_first.code == 0
    assert "foreign warning" not in quiet.err + quiet.out and "our warning" in quiet.err
    assert "foreign warning" in loud.err and "our warning" in loud.err
    assert "foreign warning" in loud_first.err


# ---- stopping a sweep stops its workers ----------------------------------------------------------------------
SWEEP = """
[sweep]
name = "stop"
preset = "tiny"

[base]
total_tokens = {total}
batch_tokens = 512
eval_tokens = 1024
checkpoint_every = 20
decay_points = [0.5]
model = {{n_layers = 1, n_experts = 1, top_k = 1, capacity_factor = "none"}}

[[grid]]
name = "t"
[grid.axes]
"optimizer.lr" = [0.003, 0.01]
"""


def _alive(pid: int) -> bool:
    """Running (a zombie, which a container's init may never reap, counts as stopped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _latest(run_dir: Path) -> int:
    d = run_dir / "checkpoints"
    return max((int(p.name) for p in d.iterdir() if p.name.isdigit()), default=-1) if d.is_dir() else -1


def _last_logged_step(run_dir: Path) -> int:
    """The last step in the run's metrics log (a line still being written is not counted)."""
    steps = [-1]
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        with contextlib.suppress(ValueError):
            steps.append(json.loads(line)["step"])
    return max(steps)


def _start_sweep(tmp_path: Path):
    """A two-run sweep of the smallest model in a child process; returns (parent, worker pid, its run folder)
    once the worker has written a checkpoint."""
    from scalinfer.sweep import load_sweep

    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP.format(total=512 * 4000))  # long enough never to finish within the test
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # started with SIGINT ignored, as a background job of a non-interactive shell is (and as this test's own
    # process may be under a test runner): the parent's Ctrl-C must still reach and stop its workers, which
    # inherit the ignoring (they ignored it, and the SIGINT case hung, until the workers set their own handler)
    # (the ignoring is inherited across exec; set here, not in a preexec_fn: forking a process that runs JAX's
    # threads to run Python in the child is unsafe, and Python warns of it)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        parent = subprocess.Popen([sys.executable, "-m", "scalinfer.cli", "sweep", str(path), "--out", str(out)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    finally:
        signal.signal(signal.SIGINT, previous)
    run_dir = load_sweep(path).runs[0].directory(out)
    deadline = time.time() + 120
    while time.time() < deadline:
        if _latest(run_dir) >= 0 and (run_dir / ".lock").exists():
            text = (run_dir / ".lock").read_text().split()
            if text:
                return parent, int(text[0]), run_dir
        assert parent.poll() is None, parent.communicate()
        time.sleep(0.05)
    parent.kill()
    raise AssertionError("the worker never wrote a checkpoint")


def _wait_stopped(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline and _alive(pid):
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_the_sweep_stops_its_workers(tmp_path, sig):
    """SIGINT or SIGTERM to the sweep's parent (not to its group, as `kill PID` sends it) stops the workers,
    each after its step in flight with a checkpoint of that step (nothing to redo), and the parent relays their
    last lines and exits once they have: 130 after SIGINT, killed by SIGTERM after SIGTERM."""
    parent, worker, run_dir = _start_sweep(tmp_path)
    try:
        parent.send_signal(sig)
        # the parent waits for its worker, which stops after its current step (and may still be compiling it
        # on a loaded machine); a worker that ignored the Ctrl-C would go on to finish its run: ~200 s
        _, err = parent.communicate(timeout=120)
        assert _wait_stopped(worker, 10), f"worker {worker} still running after the parent got {sig!r}"
        assert parent.returncode == (130 if sig == signal.SIGINT else -signal.SIGTERM), (parent.returncode, err)
        assert _latest(run_dir) == _last_logged_step(run_dir), err
        assert "stopped early (asked to stop; checkpoint saved)" in err  # the worker's last line, relayed
    finally:
        if parent.poll() is None:
            parent.kill()
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_to_a_one_run_sweep_saves_its_last_step(tmp_path):
    """`scalinfer sweep --index I` (a scheduler's array task) preempted with SIGTERM: the run stops after its step
    in flight with a checkpoint of it, and the command exits 143 (128 + SIGTERM); the rerun goes on from there."""
    from scalinfer.sweep import load_sweep

    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP.format(total=512 * 4000))
    out = tmp_path / "out"
    run_dir = load_sweep(path).runs[0].directory(out)
    cmd = [sys.executable, "-m", "scalinfer.cli", "sweep", str(path), "--out", str(out), "--index", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(tmp_path / "stderr.log", "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not ((run_dir / "metrics.jsonl").exists() and _last_logged_step(run_dir) > 25):
            assert proc.poll() is None, (tmp_path / "stderr.log").read_text()[-2000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = (tmp_path / "stderr.log").read_text()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    stop = _last_logged_step(run_dir)
    assert _latest(run_dir) == stop > 25, stderr[-2000:]  # past the periodic checkpoint of step 20: the signal's
    assert "SIGTERM: stopping after the current step" in stderr and "stopped early (asked to stop" in stderr


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
def test_worker_of_a_killed_parent_stops_after_its_checkpoint(tmp_path):
    """kill -9 of the sweep's parent left its workers training; now each stops after its step in flight with a
    checkpoint of that step, claims no other run, and writes what it says to its log file."""
    parent, worker, run_dir = _start_sweep(tmp_path)
    try:
        parent.kill()
        parent.wait(timeout=10)
        # generous, as above: the worker may still be compiling on a loaded machine
        assert _wait_stopped(worker, 240), f"worker {worker} still running 240 s after its parent died"
        assert _latest(run_dir) == _last_logged_step(run_dir)  # a checkpoint of its last step: nothing to redo
        log = (run_dir.parent.parent / "logs" / "worker-0.log").read_text()
        assert "parent process is gone" in log
        runs = [d for d in (run_dir.parent).iterdir() if d.is_dir()]
        assert runs == [run_dir]  # no further run claimed
    finally:
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)
