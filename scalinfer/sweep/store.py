"""The sweep folder: run folders, each run's ``sweep_run.json``, and the merged run table and manifest.

Folder layout::

    DIR/runs/<run_id>/             the trainer's out_dir of one run (config.json, metrics, checkpoints,
                                   runs.jsonl: that run's own records) plus sweep_run.json (its wall time,
                                   host, worker, status) once it has finished
    DIR/runs.jsonl                 the merged run table (rewritten atomically after every finished run;
                                   a failed write, e.g. on a full disk, leaves the previous one intact)
    DIR/manifest.json              sweep name, code commit, machine, and per run: config, seed, status,
                                   records and wall time

`merge` keys every record by run id, so a run resumed after a killed worker adds no duplicate record;
`export` copies the results without the checkpoints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import fcntl
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Iterator

from scalinfer._io import atomic_write_text
from scalinfer.errors import TrainError
from scalinfer.sweep.spec import RUNS as _RUNS
from scalinfer.sweep.spec import Sweep, SweepRun, load_sweep
from scalinfer.train.config import config_to_dict
from scalinfer.train.records import read_json, write_file

__all__ = ["RunStatus", "SweepResult", "run_status", "merge", "export", "finished_runs", "write_summary"]

_TABLE = "runs.jsonl"
_MANIFEST = "manifest.json"
_RUN_INFO = "sweep_run.json"
_ERROR = "error.txt"


@dataclasses.dataclass(frozen=True)
class RunStatus:
    """Where one run of a sweep stands.

    Attributes
    ----------
    state : ``done`` (every expected record written), ``partial`` (started: some records or a
        checkpoint, not all records), ``failed`` (the last attempt raised; see ``error``),
        ``pending`` (not started).
    records : records found in the run's own table.
    missing : expected run ids not yet recorded.
    error : the first line of the last failure, if any.
    """

    state: str
    records: int
    missing: tuple[str, ...]
    error: str | None = None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    from scalinfer.train.records import read_records

    return read_records(path)


def run_status(run: SweepRun, out: str | os.PathLike) -> RunStatus:
    """The state of ``run`` in sweep folder ``out`` (reads its own run table)."""
    d = run.directory(out)
    recs = {r.get("run_id") for r in _read_jsonl(d / _TABLE)}
    missing = tuple(i for i in run.expected_ids if i not in recs)
    if not missing:
        return RunStatus("done", len(recs), ())
    err = d / _ERROR
    if err.exists():
        return RunStatus("failed", len(recs), missing, err.read_text().splitlines()[0])
    started = bool(recs) or (d / "checkpoints").exists() or (d / "config.json").exists()
    return RunStatus("partial" if started else "pending", len(recs), missing)


def _host() -> dict[str, Any]:
    return {"hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine()}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run_info(run: SweepRun, records: list[dict[str, Any]], **attempt: Any) -> dict[str, Any]:
    """The content of a finished run's ``sweep_run.json``: the run, its records' wall times and divergences,
    the code, and ``attempt`` (started, finished, wall_s, attempts, host, pid)."""
    return {"name": run.name, "run_id": run.run_id, "index": run.index, "seed": run.config.seed, **attempt,
            "train_wall_s": {r["run_id"]: r.get("wall_time_s") for r in records},
            "diverged": [r["run_id"] for r in records if r.get("diverged")], "code": _code_commit()}


def _recover_run_info(run: SweepRun, d: Path) -> None:
    """A finished run whose ``sweep_run.json`` was never written (a full disk, a worker killed between its
    last record and that file) gets one from its records, marked ``recovered``: without it `export` would
    leave the run out, and since the run is done no later sweep would write it. The attempt's wall time,
    start and host are unknown (None)."""
    if (d / _RUN_INFO).exists():
        return
    info = _run_info(run, _read_jsonl(d / _TABLE), started=None, finished=None, wall_s=None, attempts=None,
                     host=None, pid=None)
    info["recovered"] = f"written by a later sweep at {_now()}: the attempt that finished the run did not record it"
    write_file(d / _RUN_INFO, json.dumps(info, indent=2) + "\n", "the sweep's record of the run",
               f"the run is finished (its records are in {d / _TABLE}), but `export` leaves it out until this file "
               f"exists: fix the cause (a full disk?) and run the sweep again")



def _code_commit() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no",
                                "--", "scalinfer"], capture_output=True, text=True, timeout=10).stdout.strip()
        return {"commit": head, "scalinfer_modified": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "scalinfer_modified": None}


@contextlib.contextmanager
def _merge_lock(out: Path) -> Iterator[None]:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".merge.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What a sweep (or a merge) found.

    Attributes
    ----------
    table : path of the merged run table.
    n_records : records in it.
    status : run name -> `RunStatus` for the runs of the sweep file (empty when merging without one).
    extra : run folders found that the sweep file does not list (merged too, never dropped).
    worker_failures : workers that exited abnormally (e.g. ``worker 1 killed by signal 9``).
    """

    table: Path
    n_records: int
    status: dict[str, RunStatus]
    extra: tuple[str, ...] = ()
    worker_failures: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return all(s.state == "done" for s in self.status.values()) and not self.worker_failures

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.status.values():
            out[s.state] = out.get(s.state, 0) + 1
        return out


