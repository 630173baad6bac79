"""The muTransfer studies' committed files agree with each other (#24 item 3; data/transfer/, data/transfer_axes/):
each sweep file is what its make_sweep.py writes and what the manifest's hash names, the summary is what
summarize.py reads from the committed runs, an optimum in optima.csv is the committed fit's, and the checks the
READMEs state (repeated configurations, the timescale arm's lambda) hold on the data. No training, no fitting."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT

DATA = ROOT / "data"
STUDIES = ("transfer", "transfer_axes")


def _load(path, name, monkeypatch):
    """A study script as a module. Each summarize.py imports its own folder's ``make_sweep`` by that name, so the
    name is cleared before and the folder put first on the path (the two studies' scripts share it)."""
    monkeypatch.delitem(sys.modules, "make_sweep", raising=False)
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("study", STUDIES)
def test_the_sweep_file_is_the_scripts_and_the_manifests(study, monkeypatch):
    make = _load(DATA / study / "make_sweep.py", f"{study}_make_sweep", monkeypatch)
    text = (DATA / study / "sweep.toml").read_text()
    assert make.sweep_text() == text
    manifest = json.loads((DATA / study / "manifest.json").read_text())
    assert manifest["sweep_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert {r["name"] for r in manifest["runs"] if r["state"] == "done"} == {r["name"] for r in make.runs()}


def test_transfer_axes_summary_is_its_runs(monkeypatch):
    summarize = _load(DATA / "transfer_axes" / "summarize.py", "transfer_axes_summarize", monkeypatch)
    rows = pd.DataFrame(summarize.summary_rows())
    committed = pd.read_csv(DATA / "transfer_axes" / "summary.csv")
    assert len(rows) == len(committed) == 64
    pd.testing.assert_frame_equal(rows.drop(columns="wall_s").reset_index(drop=True),
                                  committed.drop(columns="wall_s"), check_dtype=False, rtol=1e-12)


def test_transfer_axes_repeated_configurations_and_the_timescale_arm():
    """The README's checks: the proxy's configuration, run five times, ends at one loss to 6 digits; wd0.4's two
    k = 0 runs match to 6 digits; the timescale arm's lambda at the proxy's LR is the fixed arm's (the timescale is
    written to 6 digits, so to 1e-5)."""
    s = pd.read_csv(DATA / "transfer_axes" / "summary.csv")
    proxy = s[(s["k"] == 0) & s["shape"].isin(["d64l2h4", "wd0.1", "D164k"])]
    assert len(proxy) == 5 and np.ptp(proxy["loss"]) < 1e-6
    wd04 = s[(s["k"] == 0) & (s["shape"] == "wd0.4")]
    assert len(wd04) == 2 and np.ptp(wd04["loss"]) < 1e-5
    at_proxy = s[(s["k"] == 0) & (s["axis"] == "wd")].pivot(index="shape", columns="arm", values="weight_decay")
    np.testing.assert_allclose(at_proxy["timescale"], at_proxy["fixed"], rtol=1e-5)
    np.testing.assert_allclose(at_proxy["fixed"].loc[["wd0.1", "wd0.4", "wd1.6"]], [0.1, 0.4, 1.6])


def test_transfer_axes_optima_are_the_committed_fits(monkeypatch):
    """optima.csv's fitted optima and drifts of one (axis, arm), recomputed from its committed fit's draws (the
    same arithmetic on the same draws: equal to float rounding)."""
    import scalinfer

    summarize = _load(DATA / "transfer_axes" / "summarize.py", "transfer_axes_summarize", monkeypatch)
    fit = scalinfer.load_fit(DATA / "transfer_axes" / "fits" / "wd_timescale.nc")
    opt = summarize.setting_optima(fit)  # settings in the fit's order: the groups wd0.1, wd0.4, wd1.6, sorted
    optima = pd.read_csv(DATA / "transfer_axes" / "optima.csv").set_index(["axis", "arm", "shape"])
    for s, shape in enumerate(["wd0.1", "wd0.4", "wd1.6"]):
        row = optima.loc[("wd", "timescale", shape)]
        np.testing.assert_allclose(np.quantile(opt[:, s], summarize.Q), row[["lr_opt_lo", "lr_opt", "lr_opt_hi"]],
                                   rtol=1e-9)
        if s:
            np.testing.assert_allclose(np.median(opt[:, s] / opt[:, 0]), row["drift"], rtol=1e-9)
