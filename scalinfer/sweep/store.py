"""Sweeps: many trainer configurations from one TOML file, run by parallel workers, merged into one table.

A sweep file names a base configuration and the runs, either one by one (``[[run]]``) or as the cartesian
product of a few axes (``[[grid]]``)::

    [sweep]
    name = "calibration"
    preset = "cal-xs"              # optional: the defaults every run starts from (`scalinfer.train.PRESETS`)

    [base]                         # TrainConfig fields shared by every run (as in a `scalinfer train` file)
    total_tokens = 327_680
    decay_points = [32_768, 65_536, 131_072]
    [base.optimizer]
    decay = 0.2

    [[grid]]                       # one run per combination of the axes' values
    name = "moe-d32l2"             # run names: moe-d32l2-lr0.01-b1024 ...
    model = {d_model = 32, n_layers = 2, n_heads = 2, d_ff = 32}
    [grid.axes]
    "optimizer.lr" = [0.003, 0.01, 0.03]
    batch_tokens = [1024, 2048]

    [[run]]                        # a single run: TrainConfig fields, ``name`` required
    name = "dense-d48l2"
    model = {d_model = 48, n_experts = 1, top_k = 1, d_ff = 96, capacity_factor = "none"}

Values resolve preset -> ``[base]`` -> the grid's or run's own fields -> the axis values. Every run gets a
unique name; its run id is the trainer's (`scalinfer.train.loop.run_id_of`: the name plus a hash of the
configuration), so an edited configuration is a new run, never a silent mix of two.

Output folder::

    DIR/sweep.toml                 the sweep file last run here
    DIR/runs/<run_id>/             the trainer's out_dir of one run (config.json, metrics, checkpoints,
                                   runs.jsonl: that run's own records) plus sweep_run.json (its wall time,
                                   host, worker, status) once it has finished
    DIR/runs.jsonl                 the merged run table (rewritten atomically after every finished run;
                                   a failed write, e.g. on a full disk, leaves the previous one intact)
    DIR/manifest.json              sweep name, code commit, machine, and per run: config, seed, status,
                                   records and wall time

Workers are separate processes (each a fresh JAX process, ``python -m scalinfer.train.sweep``) that walk
the sweep in order and claim a run by taking an exclusive ``flock`` on ``runs/<run_id>/.lock``. The lock
dies with its process, so a killed worker leaves its run unclaimed and half done: a re-run skips finished
runs, resumes the interrupted one from its latest checkpoint (the trainer's exact resume) and adds no
duplicate record, because the merge keys every record by run id. The same claims make ``--only`` and
``--index`` safe to launch from any scheduler (one process per run, on many machines sharing ``DIR``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import fcntl
import hashlib
import itertools
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import traceback
from pathlib import Path
from typing import Any, Iterator, Sequence

from scalinfer._io import atomic_write_text
from scalinfer.errors import ScalinferError, TrainError
from scalinfer.train.config import TrainConfig, config_from_dict, config_to_dict, preset
from scalinfer.train.records import read_json, write_file

__all__ = [
    "SweepRun", "Sweep", "RunStatus", "SweepResult", "load_sweep", "parse_sweep", "expand_sweep",
    "run_sweep", "run_one", "worker_loop", "merge", "export", "run_status", "worker_main",
]

_RUNS = "runs"
_TABLE = "runs.jsonl"
_MANIFEST = "manifest.json"
_RUN_INFO = "sweep_run.json"
_ERROR = "error.txt"
_AXIS_LABELS = {"optimizer.lr": "lr", "batch_tokens": "b", "seed": "s", "total_tokens": "D"}


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One configuration of a sweep.

    Attributes
    ----------
    index : position in the sweep (0-based; what ``--index`` takes).
    name : the run's unique name (``TrainConfig.name``).
    run_id : the trainer's id of the main run (name plus configuration hash); its decay branches are
        ``<run_id>-<branch>``.
    config : the resolved trainer configuration.
    expected_ids : run ids of every record the run writes (main run first, then the decay branches).
    """

    index: int
    name: str
    run_id: str
    config: TrainConfig
    expected_ids: tuple[str, ...]

    def directory(self, out: str | os.PathLike) -> Path:
        """The run's own folder (the trainer's out_dir) in sweep folder ``out``."""
        return Path(out) / _RUNS / self.run_id


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A parsed sweep file: its name, source, text and runs in order."""

    name: str
    source: str
    text: str
    runs: tuple[SweepRun, ...]

    def find(self, key: str) -> SweepRun:
        """The run whose run id or name is ``key``."""
        for r in self.runs:
            if key in (r.run_id, r.name):
                return r
        raise TrainError(f"{self.source}: no run with id or name {key!r} "
                         f"(the sweep has {len(self.runs)} runs, e.g. {self.runs[0].name!r})")


# ---- parsing -----------------------------------------------------------------------------------------------
def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    node: dict[str, Any] = {}
    root = node
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return root


def _label(key: str, value: Any) -> str:
    short = _AXIS_LABELS.get(key, key.rsplit(".", 1)[-1] + "=")
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return short + text


def _none_strings(d: Any) -> Any:
    """TOML has no null: the string "none" stands for None (``capacity_factor = "none"``)."""
    if isinstance(d, dict):
        return {k: _none_strings(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_none_strings(v) for v in d]
    return None if isinstance(d, str) and d.lower() in ("none", "null") else d


def parse_sweep(data: dict[str, Any], source: str = "<sweep>", text: str = "") -> Sweep:
    """Build a `Sweep` from the dict of a sweep file (see the module docstring).

    Raises
    ------
    TrainError : one line naming the file, the entry (``grid[i]`` / ``run[i]``) and the key at fault.
    """
    from scalinfer.train.loop import make_plan, run_id_of

    unknown = sorted(set(data) - {"sweep", "base", "grid", "run"})
    if unknown:
        raise TrainError(f"{source}: unknown top-level table(s) {', '.join(map(repr, unknown))} "
                         f"(a sweep file has [sweep], [base], [[grid]] and [[run]])")
    head = data.get("sweep", {})
    if not isinstance(head, dict):
        raise TrainError(f"{source}: [sweep] must be a table")
    extra = sorted(set(head) - {"name", "preset", "description"})
    if extra:
        raise TrainError(f"{source}: [sweep] has unknown key(s) {', '.join(map(repr, extra))} "
                         f"(known: name, preset, description)")
    start = preset(head["preset"]) if "preset" in head else TrainConfig()
    base = _none_strings(data.get("base", {}))
    if not isinstance(base, dict):
        raise TrainError(f"{source}: [base] must be a table of TrainConfig fields")

    entries: list[tuple[str, dict[str, Any]]] = []
    for kind in ("grid", "run"):
        items = data.get(kind, [])
        if not isinstance(items, list):
            raise TrainError(f"{source}: {kind} must be an array of tables ([[{kind}]])")
        for i, item in enumerate(items):
            where = f"{source}: {kind}[{i}]"
            if not isinstance(item, dict):
                raise TrainError(f"{where} must be a table")
            item = _none_strings(item)
            if "name" not in item or not isinstance(item["name"], str) or not item["name"]:
                raise TrainError(f"{where} needs a name (a non-empty string)")
            where = f"{where} ({item['name']})"
            fields = {k: v for k, v in item.items() if k != "axes"}
            axes = item.get("axes", {})
            if kind == "run" and "axes" in item:
                raise TrainError(f"{where}: a [[run]] has no axes (use [[grid]])")
            if not isinstance(axes, dict):
                raise TrainError(f"{where}: axes must be a table of dotted key = [values]")
            for key, values in axes.items():
                if not isinstance(values, list) or not values:
                    raise TrainError(f"{where}: axes.{key} must be a non-empty list of values")
            keys = list(axes)
            for combo in itertools.product(*(axes[k] for k in keys)):
                patch = dict(fields)
                for k, v in zip(keys, combo):
                    patch = _merge(patch, _nest(k, v))
                patch["name"] = "-".join([item["name"], *(_label(k, v) for k, v in zip(keys, combo))])
                entries.append((where, patch))
    if not entries:
        raise TrainError(f"{source}: the sweep has no runs (add [[grid]] or [[run]] tables)")

    runs, seen = [], {}
    for index, (where, patch) in enumerate(entries):
        cfg = config_from_dict(_merge(base, patch), start, where=where)
        if cfg.name in seen:
            raise TrainError(f"{where}: run name {cfg.name!r} is used twice (also in {seen[cfg.name]})")
        seen[cfg.name] = where
        plan = make_plan(cfg)
        rid = run_id_of(cfg)
        runs.append(SweepRun(index, cfg.name, rid, cfg, (rid, *(f"{rid}-{b.name}" for b in plan.branches))))
    return Sweep(str(head.get("name", Path(source).stem)), source, text, tuple(runs))


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read and parse a sweep TOML file (`parse_sweep`)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise TrainError(f"sweep file {path} does not exist") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TrainError(f"sweep file {path} is not valid TOML: {e}") from None
    return parse_sweep(data, str(path), text)


def expand_sweep(path: str | os.PathLike) -> list[TrainConfig]:
    """The resolved configurations of a sweep file, in order."""
    return [r.config for r in load_sweep(path).runs]


# ---- state of a run ----------------------------------------------------------------------------------------
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


@contextlib.contextmanager
def _claim(directory: Path) -> Iterator[bool]:
    """Try to take the run's lock without waiting; yields whether this process holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    fh = open(directory / ".lock", "a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        fh.truncate(0)  # who holds it, for people (the lock itself is the flock, released at exit)
        fh.write(f"{os.getpid()} {platform.node()} {_now()}\n")
        fh.flush()
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    finally:
        fh.close()


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


