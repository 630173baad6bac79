"""Reliability (issue #9): damaged checkpoints and full disks never cost more than the damaged part.

- A truncated, overwritten or missing file in the latest trainer checkpoint: the resume warns, falls back
  to the checkpoint before, and the run finishes with its records; when no checkpoint can be read, a
  one-line `TrainError` says what to do. A damaged stable-phase checkpoint that a decay branch forks from: a
  one-line `TrainError` naming it and saying how to recover (the folder is left as it was). A restore that
  fails for another reason (out of memory, a bug) is raised as it is, never taken for damage.
- ENOSPC while writing a run record (the trainer's table, ``append_records``, the sweep's merged table):
  a `TrainError` naming the file, the previous table byte for byte as it was, no temporary file left. The same
  for the run's ``config.json``, the metrics log and a sweep run's ``sweep_run.json``. ENOSPC while orbax saves
  a checkpoint: a one-line `TrainError` naming the step's folder and the step a rerun resumes from.
- A damaged ``config.json`` on resume, or ``sweep_run.json`` at export: a one-line `TrainError` naming the file
  and saying what to do, nothing changed.

One tiny training run (20 steps of 2048 tokens, checkpoints every 5 steps, stopped after 10) is shared by
the checkpoint tests; each test damages its own copy and resumes it.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from scalinfer import _io
from scalinfer.errors import TrainError
from scalinfer.train import apply_overrides, preset, train
from scalinfer.train.checkpoint import FILE_LIST, Checkpointer, CheckpointWarning
from scalinfer.train.records import MetricsLog, append_records, read_records
from scalinfer.sweep import merge, parse_sweep, run_one

OVERRIDES = ["name=rel", "total_tokens=40960", "batch_tokens=2048", "micro_batch_tokens=1024", "lr=1e-2",
             "warmup=0.1", "decay=0.2", "eval_every=0", "checkpoint_every=5", "keep_checkpoints=2",
             "eval_tokens=2048"]
STEPS = 20  # 40960 / 2048


def _config(*extra):
    return apply_overrides(preset("tiny"), [*OVERRIDES, *extra])


def _losses(path: Path) -> dict[int, list[float]]:
    """step -> the training losses logged for it (a step logged twice shows up twice)."""
    out: dict[int, list[float]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if "loss" in r and "eval_loss" not in r:
            out.setdefault(r["step"], []).append(r["loss"])
    return out


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A run stopped after 10 of its 20 steps: checkpoints at steps 5 and 10, metrics of steps 1-10."""
    out = tmp_path_factory.mktemp("interrupted")
    assert train(_config("stop_after_steps=10"), out) == []
    assert sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit()) == [5, 10]
    return out, _losses(out / "metrics.jsonl")


