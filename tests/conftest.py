"""Shared test helpers: where the published datasets are, and running the CLI in-process."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from scalinfer.inference.runtime import prepare_runtime

# CPU devices for parallel chains must be asked for before JAX starts; a test module that runs JAX code at
# import or in a fixture before its first fit would otherwise leave every fit with one device
prepare_runtime(4)

ROOT = Path(__file__).resolve().parent.parent
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


@pytest.fixture(scope="session", autouse=True)
def _test_cache(tmp_path_factory):
    # the persistent compilation cache speeds up repeated fits; keep the tests' own copy out of the user's
    os.environ.setdefault("SCALINFER_CACHE", str(tmp_path_factory.mktemp("jax-cache")))
    yield
