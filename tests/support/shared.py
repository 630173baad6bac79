"""Files made once per test run and shared by pytest-xdist's workers.

The README's test command runs the suite in several worker processes, and ``--dist loadscope`` sends two test
modules that need the same costly object (a NUTS fit) to different workers. `made_once` makes such a file in
the run's own temporary folder under an exclusive file lock: the first worker to ask makes it, the others wait
for it and read it. The folder is the run's, so nothing is shared between two runs of the suite.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest

__all__ = ["made_once"]


def made_once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """The path ``name`` in the run's shared temporary folder, made by ``make(path)`` if no worker made it yet.

    Under xdist each worker's base temporary folder is ``<the run's>/popen-gwN``: the parent is the run's and
    shared; without xdist the base folder itself is the run's. ``make`` must write ``path`` completely (the
    lock is held until it returns)."""
    base = factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not path.exists():
                make(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path