def _array_file(step_dir: Path) -> Path:
    """The largest array-data file of a checkpoint step (orbax/OCDBT chunk files under state/)."""
    files = [p for p in (step_dir / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    assert files, f"no array data files under {step_dir}"
    return max(files, key=lambda p: p.stat().st_size)


def _truncate(step_dir: Path) -> None:
    _array_file(step_dir).write_bytes(b"")


def _garbage(step_dir: Path) -> None:
    f = _array_file(step_dir)
    with open(f, "r+b") as fh:
        fh.write(np.random.default_rng(0).bytes(256))


def _delete(step_dir: Path) -> None:
    _array_file(step_dir).unlink()


@pytest.mark.parametrize("damage", [_truncate, _garbage, _delete], ids=["truncated", "garbage", "deleted"])
@pytest.mark.slow
def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(interrupted, tmp_path, damage):
    """Simulates a latest checkpoint (step 10) damaged after it was written: its largest array file
    truncated to 0 bytes, overwritten with garbage, or deleted. The resume must warn, restart from step 5,
    set the damaged step aside, and finish the run with its record."""
    src, before = interrupted
    out = tmp_path / "run"
    shutil.copytree(src, out)
    damage(out / "checkpoints" / "10")

    with pytest.warns(CheckpointWarning, match=r"checkpoint step 10 .* cannot be restored .*falling back to step 5"):
        records = train(_config(), out)

    assert len(records) == 1 and records[0]["steps"] == STEPS and records[0]["loss"] is not None
    assert read_records(out / "runs.jsonl") == records
    got = _losses(out / "metrics.jsonl")
    # resumed from step 5: steps 6-10 were redone (logged once: the stale lines were dropped), and the redone
    # steps follow the interrupted run's trajectory exactly (params, optimizer state and data position restored)
    assert sorted(got) == list(range(1, STEPS + 1)) and all(len(v) == 1 for v in got.values())
    np.testing.assert_allclose([got[s][0] for s in range(1, 11)], [before[s][0] for s in range(1, 11)],
                               rtol=1e-6, atol=0)
    ckpts = out / "checkpoints"
    assert (ckpts / "10.corrupt").is_dir()          # kept for inspection, out of orbax's way
    assert sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) == [15, 20]


def _crc32(path: Path) -> int:
    import zlib
    return zlib.crc32(path.read_bytes())


def test_every_saved_step_lists_its_files(interrupted, tmp_path):
    """Each checkpoint step lists every file orbax wrote with its size and CRC-32, and the lists still match
    after the run resumed (reading step 10) and finished, keeping every step (orbax changes no file of a saved
    step afterwards; a list gone stale would make a healthy checkpoint look damaged)."""
    src, _ = interrupted
    out = tmp_path / "run"
    shutil.copytree(src, out)
    train(_config("keep_checkpoints=4"), out)
    steps = [p for p in (out / "checkpoints").iterdir() if p.name.isdigit()]
    assert sorted(int(p.name) for p in steps) == [5, 10, 15, 20]
    for step_dir in steps:
        listed = json.loads((step_dir / FILE_LIST).read_text())
        files = {p.relative_to(step_dir).as_posix(): p for p in step_dir.rglob("*")
                 if p.is_file() and p.name != FILE_LIST}
        assert sorted(listed) == sorted(files) and any(name.startswith("state/") for name in listed)
        assert all(listed[name] == [p.stat().st_size, _crc32(p)] for name, p in files.items())


def _bad_list(step_dir: Path) -> None:
    (step_dir / FILE_LIST).write_text('{"state/_METADATA": 3}')


@pytest.mark.parametrize("damage", [_truncate, _garbage, _delete, _bad_list],
                         ids=["truncated", "garbage", "deleted", "bad-list"])
def test_the_file_list_names_the_damaged_file(tmp_path, damage):
    """A damaged step is found by its file list before orbax reads it: the warning names the file and what
    is wrong with it."""
    ckpt = Checkpointer(tmp_path, keep=None)
    state = {"w": np.arange(4096, dtype=np.float32)}
    for step in (1, 2):
        ckpt.save(step, state, {"step": step})
    name = (FILE_LIST if damage is _bad_list else
            _array_file(tmp_path / "2").relative_to(tmp_path / "2").as_posix())
    damage(tmp_path / "2")
    why = {"_truncate": "has 0 bytes", "_garbage": "was changed after it was saved", "_delete": "is missing",
           "_bad_list": "cannot be read"}
    with pytest.warns(CheckpointWarning, match=rf"step 2: DamagedFile: {name} {why[damage.__name__]}"):
        restored, meta = ckpt.restore_latest(state)
    assert meta == {"step": 1}
    np.testing.assert_array_equal(restored["w"], state["w"])
    ckpt.close()


def test_a_step_without_a_file_list_is_checked_by_orbax(tmp_path):
    """A step saved without the file list (by an earlier version) restores, and damage to it is still found,
    by orbax's own checksums."""
    ckpt = Checkpointer(tmp_path, keep=None)
    state = {"w": np.arange(4096, dtype=np.float32)}
    for step in (1, 2, 3):
        ckpt.save(step, state, {"step": step})
    for step in (2, 3):
        (tmp_path / str(step) / FILE_LIST).unlink()
    _garbage(tmp_path / "3")
    with pytest.warns(CheckpointWarning, match=r"step 3: ValueError: .*falling back to step 2"):
        restored, meta = ckpt.restore_latest(state)
    assert meta == {"step": 2}
    np.testing.assert_array_equal(restored["w"], state["w"])
    ckpt.close()


@pytest.mark.slow
def test_resuming_past_a_damaged_checkpoint_prints_the_warning_alone(interrupted, tmp_path):
    """The command a user runs, on a run whose latest checkpoint was truncated: stderr holds the one-line
    warning and nothing else (orbax, left to find the damage itself, printed ~1,000 lines of tracebacks of its
    abandoned reads around it)."""
    import subprocess
    import sys

    src, _ = interrupted
    out = tmp_path / "run"
    shutil.copytree(src, out)
    _truncate(out / "checkpoints" / "10")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-m", "scalinfer.cli", "train", "--preset", "tiny", *OVERRIDES,
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    warning = [line for line in done.stderr.splitlines() if "CheckpointWarning" in line]
    assert len(warning) == 1 and "falling back to step 5" in warning[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[:2000]
    assert len(done.stderr.splitlines()) <= 3, done.stderr[:2000]  # the warning, its source line, nothing more


def test_no_restorable_checkpoint_is_a_train_error(interrupted, tmp_path):
    """Simulates every checkpoint damaged (step 10 truncated, step 5's array file deleted): the resume must
    stop with a one-line TrainError that names the folder and says what to do, and move nothing."""
    src, _ = interrupted
    out = tmp_path / "run"
    shutil.copytree(src, out)
    _truncate(out / "checkpoints" / "10")
    _delete(out / "checkpoints" / "5")

    with pytest.raises(TrainError) as info:
        train(_config(), out)
    msg = str(info.value)
    assert "\n" not in msg
    assert f"no checkpoint in {out / 'checkpoints'} can be restored" in msg
    assert "step 10:" in msg and "step 5 too" in msg and "restart the run from step 0" in msg
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["10", "5"]
    assert not (out / "runs.jsonl").exists()


@pytest.fixture(scope="module")
def forked(tmp_path_factory):
    """A run with one decay branch, stopped after 15 of its 20 steps: past the branch's fork step, whose
    stable-phase checkpoint is in ``stable/``."""
    out = tmp_path_factory.mktemp("forked")
    assert train(_config("decay_points=[0.5]", "stop_after_steps=15"), out) == []
    forks = [p for p in (out / "stable").iterdir() if p.name.isdigit()]
    assert len(forks) == 1
    return out, forks[0].name


@pytest.mark.parametrize("damage", [_truncate, _delete], ids=["truncated", "deleted"])
def test_damaged_fork_checkpoint_is_a_train_error(forked, tmp_path, damage):
    """Simulates the stable-phase checkpoint of a decay branch damaged after it was written (its largest array
    file truncated to 0 bytes, or deleted). The resume finishes the main run, then must stop with a one-line
    TrainError that names the damaged step folder and says how to recover (not orbax's or tensorstore's own
    exception); it writes no record for the branch and leaves the damaged folder where it was."""
    src, step = forked
    out = tmp_path / "run"
    shutil.copytree(src, out)
    damage(out / "stable" / step)
    before = sorted(p.name for p in (out / "stable").iterdir())

    with pytest.raises(TrainError) as info:
        train(_config("decay_points=[0.5]"), out)
    msg = str(info.value)
    assert "\n" not in msg
    assert f"{out / 'stable' / step}" in msg and "cannot be restored" in msg
    assert f"remove {out}" in msg and "rerun" in msg
    assert [r["diverged"] for r in read_records(out / "runs.jsonl")] == [False]  # the main run only
    assert sorted(p.name for p in (out / "stable").iterdir()) == before


@pytest.mark.parametrize("latest", [True, False], ids=["restore_latest", "restore"])
def test_restore_errors_that_are_not_damage_propagate(tmp_path, monkeypatch, latest):
    """A restore that fails for a reason other than damaged files (here an out-of-memory error raised while
    reading the newest step) must propagate as it is: not become a TrainError, not fall back to an older
    step, and not move the (healthy) newest step aside as damaged."""
    ckpt = Checkpointer(tmp_path, keep=None)
    state = {"w": np.arange(8, dtype=np.float32)}
    for step in (1, 2):
        ckpt.save(step, state, {"step": step})
    real = ckpt._manager.restore

    def restore(step, *args, **kwargs):
        if step == 2:
            raise RuntimeError("RESOURCE_EXHAUSTED: out of memory while restoring")
        return real(step, *args, **kwargs)

    monkeypatch.setattr(ckpt._manager, "restore", restore)
    with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):
        ckpt.restore_latest(state) if latest else ckpt.restore(2, state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2"]
    ckpt.close()


def test_damaged_checkpoint_restore_names_the_step(tmp_path):
    """`Checkpointer.restore` of a step with a truncated array file: a one-line TrainError naming the step's
    folder and the reason."""
    ckpt = Checkpointer(tmp_path, keep=None)
    state = {"w": np.arange(1024, dtype=np.float32)}
    ckpt.save(3, state, {"step": 3})
    _truncate(tmp_path / "3")
    with pytest.raises(TrainError) as info:
        ckpt.restore(3, state)
    msg = str(info.value)
    assert "\n" not in msg and f"checkpoint {tmp_path / '3'} cannot be restored" in msg and "delete" in msg
    ckpt.close()


# ---- full disk -----------------------------------------------------------------------------------------------


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _half_write_then_enospc(monkeypatch, name: str) -> list[Path]:
    """Make the atomic writer of file ``name`` write half of the text into its temporary file, then fail with
    ENOSPC (as a full disk does). Returns the temporary files it wrote into (to check they existed)."""
    real = _io.atomic_write_with
    seen: list[Path] = []

    def write_with(path, write):
        if Path(path).name != name:
            return real(path, write)

        def half(tmp):
            write(tmp)                                  # the real write, then cut it as a full disk would
            data = Path(tmp).read_bytes()
            Path(tmp).write_bytes(data[:len(data) // 2])
            seen.append(Path(tmp))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, half)

    monkeypatch.setattr(_io, "atomic_write_with", write_with)
    return seen


def _folder(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_full_disk_appending_records_keeps_the_previous_table(tmp_path, monkeypatch, where):
    """Simulates ENOSPC while `append_records` rewrites the run table: half the new file written then
    ENOSPC, or ENOSPC from fsync. The error must be a TrainError naming the table; the table must be byte
    for byte as before and no temporary file may be left; once space is back, the append works."""
    table = tmp_path / "runs.jsonl"
    append_records(table, [{"run_id": "a", "loss": 3.0}, {"run_id": "b", "loss": float("nan")}])
    before = _folder(tmp_path)
    if where == "write":
        tmps = _half_write_then_enospc(monkeypatch, table.name)
    else:
        monkeypatch.setattr(_io.os, "fsync", _enospc)

    with pytest.raises(TrainError) as info:
        append_records(table, [{"run_id": "c", "loss": 2.5}])
    msg = str(info.value)
    assert str(table) in msg and "No space left on device" in msg and "unchanged (2 records)" in msg
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    if where == "write":
        assert len(tmps) == 1 and tmps[0].parent == tmp_path   # the temp file was real, in the same folder...
    assert _folder(tmp_path) == before                          # ...and is gone; the table is untouched

    monkeypatch.undo()
    assert [r["run_id"] for r in append_records(table, [{"run_id": "c", "loss": 2.5}])] == ["c"]
    assert [r["run_id"] for r in read_records(table)] == ["a", "b", "c"]


@pytest.mark.slow
def test_full_disk_writing_the_trainers_record_keeps_the_table_and_a_rerun_adds_it(interrupted, tmp_path,
                                                                                 monkeypatch):
    """Simulates ENOSPC when the trainer appends its record at the end of a run (half the new run table
    written, then ENOSPC). train() must raise a TrainError naming the table, leave the table (which holds an
    earlier record) byte for byte unchanged with no temp file; rerunning the same command adds the record
    without training again."""
    src, _ = interrupted
    out = tmp_path / "run"
    shutil.copytree(src, out)
    table = out / "runs.jsonl"
    append_records(table, [{"run_id": "earlier", "loss": 3.0}])
    before = table.read_bytes()
    _half_write_then_enospc(monkeypatch, table.name)

    with pytest.raises(TrainError, match=rf"cannot write the run table {table} \(No space left on device\)"):
        train(_config(), out)
    assert table.read_bytes() == before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

    monkeypatch.undo()
    records = train(_config(), out)                    # resumes from the final checkpoint: nothing to train
    assert records[0]["steps"] == STEPS
    assert [r["run_id"] for r in read_records(table)] == ["earlier", records[0]["run_id"]]
    assert sorted(_losses(out / "metrics.jsonl")) == list(range(1, STEPS + 1))


def test_full_disk_writing_the_sweeps_merged_table_keeps_it(tmp_path, monkeypatch):
    """Simulates ENOSPC while `merge` rewrites a sweep's merged run table (half written, then ENOSPC): a
    TrainError naming the table and saying how to redo the merge; the merged table and manifest byte for
    byte as before, no temporary file; a later merge picks the new record up."""
    out = tmp_path / "sweep"
    append_records(out / "runs" / "r1" / "runs.jsonl", [{"run_id": "r1", "loss": 3.0}])
    assert merge(out).n_records == 1
    before = _folder(out)
    assert {"runs.jsonl", "manifest.json"} <= set(before)
    append_records(out / "runs" / "r2" / "runs.jsonl", [{"run_id": "r2", "loss": 2.9}])
    tmps = _half_write_then_enospc(monkeypatch, "runs.jsonl")   # merge only reads the runs' own tables

    with pytest.raises(TrainError) as info:
        merge(out)
    msg = str(info.value)
    assert str(out / "runs.jsonl") in msg and "No space left on device" in msg and "--merge" in msg
    assert len(tmps) == 1 and tmps[0].parent == out
    assert _folder(out) == before

    monkeypatch.undo()
    assert merge(out).n_records == 2
    assert [r["run_id"] for r in read_records(out / "runs.jsonl")] == ["r1", "r2"]


@pytest.mark.slow
def test_missing_fork_checkpoint_of_a_healthy_run_is_an_error_not_a_divergence(tmp_path):
    """A decay branch whose stable-phase checkpoint was deleted after the main run passed it: recording the
    branch as diverged would be a false (censored) observation, so the resume stops with a TrainError that
    names the checkpoint and says how to recover, and writes no record for the branch."""
    cfg = _config("decay_points=[0.5]", "stop_after_steps=15")
    assert train(cfg, tmp_path) == []
    forks = [p for p in (tmp_path / "stable").iterdir() if p.name.isdigit()]
    assert len(forks) == 1
    shutil.rmtree(forks[0])
    with pytest.raises(TrainError, match=r"stable-phase checkpoint at step \d+.*missing.*rerun"):
        train(_config("decay_points=[0.5]"), tmp_path)
    records = read_records(tmp_path / "runs.jsonl")
    assert [r["diverged"] for r in records] == [False]  # the main run only; no false record of the branch


@pytest.mark.parametrize("existing", [False, True], ids=["new", "resumed"])
def test_full_disk_writing_the_config_is_a_train_error(interrupted, tmp_path, monkeypatch, existing):
    """Simulates ENOSPC while train() writes the run's config.json (half written, then ENOSPC), in a new folder
    and in one holding an interrupted run: a TrainError naming the file and the OS reason; config.json absent
    or byte for byte as before, and no temporary file left."""
    out = tmp_path / "run"
    if existing:
        shutil.copytree(interrupted[0], out)
    else:
        out.mkdir()
    before = _folder(out)
    tmps = _half_write_then_enospc(monkeypatch, "config.json")

    with pytest.raises(TrainError) as info:
        train(_config(), out)
    msg = str(info.value)
    assert f"{out / 'config.json'}" in msg and "No space left on device" in msg and "\n" not in msg
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert len(tmps) == 1 and tmps[0].parent == out
    assert _folder(out) == before


def test_full_disk_saving_a_checkpoint_is_a_train_error(tmp_path, monkeypatch):
    """ENOSPC while orbax writes a checkpoint (raised, as orbax does, inside its own exception): a one-line
    TrainError naming the step's folder, the OS reason and the step a rerun resumes from; the earlier steps are
    kept. An error that is not the file system's (a bug) propagates as it is."""
    import orbax.checkpoint as ocp

    ckpt = Checkpointer(tmp_path, keep=None)
    state = {"w": np.arange(8, dtype=np.float32)}
    for step in (1, 2):
        ckpt.save(step, state, {"step": step})

    def full(self, *args, **kwargs):
        try:
            _enospc()
        except OSError as e:
            raise ValueError("failed to save the checkpoint") from e

    monkeypatch.setattr(ocp.CheckpointManager, "save", full)
    with pytest.raises(TrainError) as info:
        ckpt.save(3, state, {"step": 3})
    msg = str(info.value)
    assert f"checkpoint {tmp_path / '3'} could not be written" in msg and "No space left on device" in msg
    assert "resumes from step 2" in msg and "\n" not in msg
    assert ckpt.steps() == [1, 2]

    def bug(self, *args, **kwargs):
        raise TypeError("not a file-system error")

    monkeypatch.setattr(ocp.CheckpointManager, "save", bug)
    with pytest.raises(TypeError, match="not a file-system error"):
        ckpt.save(3, state, {"step": 3})
    ckpt.close()


def test_full_disk_writing_a_checkpoints_file_list_is_a_train_error(tmp_path, monkeypatch):
    """ENOSPC while a step's file list is written (orbax's save of the step itself complete): a one-line TrainError
    naming the step's folder and the OS reason, saying that a rerun resumes from that very step, no list or
    temporary file left; and the step restores (checked by orbax alone)."""
    ckpt = Checkpointer(tmp_path, keep=None)
    state = {"w": np.arange(8, dtype=np.float32)}
    ckpt.save(1, state, {"step": 1})
    with monkeypatch.context() as m:
        seen = _half_write_then_enospc(m, FILE_LIST)
        with pytest.raises(TrainError) as info:
            ckpt.save(2, state, {"step": 2})
    msg = str(info.value)
    assert f"checkpoint {tmp_path / '2'} was saved but its {FILE_LIST} could not be written" in msg
    assert "No space left on device" in msg and "a rerun resumes from step 2" in msg and "\n" not in msg
    assert seen and not any(p.exists() for p in seen) and not (tmp_path / "2" / FILE_LIST).exists()
    restored, meta = ckpt.restore_latest(state)
    assert meta == {"step": 2}
    np.testing.assert_array_equal(restored["w"], state["w"])
    ckpt.close()


def test_full_disk_appending_metrics_is_a_train_error(tmp_path, monkeypatch):
    """Simulates ENOSPC when the metrics log appends a line: a TrainError naming the log and the OS reason."""
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write({"step": 1, "loss": 3.0})

    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real, log._file = log._file, Full()
    with pytest.raises(TrainError) as info:
        log.write({"step": 2, "loss": 2.9})
    assert f"{tmp_path / 'metrics.jsonl'}" in str(info.value) and "No space left on device" in str(info.value)
    real.close()
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1]


def test_a_finished_run_without_its_sweep_info_is_recovered_and_exported(tmp_path, monkeypatch):
    """The disk fills as the sweep writes a finished run's sweep_run.json: the next sweep of the file finds the
    run done, writes a recovered sweep_run.json from its records, and `export` copies the run."""
    from scalinfer.sweep import export

    sweep = parse_sweep({"sweep": {"name": "s", "preset": "tiny"}, "run": [{"name": "r"}]}, "s.toml")
    run = sweep.runs[0]
    record = {"run_id": run.run_id, "loss": 3.0, "wall_time_s": 1.5}

    def fake_train(cfg, d, stop_requested=None):  # what train() leaves behind: the run's own table
        append_records(Path(d) / "runs.jsonl", [record])
        return [record]

    monkeypatch.setattr("scalinfer.train.loop.train", fake_train)
    with monkeypatch.context() as m:
        _half_write_then_enospc(m, "sweep_run.json")
        with pytest.raises(TrainError, match="writes a recovered one"):
            run_one(run, tmp_path, log=io.StringIO())
    info_path = run.directory(tmp_path) / "sweep_run.json"
    assert not info_path.exists()
    assert export(tmp_path, tmp_path / "before") == []  # not exported while the file is missing

    assert run_one(run, tmp_path, log=io.StringIO()) == "done"  # a later sweep: done, nothing trained again
    info = json.loads(info_path.read_text())
    assert info["run_id"] == run.run_id and info["recovered"] and info["wall_s"] is None
    assert info["train_wall_s"] == {run.run_id: 1.5}
    assert export(tmp_path, tmp_path / "after") == [run.directory(tmp_path).name]


def test_full_disk_writing_a_sweep_runs_info_is_a_train_error(tmp_path, monkeypatch):
    """Simulates ENOSPC while a sweep writes a finished run's sweep_run.json (the training itself stubbed): a
    TrainError naming the file and the OS reason, no file or temporary file left in the run's folder."""
    sweep = parse_sweep({"sweep": {"name": "s", "preset": "tiny"}, "run": [{"name": "r"}]}, "s.toml")
    run = sweep.runs[0]
    monkeypatch.setattr("scalinfer.train.loop.train",
                        lambda cfg, d, stop_requested=None: [{"run_id": run.run_id, "loss": 3.0}])
    _half_write_then_enospc(monkeypatch, "sweep_run.json")

    with pytest.raises(TrainError) as info:
        run_one(run, tmp_path, log=io.StringIO())
    path = run.directory(tmp_path) / "sweep_run.json"
    assert f"{path}" in str(info.value) and "No space left on device" in str(info.value)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp") or p.name == path.name]


def test_damaged_config_on_resume_is_a_train_error_naming_it(interrupted, tmp_path):
    """An interrupted run whose config.json was cut short (a crash of an older version, a bad edit): the
    resume is a one-line TrainError naming the file and where it stops parsing, and the folder is untouched."""
    out = tmp_path / "run"
    shutil.copytree(interrupted[0], out)
    cfg = out / "config.json"
    cfg.write_text(cfg.read_text()[:40])
    before = _folder(out)
    with pytest.raises(TrainError) as info:
        train(_config(), out)
    msg = str(info.value)
    assert f"{cfg} is damaged: not JSON (line" in msg and "nothing was trained" in msg and "\n" not in msg
    assert _folder(out) == before


def test_damaged_sweep_info_at_export_is_a_train_error_naming_it(tmp_path, monkeypatch):
    """A finished run's sweep_run.json is not JSON: `export` names the file and what to do, and writes nothing."""
    from scalinfer.sweep import export

    sweep = parse_sweep({"sweep": {"name": "s", "preset": "tiny"}, "run": [{"name": "r"}]}, "s.toml")
    run = sweep.runs[0]
    record = {"run_id": run.run_id, "loss": 3.0, "wall_time_s": 1.5}

    def fake_train(cfg, d, stop_requested=None):
        append_records(Path(d) / "runs.jsonl", [record])
        return [record]

    monkeypatch.setattr("scalinfer.train.loop.train", fake_train)
    assert run_one(run, tmp_path, log=io.StringIO()) == "done"
    info_path = run.directory(tmp_path) / "sweep_run.json"
    info_path.write_bytes(b"\xff\xfe{")
    with pytest.raises(TrainError, match="is damaged: not UTF-8") as info:
        export(tmp_path, tmp_path / "exported")
    assert f"{info_path}" in str(info.value) and "restore the file" in str(info.value)
    assert not (tmp_path / "exported").exists()