def run_one(run: SweepRun, out: str | os.PathLike, delete_checkpoints: bool = False,
            log=sys.stderr, skip_failed_since: float | None = None) -> str:
    """Run (or resume) one configuration of a sweep in this process, if no other process holds it.

    Returns ``done`` (finished now or before), ``busy`` (another process holds its claim), ``failed``
    (the trainer raised: the message goes to ``runs/<run_id>/error.txt`` and the run stays resumable)
    or ``stopped`` (``stop_after_steps`` ended it early, with a checkpoint). Diverged runs are
    ``done``: the trainer records them as censored observations. With ``skip_failed_since`` (a
    ``time.time()``), a run that already failed after that moment is not tried again (``failed``): the
    workers of one sweep invocation try a failing run once, the next invocation retries it.
    """
    from scalinfer.train.loop import train

    d = run.directory(out)
    if run_status(run, out).state == "done":
        _recover_run_info(run, d)
        return "done"
    err = d / _ERROR
    if skip_failed_since is not None and err.exists() and err.stat().st_mtime >= skip_failed_since:
        return "failed"
    with _claim(d) as held:
        if not held:
            return "busy"
        if run_status(run, out).state == "done":  # finished by another process while we waited
            return "done"
        (d / _ERROR).unlink(missing_ok=True)
        started, t0 = _now(), time.perf_counter()
        print(f"[sweep] {run.index}: {run.name} ({run.run_id}) started", file=log, flush=True)
        try:
            records = train(run.config, d)
        except Exception as e:  # noqa: BLE001 - recorded, reported, and resumable
            msg = f"{type(e).__name__}: {e}".splitlines()[0]
            write_file(d / _ERROR, msg + "\n\n" + traceback.format_exc(), "the error report",
                       f"the run failed with {msg}")
            print(f"[sweep] {run.index}: {run.name} failed: {msg}", file=log, flush=True)
            return "failed"
        wall = time.perf_counter() - t0
        if not records:
            print(f"[sweep] {run.index}: {run.name} stopped early (stop_after_steps); resumable",
                  file=log, flush=True)
            return "stopped"
        info_path = d / _RUN_INFO
        previous = read_json(info_path, "the sweep's record of the run's earlier attempts",
                             f"the run finished and its records are in {d / _TABLE}; delete the file and the next "
                             f"`scalinfer sweep` of this file writes a recovered one") if info_path.exists() else {}
        # a resumed run adds this attempt to the earlier ones (a recovered file's unknowns count as none)
        info = _run_info(run, records, started=previous.get("started") or started, finished=_now(),
                         wall_s=round((previous.get("wall_s") or 0.0) + wall, 3),
                         attempts=(previous.get("attempts") or 0) + 1, host=platform.node(), pid=os.getpid())
        write_file(info_path, json.dumps(info, indent=2) + "\n", "the sweep's record of the run",
                   f"the run finished and its records are in {d / _TABLE} (merged with the others), but this "
                   f"attempt's wall time and host are not recorded; the next `scalinfer sweep` of this file "
                   f"writes a recovered one (until then `export` leaves the run out): fix the cause (a full "
                   f"disk?)")
        if delete_checkpoints:
            for sub in ("checkpoints", "stable"):
                shutil.rmtree(d / sub, ignore_errors=True)
        losses = ", ".join("diverged" if r.get("diverged") else f"{r['loss']:.4f}" for r in records)
        print(f"[sweep] {run.index}: {run.name} done in {wall:.1f} s (loss {losses})", file=log, flush=True)
    return "done"