def merge(out: str | os.PathLike, sweep: Sweep | None = None) -> SweepResult:
    """Merge the records of every run folder in ``out/runs`` into ``out/runs.jsonl`` and write the manifest.

    Records are keyed by run id: a run id found in two folders with different contents is an error (two
    runs claiming one identity), never a silent choice. Records are ordered as the sweep lists the runs
    (folders the sweep does not list come after, by name). Both files are written atomically under a lock,
    so workers finishing at the same moment cannot lose each other's records.
    """
    out = Path(out)
    if sweep is None and (out / "sweep.toml").exists():
        sweep = load_sweep(out / "sweep.toml")
    runs_dir = out / _RUNS
    if not runs_dir.is_dir() and sweep is None:
        raise TrainError(f"{out}: not a sweep folder (no {_RUNS}/ and no sweep.toml)")
    with _merge_lock(out):
        folders = sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
        by_id = {p.name: p for p in folders}
        listed = [r.run_id for r in sweep.runs] if sweep else []
        order = listed + sorted(k for k in by_id if k not in set(listed))
        records: dict[str, dict[str, Any]] = {}
        where: dict[str, Path] = {}
        for rid in order:
            if rid not in by_id:
                continue
            table = by_id[rid] / _TABLE
            for rec in _read_jsonl(table):
                key = rec.get("run_id")
                if key is None:
                    raise TrainError(f"{table}: a record has no run_id")
                if key in records and records[key] != rec:
                    raise TrainError(f"run id {key} has different records in {where[key]} and {table}")
                records.setdefault(key, rec)
                where.setdefault(key, table)
        text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in records.values())
        _write_merged(out / _TABLE, text, out)

        status = {r.name: run_status(r, out) for r in sweep.runs} if sweep else {}
        extra = tuple(k for k in by_id if k not in set(listed)) if sweep else ()
        manifest = _manifest(out, sweep, status, by_id, len(records))
        _write_merged(out / _MANIFEST, json.dumps(manifest, indent=2, allow_nan=False) + "\n", out)
    return SweepResult(out / _TABLE, len(records), status, extra)


def _write_merged(path: Path, text: str, out: Path) -> None:
    """Write a merged file atomically; a failed write (a full disk...) is a `TrainError` naming the file,
    which is left as it was (the runs' own tables hold every record, so a later merge rebuilds it)."""
    try:
        atomic_write_text(path, text)
    except OSError as e:
        raise TrainError(f"cannot write {path} ({e.strerror or e}); it is unchanged and every record is still in "
                         f"the runs' own tables: fix the cause (a full disk?) and run "
                         f"`scalinfer sweep --merge {out}`") from e


