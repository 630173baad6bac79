"""Checkpoints with orbax: the train state (params, optimizer state, step, RNG key) as arrays, and
the loop's bookkeeping (data position, tokens seen, wall time...) as JSON, saved together.

Orbax writes each step into a temporary folder and renames it when complete, so a run killed
while saving (even by ``kill -9``) leaves the previous checkpoint intact.

A checkpoint damaged afterwards (a file truncated, overwritten or deleted: a full disk, a bad copy, a
cleanup gone wrong) is caught when it is read: `Checkpointer.restore_latest` then warns
(`CheckpointWarning`, naming the step and the reason), moves the damaged step aside to
``<directory>/<step>.corrupt`` and falls back to the previous checkpoint; `Checkpointer.restore` of one
given step (a decay branch's fork) raises a one-line `TrainError` naming the step's folder. Orbax stores a
checksum with every array chunk, so damage to the array data is found, never silently restored. A restore
that fails for another reason (out of memory, a bug) is raised as it is, never taken for damage.

Each saved step also lists its files with their sizes and CRC-32 in ``<step>/scalinfer-files.json``, and a
restore compares the folder with that list before orbax reads it: a truncated, overwritten or deleted file is
named at once (`DamagedFile`). Orbax would find the damage too, but it reads a step's arrays concurrently on an
event loop of its own and closes that loop at the first failed read, with the other reads still in flight;
each of those later prints a traceback, burying the one-line warning. A step saved without the list (by an
earlier version) is left to orbax's checks.
"""

from __future__ import annotations

import json
import os
import re
import warnings
import zlib
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from scalinfer import _io
from scalinfer.errors import TrainError

__all__ = ["Checkpointer", "CheckpointWarning", "DamagedFile", "FILE_LIST"]

FILE_LIST = "scalinfer-files.json"  # in each step folder: relative path -> [size in bytes, CRC-32]


class CheckpointWarning(UserWarning):
    """A checkpoint could not be restored and an older one is used instead."""


class DamagedFile(ValueError):
    """A file of a checkpoint step is missing, or its size or CRC-32 differs from the step's `FILE_LIST`."""


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _list_files(step_dir: Path) -> dict[str, list[int]]:
    """Every file under ``step_dir`` (but the list itself): relative path -> [size, CRC-32]."""
    return {p.relative_to(step_dir).as_posix(): [p.stat().st_size, _crc32(p)]
            for p in sorted(step_dir.rglob("*")) if p.is_file() and p.name != FILE_LIST}


def _write_file_list(step_dir: Path) -> None:
    """Write ``step_dir``'s `FILE_LIST` (atomically, one file per line)."""
    lines = [f"{json.dumps(rel)}: {json.dumps(entry)}" for rel, entry in _list_files(step_dir).items()]
    _io.atomic_write_text(step_dir / FILE_LIST, "{\n" + ",\n".join(lines) + "\n}\n")


def _check_files(step_dir: Path) -> None:
    """Raise `DamagedFile` naming the first file of ``step_dir`` that is missing or differs from its
    `FILE_LIST` (files not on the list are not checked); nothing when the step has no list."""
    listed = step_dir / FILE_LIST
    if not listed.is_file():
        return
    try:
        expected = [(str(rel), int(size), int(crc)) for rel, (size, crc) in json.loads(listed.read_text()).items()]
    except (ValueError, TypeError, AttributeError) as e:
        raise DamagedFile(f"{FILE_LIST} cannot be read ({e})") from None
    for rel, size, crc in expected:
        path = step_dir / rel
        if not path.is_file():
            raise DamagedFile(f"{rel} is missing")
        if (got := path.stat().st_size) != size:
            raise DamagedFile(f"{rel} has {got:,} bytes, {size:,} when it was saved")
        if _crc32(path) != crc:
            raise DamagedFile(f"{rel} was changed after it was saved (its CRC-32 differs)")


def _chain(e: BaseException) -> list[BaseException]:
    """``e`` and its causes, outermost first (a context suppressed by ``raise ... from None`` is not one)."""
    out, seen = [e], {id(e)}
    while ((nxt := out[-1].__cause__ or (None if out[-1].__suppress_context__ else out[-1].__context__))
           is not None and id(nxt) not in seen):
        seen.add(id(nxt))
        out.append(nxt)
    return out


def _file_error(e: BaseException) -> bool:
    """Whether a save or restore failed on the checkpoint's files: what orbax and tensorstore raise for a
    truncated, overwritten or deleted file, or a write the file system refused (ValueError: data loss or out of
    range; OSError: e.g. a full disk, a missing file; KeyError: an item missing; a bare Exception wrapping one of
    these), not an out-of-memory error or a bug."""
    return all(type(x) is Exception or isinstance(x, (OSError, ValueError, KeyError)) for x in _chain(e))


def _reason(e: BaseException) -> str:
    """One line saying why a restore failed: the innermost cause (tensorstore's message names the file and
    the damage, e.g. a byte range past the end of a truncated file or a failed decompression)."""
    inner = _chain(e)[-1]
    text = " ".join(str(inner).split()) or type(inner).__name__
    text = re.sub(r" See full TensorStore details: .*", "", text)
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(inner).__name__}: {text}"


