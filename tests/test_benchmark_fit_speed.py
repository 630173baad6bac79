"""`benchmarks/fit_speed.py`'s scalinfer measurements run and report what its table and JSON read.

The benchmark needs its extras (nutpie, PyMC) for its peers' rows, which CI does not install, and takes ~15
minutes; its scalinfer rows are child processes (`SURFACE_CHILD`) that need neither. Here those children run as
the benchmark runs them, on a thin table at a few draws: a MAP (the mode's values written for nutpie's start), the
plain model's NUTS fit and the default model's. A change to the model's sites or to a fit's attributes that the
benchmark reads (as `PINNED` gaining a site once did) fails here, not in the next session's benchmark run."""

from __future__ import annotations

import importlib.util
import json
from argparse import Namespace
from pathlib import Path

import pytest

from test_fixed_designs import _steplaw_sparse

ROOT = Path(__file__).resolve().parent.parent


def _fit_speed():
    spec = importlib.util.spec_from_file_location("fit_speed", ROOT / "benchmarks" / "fit_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_fit_speeds_scalinfer_children_report_what_it_reads(tmp_path):
    """The MAP child, then the plain and the default model's NUTS children, each in its own process with one cache
    (2 chains x (40 + 40) on the thin Step Law table: ~40 s). What is asserted is what `surface_benchmark` and the
    PyMC twin's start read of each; the figures themselves are the benchmark's to judge. Checked when written:
    with `w_ell` put into `PINNED`, as 9f87bbd fixed, the MAP child fails here with its KeyError."""
    fit_speed = _fit_speed()
    table = tmp_path / "runs.csv"
    _steplaw_sparse().df.to_csv(table, index=False)
    args = Namespace(data=table, format=None, chains=2, warmup=40, samples=40, seed=0)
    env = {"SCALINFER_CACHE": str(tmp_path / "cache")}

    point = tmp_path / "map_point.json"
    mp = fit_speed._child("map", args, env, check=False, map_out=str(point))
    assert mp["wall_s"] > 0 and mp["xla_compile_s"] >= 0 and "load_after" in mp
    values = json.loads(point.read_text())
    # nutpie's start (`_pymc_surface.twin_start`) reads the plain model's sampled sites from it
    from scalinfer.models.surface import PINNED, SCALARS
    sampled = set(SCALARS) | set(PINNED) | {"ell"}
    assert sampled <= set(values), sorted(sampled - set(values))

    for opt in ({}, {"default_model": True}):
        run = fit_speed._child("nuts", args, env, **opt)
        assert run["timings"]["nuts_s"] > 0 and run["wall_s"] >= run["timings"]["nuts_s"]
        d = run["diag"]
        assert d["draws"] >= args.chains * args.samples
        assert d["ess_bulk_min"] > 0 and d["rhat_max"] > 0 and d["divergences"] >= 0
        assert run["n_steps_mean"] >= 1 and run["warmup_n_steps_mean"] >= 1
        if opt:  # the default model's posterior means, compared with the PyMC twin's (`AGREE`)
            assert {"tau_lr_size", "tau_b_size", "tau_loss_size", "nu"} <= set(run["means"])
            assert all(len(v) == 2 for v in run["means"].values())


def test_a_peer_run_that_fails_is_left_out_and_named():
    """A peer's run given `failures` (nutpie from scalinfer's MAP, which may refuse an exact mode as its start) that
    fails leaves its row out and names its error in a line; any other failing run stops the benchmark. The child
    here fails at once, on a table that is not there."""
    fit_speed = _fit_speed()
    args = Namespace(data=ROOT / "no-such-table.csv", format=None, chains=2, warmup=4, samples=4, seed=0)
    failures: dict[str, str] = {}
    assert fit_speed._child("nutpie", args, {}, failures, "nutpie_from_map") is None
    assert list(failures) == ["nutpie_from_map"] and "no-such-table.csv" in failures["nutpie_from_map"]
    assert "\n" not in failures["nutpie_from_map"]
    with pytest.raises(SystemExit):
        fit_speed._child("nutpie", args, {})
    # nutpie's own refusal, as its process printed it (2026-12-06): the exception line and the Rust error's reason
    stderr = ("Traceback (most recent call last):\n  File \"<string>\", line 104, in <module>\nRuntimeError: All "
              "initialization points failed\n\nCaused by:\n    Could not initialize state because of bad initial "
              "gradient: Invalid initial point\n\nStack backtrace:\n   0: nuts_rs::sampler\n")
    assert fit_speed._gist(stderr) == ("RuntimeError: All initialization points failed (Could not initialize state "
                                       "because of bad initial gradient: Invalid initial point)")