# ---- merging -------------------------------------------------------------------------------------------------
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


def export(out: str | os.PathLike, dest: str | os.PathLike) -> list[str]:
    """Copy a sweep's results without its checkpoints: ``runs.jsonl``, ``manifest.json``, ``sweep.toml`` and,
    for every run folder, its config, records, metrics and ``sweep_run.json`` (finished runs only; unfinished
    ones appear in the merged table with the records they have). Returns the run ids copied.

    Files are copied atomically, so a copy taken while the sweep runs is a consistent snapshot per file.
    """
    out, dest = Path(out), Path(dest)
    merge(out)
    copied = []
    for name in (_TABLE, _MANIFEST, "sweep.toml"):
        if (out / name).exists():
            write_file(dest / name, (out / name).read_text(), "the exported copy", _incomplete(dest))
    runs_dir = out / _RUNS
    for d in sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []:
        if not (d / _RUN_INFO).exists():
            continue
        for f in sorted(d.iterdir()):
            if f.is_file() and (f.name in _EXPORTED or (f.name.startswith("metrics") and f.suffix == ".jsonl")):
                target = dest / _RUNS / d.name / f.name
                if not target.exists() or target.read_bytes() != f.read_bytes():
                    write_file(target, f.read_text(), "the exported copy", _incomplete(dest))
        copied.append(d.name)
    return copied


