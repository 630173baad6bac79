"""Writing files safely: the one home of the checks every command makes on the paths it writes, and atomic
writes.

`check_output` (a file) and `check_output_dir` (a folder) run before a command starts its work, so a path that
cannot be written fails in a second with one line, not after the fit. They refuse:

- a path that is one of the command's inputs (``scalinfer fit runs.csv -o runs.csv`` would replace the table),
  compared as the same file (`os.path.samefile`), so a link or a second spelling of the path counts too;
- a path that exists and is not a regular file: a folder, a device (``/dev/full``), a fifo, a socket;
- an existing file, unless ``force`` (``--force``);
- a path whose folder is missing: only the last level of the path is created, the file itself or the
  ``--out`` folder (``-o /nonexistent_dir/x.nc`` is an error, not a new folder at the root);
- a folder in which this process cannot create a file (tested by creating and removing a temporary file, so
  it also holds for root on a read-only or virtual file system such as ``/proc``).

`atomic_write_with` writes a temporary file in the destination folder, flushed and fsynced, then renames it over
the target, so a crash or a full disk leaves either the old file or the new one, never half of one. The file it
leaves has the mode a plain ``open(path, "w")`` would give: ``0o666`` less the process's umask (read from the
mode the kernel gives the temporary file, which also honours a default ACL), or the old file's mode when it
replaces one. It never replaces anything but a regular file.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from scalinfer.errors import OutputError

__all__ = ["check_output", "check_output_dir", "check_input_file", "atomic_write_text", "atomic_write_bytes",
           "atomic_write_with"]

PathLike = str | os.PathLike


# ---- checks before the work ----------------------------------------------------------------------------------
def check_output(path: PathLike, inputs: Iterable[PathLike | None] = (), force: bool = False,
                 what: str = "output") -> Path:
    """Check that `path` may be written as a new or replaced regular file; returns it as a `Path`.

    Raises `OutputError` (one line naming the path and why) for an input among `inputs`, a path that exists
    and is not a regular file, an existing file without `force`, a missing folder, or a folder this process
    cannot write in. Nothing is created or changed."""
    path = Path(path)
    if str(path) == "" or path.name in ("", ".", ".."):
        raise OutputError(f"{what} {str(path)!r}: not a file name")
    for other in inputs:
        if other is not None and _same(path, Path(other)):
            raise OutputError(f"{what} {path}: is an input of this command ({other}); choose another file")
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # a file where a folder should be: said by _check_folder
        st = None
    except OSError as e:  # a loop of links, no permission
        raise OutputError(f"{what} {path}: {e.strerror or e}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{what} {path}: is a folder; give a file name")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{what} {path}: is {_kind(st.st_mode)}, not a regular file; refusing to replace it")
        if not force:
            raise OutputError(f"{what} {path}: already exists; add --force to overwrite it")
    _check_folder(path.parent, what, path)
    return path


def check_output_dir(path: PathLike, inputs: Iterable[PathLike | None] = (), what: str = "output folder") -> Path:
    """Check that `path` is an existing folder or can be created as one (its parent exists): a folder a command
    writes into and reuses (a sweep's or the trainer's ``--out``, which resume from what is there)."""
    if str(path) == "":
        raise OutputError(f"{what} '': not a folder name")
    path = Path(path)
    for other in inputs:
        if other is not None and _same(path, Path(other)):
            raise OutputError(f"{what} {path}: is an input of this command ({other}); choose another folder")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"{what} {path}: {e.strerror or e}") from None
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{what} {path}: is {_kind(st.st_mode)}, not a folder")
        _probe(path, what, path)
        return path
    _check_folder(path.parent, what, path)
    return path


def check_input_file(path: PathLike, what: str = "input file") -> Path:
    """Check that `path` is an existing regular file (or a link to one). Raises an `OSError` whose ``strerror``
    is one line naming it and what it is instead (`IsADirectoryError` for a folder)."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        why = "no such file" if isinstance(e, FileNotFoundError) else e.strerror or str(e)
        raise type(e)(e.errno, f"{what} {path}: {why}", str(path)) from None
    if not stat.S_ISREG(st.st_mode):
        err = IsADirectoryError if stat.S_ISDIR(st.st_mode) else OSError
        raise err(errno.EISDIR if err is IsADirectoryError else errno.EINVAL,
                  f"{what} {path}: is {_kind(st.st_mode)}, not a file", str(path))
    return path


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare where they would be
        return a.resolve() == b.resolve()


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _check_folder(folder: Path, what: str, path: Path) -> None:
    """The folder `path` goes in exists and takes a new file: a command creates the last level of its path (the
    file, or its ``--out`` folder), never a missing folder above it."""
    folder = folder if str(folder) else Path(".")
    if not folder.is_dir():
        missing = next((p for p in reversed((folder, *folder.parents)) if not p.is_dir()), folder)
        if missing.exists():
            raise OutputError(f"{what} {path}: {missing} is a file, not a folder")
        raise OutputError(f"{what} {path}: {missing} does not exist (scalinfer creates no folder above the output)")
    _probe(folder, what, path)


def _probe(folder: Path, what: str, path: Path) -> None:
    """Create and remove a temporary file in `folder`: the only test that holds for every file system and user."""
    try:
        fd, tmp = _create_temp(folder, ".scalinfer-probe")
    except OSError as e:
        raise OutputError(f"{what} {path}: cannot write in {folder}: {e.strerror or e}") from None
    os.close(fd)
    os.unlink(tmp)


# ---- atomic writes -------------------------------------------------------------------------------------------
def _create_temp(folder: Path, stem: str) -> tuple[int, str]:
    """A new file ``folder/stem.<random>.tmp`` created with mode 0o666, which the kernel reduces by the umask
    (`tempfile.mkstemp` would make it 0o600 whatever the umask)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        name = os.path.join(folder, f"{stem}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def atomic_write_with(path: PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` to produce the file, then move it over `path` atomically.

    Creates the folder of `path` if it is missing, that last level only. Replaces only a regular file (a device such
    as ``/dev/full``, a fifo or a folder at `path` is an `OutputError`, untouched). The file gets the old file's
    mode, or ``0o666`` less the umask when new. An OSError (no space, no permission, a missing folder) comes out
    with its errno, `path` as its filename (not the temporary file's) and a message that says what failed."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{path}: is {_kind(st.st_mode)}, not a regular file; refusing to replace it")
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder.mkdir(exist_ok=True)  # the last level only: never a tree (check_output, for commands, not even that)
        fd, tmp = _create_temp(folder, f".{path.name}")
    except OSError as e:
        blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        missing = not folder.parent.exists()
        why = (f"{blocker} is a file, not a folder" if blocker else
               f"folder {folder.parent} does not exist" if missing else
               f"cannot write in {folder}: {e.strerror or e}")
        raise OSError(e.errno, why, str(path)) from e
    mode = stat.S_IMODE(st.st_mode) if st is not None else stat.S_IMODE(os.fstat(fd).st_mode)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # the writer may have replaced the file: the mode it would have had
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    return atomic_write_with(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: PathLike, text: str) -> Path:
    return atomic_write_with(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
