"""The command line starts light: building the parser imports no heavy library, and reading a fit file does
not import the trainer. (The times themselves are benchmarks/cli_speed.py's.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT
from scalinfer.cli import _args

HEAVY = ("jax", "numpyro", "orbax", "numpy", "pandas", "xarray", "arviz_base", "arviz_stats", "matplotlib",
         "scalinfer.train")


def _imported(*code: str) -> set[str]:
    """The packages a fresh interpreter imports running `code` (``-X importtime``): top-level names, and
    ``scalinfer.X`` for scalinfer's subpackages."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "; ".join(code)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            parts = line.rsplit("|", 1)[1].strip().split(".")
            names.add(".".join(parts[:2]) if parts[0] == "scalinfer" else parts[0])
    return names


@pytest.mark.parametrize("argv", [["--help"], ["fit", "--help"], ["predict", "--help"], ["plot", "--help"],
                                  ["train", "--help"], ["sweep", "--help"], ["schedule", "--help"]])
def test_help_imports_nothing_heavy(argv):
    code = f"from scalinfer.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"
    heavy = _imported(code) & set(HEAVY)
    assert not heavy, f"scalinfer {' '.join(argv)} imports {sorted(heavy)}"


def test_summary_and_predict_do_not_import_the_trainer(tmp_path):
    # a fit file of the smallest kind: a chinchilla MAP fit of the bundled simulated table
    fit = tmp_path / "fit.nc"
    code = ("from scalinfer.cli import main",
            f"assert main(['fit', {str(ROOT / 'data' / 'simulated_chinchilla.csv')!r}, '--model', 'chinchilla', "
            f"'--method', 'map', '-o', {str(fit)!r}]) == 0")
    proc = subprocess.run([sys.executable, "-c", "; ".join(code)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for argv in (["summary", str(fit), "--json"], ["predict", str(fit), "--N", "1e10", "--D", "2e11", "--json"]):
        names = _imported("from scalinfer.cli import main", f"assert main({argv!r}) == 0")
        assert not names & {"orbax", "scalinfer.train", "matplotlib", "optax"}, (argv, sorted(names))
        if argv[0] == "summary":  # the file carries its summary: no model code, no diagnostics library
            assert not names & {"jax", "numpyro", "arviz_stats", "scipy"}, (argv, sorted(names))
        else:  # the variables it needs, read with h5py (no xarray decoding the file); a MAP fit has no draws to
            # reweight nor R-hat to compute (no diagnostics library)
            assert not names & {"xarray", "arviz_base", "arviz_stats"}, (argv, sorted(names))


def test_predict_does_not_import_numpyro():
    """A surface fit's prediction is closed-form NumPy on the saved draws (`scalinfer.models.surface.predict`), here
    on a committed NUTS fit without its prior sensitivity (which imports arviz_stats): no NumPyro, JAX nor SciPy
    (the NumPyro model is `scalinfer.models.surface.numpyro_model`, imported when a fit traces it). 1.2 s at
    load 2.3: a fresh interpreter importing what predict imports."""
    fit = ROOT / "data" / "stability" / "fits" / "qk_on.nc"
    argv = ["predict", str(fit), "--N", "1e9", "--D", "2e10", "--no-sensitivity", "--json"]
    names = _imported("from scalinfer.cli import main", f"assert main({argv!r}) == 0")
    assert not names & {"numpyro", "jax", "scipy", "orbax", "scalinfer.train", "optax"}, sorted(names)


def test_the_parsers_names_are_the_librarys():
    """The choices the parser offers without importing the library are the library's own."""
    from scalinfer.laws import BASELINES
    from scalinfer.models import MODEL_NAMES
    from scalinfer.plots import kinds
    from scalinfer.runs.formats import FORMATS
    from scalinfer.schedules.wsd import DECAY_SHAPES
    from scalinfer.train.config import PRESETS

    assert _args.MODEL_NAMES == MODEL_NAMES
    assert _args.FORMAT_NAMES == tuple(FORMATS)
    assert set(_args.PLOT_KINDS) == set(kinds())
    assert _args.PRESET_NAMES == tuple(PRESETS)
    assert _args.DECAY_SHAPES == tuple(DECAY_SHAPES)
    assert set(_args.BASELINES.values()) <= set(BASELINES)
    from scalinfer.suggest import DECAY_FRACTION, MAX_BRANCHES

    assert (_args.SUGGEST_DECAY_FRACTION, _args.SUGGEST_MAX_BRANCHES) == (DECAY_FRACTION, MAX_BRANCHES)
