"""Atomic file writes: a temporary file in the destination folder, flushed and fsynced, then renamed over the
target, so a crash or a full disk leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write_text", "atomic_write_bytes", "atomic_write_with"]


def atomic_write_with(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` to produce the file, then move it over `path` atomically.

    An OSError (no space, no permission, a file where a folder should be) comes out with its errno, `path` as
    its filename (not the temporary file's) and a message that says what failed."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        blocker = next((p for p in (path.parent, *path.parent.parents) if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file, not a folder" if blocker else f"cannot write in {path.parent}: {e.strerror or e}"
        raise OSError(e.errno, why, str(path)) from e
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write_with(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_with(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