class Checkpointer:
    """A folder of step checkpoints.

    Parameters
    ----------
    directory : where the step folders go (created if missing).
    keep : how many of the most recent checkpoints to keep (None = all).
    """

    def __init__(self, directory: str | Path, keep: int | None = 2):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                               enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
        """Save ``state`` (a pytree of arrays) and ``meta`` (JSON-ready) as ``step``.

        A write that fails on the file system (a full disk, a folder that cannot be written) is a one-line
        `TrainError` naming the step's folder, the reason and the newest checkpoint a rerun resumes from. Orbax
        writes a step into a temporary folder and renames it when complete, so the earlier steps are intact and
        the failed one is not taken for a checkpoint."""
        if step in self._manager.all_steps():
            return
        try:
            self._manager.save(step, args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
            self._manager.wait_until_finished()
        except Exception as e:
            if not _file_error(e):  # anything else is a bug
                raise
            kept = [s for s in self._manager.all_steps() if s != step]
            resume = f"a rerun resumes from step {max(kept)}" if kept else "a rerun starts from step 0"
            raise TrainError(f"checkpoint {self.directory / str(step)} could not be written ({_reason(e)}); "
                             f"free space or fix the folder, then rerun: {resume}") from e
        if jax.process_index() == 0:
            try:
                _write_file_list(self.directory / str(step))
            except OSError as e:  # the step itself is complete: a rerun resumes from it, checked by orbax alone
                raise TrainError(f"checkpoint {self.directory / str(step)} was saved but its {FILE_LIST} could "
                                 f"not be written ({e.strerror or e}); free space or fix the folder, then rerun: "
                                 f"a rerun resumes from step {step}") from e

    def restore(self, step: int, like: Any, remedy: str | None = None) -> tuple[Any, dict[str, Any]]:
        """Restore ``step`` into the shapes, dtypes and shardings of ``like`` (arrays or
        ``jax.ShapeDtypeStruct`` with shardings).

        A damaged step (truncated, overwritten or missing files) is a one-line `TrainError` naming its folder,
        the reason and ``remedy`` (what to do; default: delete the folder and rerun to resume from an earlier
        checkpoint). Nothing is moved.
        """
        try:
            return self._restore(step, like)
        except Exception as e:
            if not _file_error(e):
                raise
            where = self.directory / str(step)
            raise TrainError(f"checkpoint {where} cannot be restored ({_reason(e)}): it is damaged; "
                             + (remedy or f"delete {where} (or move it away) and rerun to resume from an earlier "
                                          f"checkpoint")) from e

    def _restore(self, step: int, like: Any) -> tuple[Any, dict[str, Any]]:
        _check_files(self.directory / str(step))
        abstract = jax.tree.map(
            lambda a: a if isinstance(a, jax.ShapeDtypeStruct) else ocp.utils.to_shape_dtype_struct(a), like)
        out = self._manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
        return out["state"], dict(out["meta"])

    def restore_latest(self, like: Any) -> tuple[Any, dict[str, Any]] | None:
        """Restore the newest checkpoint that can be read, or None when there is none.

        When a step is damaged (truncated, overwritten or missing files), the previous one is tried (any
        other failure is raised as it is). Once one restores, a `CheckpointWarning` names the damaged
        step(s), the reason and the step resumed from, and the damaged steps are moved aside to
        ``<step>.corrupt`` so that the resumed run saves those steps afresh. When none restores, a
        one-line `TrainError` says what to do (nothing is moved).
        """
        steps = sorted(self.steps(), reverse=True)
        failed: list[tuple[int, str]] = []
        for step in steps:
            try:
                restored = self._restore(step, like)
            except Exception as e:  # noqa: BLE001 - orbax/tensorstore raise many types for damaged files
                if not _file_error(e):
                    raise
                failed.append((step, _reason(e)))
                continue
            if failed:
                moved = ", ".join(str(p) for p in self._set_aside([s for s, _ in failed]))
                damage = "; ".join(f"step {s}: {why}" for s, why in failed)
                warnings.warn(f"checkpoint step {failed[0][0]} in {self.directory} cannot be restored ({damage}); "
                              f"falling back to step {step} and resuming from there (the damaged checkpoint was "
                              f"moved aside to {moved}; delete it once inspected)", CheckpointWarning, stacklevel=2)
            return restored
        if failed:
            raise TrainError(
                f"no checkpoint in {self.directory} can be restored (step {failed[0][0]}: {failed[0][1]}"
                + (f"; step{'s' * (len(failed) > 2)} {', '.join(str(s) for s, _ in failed[1:])} too"
                   if len(failed) > 1 else "")
                + f"); move {self.directory} away (or delete it) and rerun to restart the run from step 0")
        return None

    def _set_aside(self, steps: list[int]) -> list[Path]:
        """Rename damaged step folders to ``<step>.corrupt`` (a name orbax ignores; the first process
        renames, the others wait), so the resumed run saves those steps afresh. Returns the new paths."""
        moved = []
        for step in steps:
            dest, n = self.directory / f"{step}.corrupt", 1
            while dest.exists():
                dest, n = self.directory / f"{step}.corrupt.{n}", n + 1
            if jax.process_index() == 0 and (self.directory / str(step)).exists():
                os.replace(self.directory / str(step), dest)
            moved.append(dest)
        if jax.process_count() > 1:
            ocp.multihost.sync_global_processes("scalinfer_checkpoint_set_aside")
        self._manager.reload()
        return moved

    def close(self) -> None:
        self._manager.close()
