"""Shared test helpers: where the published datasets are, and running the CLI in-process.

The suite keeps its own scalinfer cache (compiled programs, the trainer's corpora) in a temporary folder,
set here before anything configures JAX, so it never reads or writes the user's (~/.cache/scalinfer).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import shutil
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

_CACHE = tempfile.mkdtemp(prefix="scalinfer-tests-")
os.environ["SCALINFER_CACHE"] = _CACHE  # inherited by the subprocesses that tests start
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import scalinfer.runtime  # noqa: E402

# CPU devices for parallel chains must be asked for before JAX starts (a test module that runs JAX code at
# import would otherwise leave every fit with one device); float64 for the tests that call laws directly;
# the persistent compilation cache in the folder above
scalinfer.runtime.configure(4)

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # test tooling: `from support.compile_log import CompileLog`
    sys.path.insert(0, str(TESTS))

ROOT = TESTS.parent
DATASETS = ROOT.parent / "shared" / "datasets"


def dataset(*parts: str) -> Path:
    """Path of a published dataset file; skips the test (with the reason) when it is not on this machine."""
    p = DATASETS.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"published dataset not available here: {p}")
    return p


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)


def run_cli(*args: str) -> CliResult:
    """Run `scalinfer ARGS` in this process; returns exit code, stdout, stderr (SystemExit included)."""
    from scalinfer.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse errors
            code = e.code if isinstance(e.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())
