"""Shared test helpers: where the published datasets are, and running the CLI in-process.

The suite keeps its own scalinfer cache (compiled programs, the trainer's corpora) in a temporary folder,
set here before anything configures JAX, so it never reads or writes the user's (~/.cache/scalinfer); the
folder is one per run, shared by the run's xdist workers.
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

# One folder for the whole run: pytest-xdist's workers (and the subprocesses and notebook kernels that tests
# start) inherit the controlling process's environment, so a program one worker compiled is a persistent-cache
# hit in the others. The process that made the folder removes it when it exits.
if "SCALINFER_TEST_CACHE" not in os.environ:
    os.environ["SCALINFER_TEST_CACHE"] = tempfile.mkdtemp(prefix="scalinfer-tests-")
    atexit.register(shutil.rmtree, os.environ["SCALINFER_TEST_CACHE"], ignore_errors=True)
_CACHE = os.environ["SCALINFER_TEST_CACHE"]
os.environ["SCALINFER_CACHE"] = _CACHE
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)

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


@pytest.fixture(scope="session")
def surface_sim_table():
    """The simulated ``surface`` table of test_surface and test_recommend: ``(params, table)``, 405 runs
    (`support.designs.surface_design("small")`: 9 settings; the model's `true_params`, seed 11). Cheap (no fit):
    tests that need only the table do not wait for `surface_sim_fit`."""
    from scalinfer.models.surface import MODEL
    from support.designs import surface_design

    params = MODEL.true_params()
    return params, MODEL.simulate(params, surface_design("small"), seed=11)


@pytest.fixture(scope="session")
def surface_sim_fit(tmp_path_factory, surface_sim_table):
    """`surface_sim_table` and its NUTS fit, made once per run: ``(params, table, fit, path)``.

    One fit (2 chains x (300 + 300), seed 11), saved: the first worker to ask fits and saves it, the others read
    the file (`support.shared.made_once`); the fit is read back from the file in every worker, so the tests see
    the fit as a user who reopens it does."""
    import scalinfer
    from scalinfer.runs.schema import validate
    from support.shared import made_once

    params, df = surface_sim_table
    runs = validate(df.drop(columns=["true_lr_opt", "true_batch_opt", "true_loss_opt"]), source="simulated",
                    kind="runs")
    path = made_once(tmp_path_factory, "surface_sim.nc", lambda p: scalinfer.fit(
        runs, model="surface", chains=2, warmup=300, samples=300, seed=11).save(p))
    return params, df, scalinfer.load_fit(path), path

