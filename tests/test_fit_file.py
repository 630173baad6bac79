"""Posterior files: one netCDF, atomic, reopened without refitting, versions stored, foreign files refused."""

from __future__ import annotations

import numpy as np
import pytest

import scalinfer
from scalinfer.errors import FitFileError


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
        small_fit.tree.attrs["file_format"] = "scalinfer.fit/1"
    with pytest.raises(FitFileError, match="scalinfer.fit/0"):
        scalinfer.load_fit(p)