def _manifest(out: Path, sweep: Sweep | None, status: dict[str, RunStatus], by_id: dict[str, Path],
              n_records: int) -> dict[str, Any]:
    import jax

    runs = []
    entries = [(r.run_id, r) for r in sweep.runs] if sweep else []
    entries += [(k, None) for k in by_id if k not in {e[0] for e in entries}]
    for rid, r in entries:
        d = out / _RUNS / rid
        hint = "nothing was exported: restore the file (or move the run's folder out of runs/ to export without it)"
        info = read_json(d / _RUN_INFO, "the sweep's record of the run", hint) if (d / _RUN_INFO).exists() else {}
        cfg = config_to_dict(r.config) if r else (read_json(d / "config.json", "the run's configuration", hint)
                                                   if (d / "config.json").exists() else None)
        st = status.get(r.name) if r else None
        runs.append({
            "name": r.name if r else (cfg or {}).get("name"), "run_id": rid, "in_sweep_file": r is not None,
            "state": st.state if st else ("done" if info else "unknown"),
            "records": list(r.expected_ids) if r else None, "seed": (cfg or {}).get("seed"),
            "wall_s": info.get("wall_s"), "train_wall_s": info.get("train_wall_s"),
            "attempts": info.get("attempts"), "started": info.get("started"), "finished": info.get("finished"),
            "host": info.get("host"), "code": info.get("code"), "error": st.error if st else None, "config": cfg,
        })
    sweep_text = sweep.text if sweep else ""
    return {
        "sweep": sweep.name if sweep else out.name,
        "sweep_file": Path(sweep.source).name if sweep else None,
        "sweep_sha256": hashlib.sha256(sweep_text.encode()).hexdigest() if sweep else None,
        "code_at_merge": _code_commit(), "machine": {**_host(), "jax": jax.__version__,
                                            "devices": [str(x) for x in jax.devices()]},
        "written": _now(), "n_records": n_records, "n_runs": len(runs),
        "wall_s_total": round(sum(x["wall_s"] or 0.0 for x in runs), 1),
        "table": _TABLE, "runs": runs,
    }


_EXPORTED = ("config.json", _TABLE, _RUN_INFO, _ERROR)
_LOGS = ("metrics", "diagnostics")  # metrics.jsonl, diagnostics.jsonl and their decay branches' -<branch> files


def export(out: str | os.PathLike, dest: str | os.PathLike) -> list[str]:
    """Copy a sweep's results without its checkpoints: ``runs.jsonl``, ``manifest.json``, ``sweep.toml`` and,
    for every run folder, its config, records, metrics, diagnostics and ``sweep_run.json`` (finished runs only;
    unfinished ones appear in the merged table with the records they have). Returns the run ids copied.

    Files are copied atomically, so a copy taken while the sweep runs is a consistent snapshot per file.
    """
    out, dest = Path(out), Path(dest)
    merge(out)
    copied = []
    _make_folder(dest)  # the export's own folder (its last level only) and, below, a folder per run
    for name in (_TABLE, _MANIFEST, "sweep.toml"):
        if (out / name).exists():
            write_file(dest / name, (out / name).read_text(), "the exported copy", _incomplete(dest))
    runs_dir = out / _RUNS
    for d in sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []:
        if not (d / _RUN_INFO).exists():
            continue
        for f in sorted(d.iterdir()):
            if f.is_file() and (f.name in _EXPORTED or (f.name.startswith(_LOGS) and f.suffix == ".jsonl")):
                target = dest / _RUNS / d.name / f.name
                if not target.exists() or target.read_bytes() != f.read_bytes():
                    _make_folder(dest / _RUNS, dest)
                    _make_folder(target.parent, dest)
                    write_file(target, f.read_text(), "the exported copy", _incomplete(dest))
        copied.append(d.name)
    return copied


def finished_runs(folder: str | os.PathLike) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The finished runs of a merged or exported sweep folder (``manifest.json`` and ``runs.jsonl``, as `export`
    writes them): ``(manifest entry, run-table record)`` for each run whose state is ``done`` and that has its
    record, in the manifest's order. The studies' summaries under ``data/`` read their runs through it."""
    folder = Path(folder)
    manifest = json.loads((folder / _MANIFEST).read_text())
    records = {r["run_id"]: r for r in _read_jsonl(folder / _TABLE)}
    return [(run, records[run["run_id"]]) for run in manifest["runs"]
            if run["state"] == "done" and run["run_id"] in records]


def write_summary(folder: str | os.PathLike, rows: list[dict[str, Any]], name: str = "summary.csv") -> Path:
    """Write a study's one-row-per-run table, ``folder/name`` (CSV, the columns of the first row, in order),
    atomically with the user's umask; an empty `rows` writes an empty file. Returns the path."""
    import csv
    import io

    path = Path(folder) / name
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    atomic_write_text(path, buf.getvalue())
    return path


def _make_folder(folder: Path, dest: Path | None = None) -> None:
    """Create `folder` (one level: its parent must exist), as a one-line TrainError when the OS refuses."""
    try:
        folder.mkdir(exist_ok=True)
    except OSError as e:
        raise TrainError(f"cannot create the export folder {folder} ({e.strerror or e}); "
                         f"{_incomplete(dest or folder)}") from e


def _incomplete(dest: Path) -> str:
    return f"the export to {dest} is incomplete: fix the cause (a full disk?) and export again"