def _incomplete(dest: Path) -> str:
    return f"the export to {dest} is incomplete: fix the cause (a full disk?) and export again"


# ---- running ---------------------------------------------------------------------------------------------
def worker_loop(sweep: Sweep, out: str | os.PathLike, runs: Sequence[SweepRun] | None = None,
                delete_checkpoints: bool = False, log=sys.stderr, since: float | None = None) -> dict[str, str]:
    """Claim and run the sweep's unfinished runs one after another (in this process); merge after each.

    Returns run name -> outcome (see `run_one`) for every run this worker touched or found busy.
    """
    outcomes: dict[str, str] = {}
    for run in runs if runs is not None else sweep.runs:
        outcome = run_one(run, out, delete_checkpoints, log, skip_failed_since=since)
        outcomes[run.name] = outcome
        if outcome in ("done", "failed", "stopped"):
            merge(out, sweep)
    return outcomes


def _install_sweep_file(sweep: Sweep, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    target = out / "sweep.toml"
    if sweep.text and (not target.exists() or target.read_text() != sweep.text):
        write_file(target, sweep.text, "the sweep file's copy", "nothing was run: fix the cause (a full disk? a "
                   "read-only folder?) and rerun")


def run_sweep(path: str | os.PathLike, out: str | os.PathLike, workers: int = 1, only: str | None = None,
              index: int | None = None, delete_checkpoints: bool = False, log=sys.stderr) -> SweepResult:
    """Run a sweep file into folder ``out`` (see the module docstring) and merge the results.

    Parameters
    ----------
    path : the sweep TOML file.
    out : the sweep folder (created; reused to resume).
    workers : parallel worker processes, each a fresh JAX process claiming runs in order.
    only : run just the run with this run id or name, in this process (for schedulers).
    index : run just the run at this 0-based position, in this process (e.g. ``$SLURM_ARRAY_TASK_ID``).
    delete_checkpoints : remove a run's checkpoints once all its records are written.

    Returns
    -------
    SweepResult : the merged table, each run's state, and workers that died.
    """
    sweep = load_sweep(path)
    out = Path(out)
    if workers < 1:
        raise TrainError(f"--workers must be >= 1 (got {workers})")
    if only is not None and index is not None:
        raise TrainError("give either --only or --index, not both")
    _install_sweep_file(sweep, out)
    if only is not None or index is not None:
        if index is not None and not 0 <= index < len(sweep.runs):
            raise TrainError(f"--index {index} is outside the sweep's runs 0..{len(sweep.runs) - 1}")
        run = sweep.find(only) if only is not None else sweep.runs[index]
        outcome = run_one(run, out, delete_checkpoints, log)
        if outcome == "busy":
            raise TrainError(f"run {run.name} ({run.run_id}) is being run by another process (its lock "
                             f"{run.directory(out) / '.lock'} is held)")
        return merge(out, sweep)

    pending = [r for r in sweep.runs if run_status(r, out).state != "done"]
    failures: list[str] = []
    if pending:
        n = min(workers, len(pending))
        cmd = [sys.executable, "-m", "scalinfer.train.sweep", "--sweep", str(out / "sweep.toml"),
               "--out", str(out), "--since", repr(time.time())]
        cmd += ["--delete-checkpoints"] if delete_checkpoints else []
        print(f"[sweep] {sweep.name}: {len(pending)} of {len(sweep.runs)} runs to do, {n} worker(s)",
              file=log, flush=True)
        procs = [subprocess.Popen(cmd + ["--worker-id", str(k)], stderr=subprocess.PIPE, text=True, bufsize=1)
                 for k in range(n)]
        try:
            _relay(procs, out / "logs", log)
        except KeyboardInterrupt:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for p in procs:
                p.wait()
            raise
        for k, p in enumerate(procs):
            if p.returncode < 0:
                failures.append(f"worker {k} (pid {p.pid}) was killed by signal {-p.returncode}")
            elif p.returncode not in (0, 3):
                failures.append(f"worker {k} (pid {p.pid}) exited with code {p.returncode}")
    res = merge(out, sweep)
    return dataclasses.replace(res, worker_failures=tuple(failures))


def _relay(procs: list[subprocess.Popen], log_dir: Path, log) -> None:
    """Append each worker's stderr to ``log_dir/worker-K.log`` and copy its ``[sweep]`` lines to ``log``,
    until every worker exits."""
    import selectors

    log_dir.mkdir(parents=True, exist_ok=True)
    files = [open(log_dir / f"worker-{k}.log", "a") for k in range(len(procs))]
    sel = selectors.DefaultSelector()
    for k, p in enumerate(procs):
        sel.register(p.stderr, selectors.EVENT_READ, k)
    open_streams = len(procs)
    try:
        while open_streams:
            for key, _ in sel.select():
                line = key.fileobj.readline()
                if not line:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                files[key.data].write(line)
                files[key.data].flush()
                if line.startswith("[sweep]"):
                    print(f"[w{key.data}] {line}", end="", file=log, flush=True)
    finally:
        for f in files:
            f.close()
        for p in procs:
            p.wait()


def worker_main(argv: Sequence[str] | None = None) -> int:
    """``python -m scalinfer.train.sweep --sweep FILE --out DIR [--worker-id K] [--delete-checkpoints]``:
    one worker process. Exit code 0 when every run it touched is done, 3 when some failed or were busy."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m scalinfer.train.sweep")
    p.add_argument("--sweep", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--worker-id", type=int, default=0)
    p.add_argument("--delete-checkpoints", action="store_true")
    p.add_argument("--since", type=float, default=None, help="do not retry runs that failed after this time")
    args = p.parse_args(argv)
    try:
        sweep = load_sweep(args.sweep)
        outcomes = worker_loop(sweep, args.out, delete_checkpoints=args.delete_checkpoints, since=args.since)
    except ScalinferError as e:
        print(f"[sweep] worker {args.worker_id}: error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0 if all(v == "done" or v == "busy" for v in outcomes.values()) else 3


if __name__ == "__main__":
    sys.exit(worker_main())
