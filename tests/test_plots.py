"""Every figure kind of a chinchilla fit renders to a PNG through `scalinfer plot`, atomically."""

from __future__ import annotations

import pytest

import scalinfer
from conftest import run_cli


@pytest.fixture(scope="module")
def fit_path(tmp_path_factory):
    runs = scalinfer.simulate("chinchilla", seed=4)
    f = scalinfer.fit(runs, model="chinchilla", chains=2, warmup=150, samples=150, seed=4)
    return f.save(tmp_path_factory.mktemp("plots") / "fit.nc")


@pytest.mark.parametrize("kind", ["loss-vs-D", "loss-vs-N", "chinchilla-ppc", "trace", "rank"])
def test_kind_renders(fit_path, tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    r = run_cli("plot", fit_path, kind, "-o", out)
    assert r.code == 0, r.err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_unknown_kind_lists_the_known(fit_path, tmp_path):
    r = run_cli("plot", fit_path, "nope", "-o", tmp_path / "x.png")
    assert r.code == 2 and "loss-vs-D" in r.err
