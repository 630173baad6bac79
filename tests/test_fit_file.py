"""Posterior files: one netCDF, atomic, reopened without refitting, versions stored, foreign files refused."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import scalinfer
from conftest import ROOT
from scalinfer.errors import FitFileError
from scalinfer.inference.fit import FILE_FORMAT


@pytest.fixture(scope="module")
def small_fit():
    runs = scalinfer.simulate("chinchilla", seed=5)
    return scalinfer.fit(runs, model="chinchilla", method="laplace", seed=5)


def test_round_trip(small_fit, tmp_path):
    path = small_fit.save(tmp_path / "f.nc")
    again = scalinfer.load_fit(path)
    assert again.attrs["model"] == "chinchilla" and again.attrs["scalinfer_version"] == scalinfer.__version__
    assert again.attrs["model_version"] == small_fit.model.version
    a = small_fit.predict(N=1e10, D=1e11)["loss"]
    b = again.predict(N=1e10, D=1e11)["loss"]
    np.testing.assert_allclose(a, b)
    assert len(again.runs) == 40 and set(again.runs.columns) >= {"N", "D", "loss"}
    assert [p.name for p in tmp_path.iterdir()] == ["f.nc"]  # no temp file left behind


def test_failed_write_leaves_previous_file(small_fit, tmp_path, monkeypatch):
    path = small_fit.save(tmp_path / "f.nc")
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(small_fit.tree), "to_netcdf", boom)
    with pytest.raises(OSError):
        small_fit.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["f.nc"]


def test_foreign_netcdf_refused(tmp_path):
    import xarray as xr

    p = tmp_path / "other.nc"
    xr.Dataset({"x": ("a", np.arange(3.0))}).to_netcdf(p, engine="h5netcdf")
    with pytest.raises(FitFileError, match="not written by scalinfer"):
        scalinfer.load_fit(p)


def test_other_file_format_version_refused(small_fit, tmp_path):
    small_fit.tree.attrs["file_format"] = "scalinfer.fit/0"
    try:
        p = small_fit.save(tmp_path / "old.nc")
    finally:
        small_fit.tree.attrs["file_format"] = FILE_FORMAT
    with pytest.raises(FitFileError, match="scalinfer.fit/0"):
        scalinfer.load_fit(p)


def test_constants_are_one_variable(small_fit, tmp_path):
    """Format 2 writes the model's scalar constants as one variable along a coordinate of their names, not one
    netCDF variable each (a surface fit has ~90: decoding them was most of the time to reopen a fit)."""
    import h5py

    path = small_fit.save(tmp_path / "f.nc")
    with h5py.File(path, "r") as h:
        assert h.attrs["file_format"] == FILE_FORMAT == "scalinfer.fit/2"
        names = set(h["constant_data"])
    assert "constants" in names and not any(k.startswith("const_") for k in names)
    again = scalinfer.load_fit(path)
    assert again.constants == small_fit.constants and again.constants  # from the file, with h5py
    assert scalinfer.Fit(again.tree).constants == small_fit.constants  # from the DataTree, with xarray


def test_a_format_1_file_answers_as_its_tree_does():
    """A committed fit of format 1 (one ``const_NAME`` variable per constant): the reopened fit answers from the
    file (h5py, what it needs) exactly as the same fit built from its whole DataTree (xarray) does: same
    constants, draws, warnings (the file's saved R-hat and ESS against recomputed ones) and prior sensitivity."""
    from scalinfer.inference.fit import READ_FORMATS

    path = ROOT / "data" / "stability" / "fits" / "qk_on.nc"
    f = scalinfer.load_fit(path)
    assert f.attrs["file_format"] == READ_FORMATS[0] and f.method == "nuts"
    from_tree = scalinfer.Fit(scalinfer.load_fit(path).tree)
    assert f.constants == from_tree.constants and len(f.constants) > 20
    a, b = f.predict(N=1e9, D=2e10), from_tree.predict(N=1e9, D=2e10)
    assert a.to_dict() == b.to_dict() and a.prior_sensitivity  # warnings included
    saved, recomputed = f.summary(), from_tree.summary()
    assert saved.keys() == recomputed.keys()
    for k in saved:  # JSON keeps every float64 digit; only a different arviz_stats could move them
        assert saved[k] == pytest.approx(recomputed[k], rel=1e-12, nan_ok=True), k


def test_a_reopened_fit_is_the_file_as_it_was_read(small_fit, tmp_path):
    """`load_fit` reads the file once: rewriting it afterwards changes neither the answers nor the tree."""
    path = small_fit.save(tmp_path / "f.nc")
    again = scalinfer.load_fit(path)
    path.write_bytes(b"overwritten")
    np.testing.assert_array_equal(again.predict(N=1e10, D=1e11)["loss"], small_fit.predict(N=1e10, D=1e11)["loss"])
    assert again.tree["posterior"].sizes == small_fit.tree["posterior"].sizes


def test_the_summary_is_computed_once_per_fit_and_each_caller_gets_its_own_copy(monkeypatch):
    # R-hat and ESS of every scalar cost ~0.2 s on the surface; predict reads the summary for the fit's warnings,
    # so a notebook asking many targets would pay it each time. A fit's draws do not change: computed once
    fit_module = sys.modules["scalinfer.inference.fit"]  # the module, not the function `scalinfer.inference.fit`
    calls = []
    real = fit_module._rhat_ess
    monkeypatch.setattr(fit_module, "_rhat_ess", lambda arrays: calls.append(1) or real(arrays))
    f = scalinfer.fit(scalinfer.simulate("chinchilla", seed=5), model="chinchilla", method="laplace", seed=5)
    first = f.summary()
    first["alpha"]["q50"] = -1.0  # a caller's change stays in its copy
    f.predict(N=1e10, D=1e11)
    f.predict(N=2e10, D=1e11)
    again = f.summary()
    assert len(calls) == 1 and again["alpha"]["q50"] != -1.0
    assert np.isfinite(again["alpha"]["r_hat"])
