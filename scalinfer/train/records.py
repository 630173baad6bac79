"""The trainer's output files: run-table records and per-step metrics, written safely.

Run table (``runs.jsonl``): one JSON object per line in the canonical columns of
`scalinfer.runs.schema` (``run_id, N, N_total, N_active, D, loss, lr, batch_tokens, steps,
diverged, seed, group, arch, schedule, seq_len``) plus the configuration and wall time. ``N`` is
N_total (``scalinfer.load_runs(..., n_kind="active")`` picks N_active instead). A diverged run
has ``loss: null`` and ``diverged: true``. Appends take an exclusive lock and rewrite the file
through a temporary file and ``os.replace`` (`scalinfer._io.atomic_write_text`), so a crash, a full
disk or a concurrent writer (a sweep) can never leave a half-written or lost record: a failed write
raises a `TrainError` naming the file and leaves the previous table as it was.

Metrics (``metrics.jsonl``): one line per logged step; on resume the lines after the restored
step (and a torn last line from a killed process) are removed, again by atomic rewrite. A failed
append is a `TrainError` naming the log.

Other small files (a run's ``config.json``, a sweep's ``sweep_run.json``...) are read by `read_json` (a damaged
one is a `TrainError` naming it) and go through `write_file`:
atomic, and a failed write is a `TrainError` naming the file and the OS reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
from pathlib import Path
from typing import Any, Iterable

from scalinfer._io import atomic_write_text
from scalinfer.errors import TrainError

__all__ = ["append_records", "read_records", "atomic_write_text", "write_file", "MetricsLog"]


def write_file(path: Path, text: str, what: str, unchanged: str) -> Path:
    """`atomic_write_text`, with a failed write (a full disk, a read-only folder...) turned into a
    `TrainError` naming ``what``, the file and the OS reason, then ``unchanged`` (what became of it, what
    to do); the temporary file is gone and ``path`` is as it was."""
    try:
        return atomic_write_text(path, text)
    except OSError as e:
        raise TrainError(f"cannot write {what} {path} ({e.strerror or e}); {unchanged}") from e


def read_json(path: Path, what: str, hint: str) -> Any:
    """The JSON value in ``path``; a damaged file (not JSON, not UTF-8) or a failed read is a `TrainError`
    naming ``what``, the file and the reason, then ``hint`` (what to do)."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise TrainError(f"{what} {path} is damaged: not JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
                         f"{hint}") from None
    except UnicodeDecodeError as e:
        raise TrainError(f"{what} {path} is damaged: not UTF-8 text (byte {e.start}); {hint}") from None
    except OSError as e:
        raise TrainError(f"cannot read {what} {path} ({e.strerror or e}); {hint}") from e


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps({k: _json_value(v) for k, v in record.items()}, allow_nan=False)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a run table (every line must parse: the writer never leaves a torn one)."""
    if not path.exists():
        return []
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise TrainError(f"{path}: line {i} is not a JSON record ({e.msg}); the run table is damaged") from None
    return out


def append_records(path: Path, records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Append records atomically; a record whose ``run_id`` is already in the table is not
    written again. Returns the records actually written."""
    path = Path(path)
    with _locked(path):
        existing = read_records(path)
        ids = {r.get("run_id") for r in existing}
        new = [r for r in records if r["run_id"] not in ids]
        if new:
            old = path.read_text() if path.exists() else ""
            if old and not old.endswith("\n"):
                old += "\n"
            write_file(path, old + "".join(_dumps(r) + "\n" for r in new), "the run table",
                       f"the table is unchanged ({len(existing)} records) and the {len(new)} new record(s) were "
                       f"not added: fix the cause (a full disk?) and rerun to add them")
    return new


class MetricsLog:
    """Append-only JSONL of per-step metrics, truncated to ``resume_step`` when resuming.
    With ``enabled=False`` (every process but the first of a multi-host job) it writes nothing."""

    def __init__(self, path: Path, resume_step: int | None = None, enabled: bool = True):
        self.path = Path(path)
        self._file = None
        if not enabled:
            return
        if self.path.exists():
            keep = []
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the torn last line of a killed process; its step is redone
                if resume_step is not None and rec.get("step", 0) <= resume_step:
                    keep.append(line)
            write_file(self.path, "".join(line + "\n" for line in keep), "the metrics log",
                       "it is unchanged: fix the cause (a full disk?) and rerun to resume")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            try:
                self._file.write(_dumps(record) + "\n")
                self._file.flush()
            except OSError as e:
                raise TrainError(f"cannot append to the metrics log {self.path} ({e.strerror or e}); fix the cause "
                                 f"(a full disk?) and rerun to resume from the latest checkpoint") from e

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
