"""The command-line contract: fit / summary / predict, JSON on stdout, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, dataset, run_cli


@pytest.fixture(scope="module")
def fit_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "chin.nc"
    r = run_cli("fit", ROOT / "data" / "simulated_chinchilla.csv", "--model", "chinchilla",
                "--chains", "2", "--warmup", "200", "--samples", "200", "--seed", "2", "-o", out)
    assert r.code == 0, r.err
    assert out.exists()
    return out


def test_summary_json_contract(fit_file):
    r = run_cli("summary", fit_file, "--json")
    assert r.code == 0, r.err
    s = r.json()
    assert s["model"] == "chinchilla" and s["n_runs"] == 40 and isinstance(s["divergences"], int)
    # --samples given: exactly those draws, none added
    assert (s["chains"], s["draws_per_chain"], s["samples_extended"]) == (2, 200, 0)
    text = run_cli("summary", fit_file).out
    assert text.splitlines()[0] == (f"model chinchilla (nuts), 40 runs, 2 chains x 200 draws, {s['divergences']} "
                                    "divergences")
    for name in ("E", "A", "B", "alpha", "beta"):
        assert set(s[name]) >= {"mean", "sd", "q05", "q50", "q95", "r_hat", "ess_bulk"}
        assert s[name]["q05"] <= s[name]["q50"] <= s[name]["q95"]
    assert isinstance(s["warnings"], list)


def test_predict_json_contract(fit_file):
    r = run_cli("predict", fit_file, "--N", "1e10", "--D", "2e11", "--ci", "0.8", "--json")
    assert r.code == 0, r.err
    p = r.json()
    assert p["loss"]["lo"] < p["loss"]["median"] < p["loss"]["hi"]
    assert p["extrapolation"]["N_ratio"] == pytest.approx(1e10 / 5e9)
    assert p["extrapolation"]["D_ratio"] == pytest.approx(2e11 / 4e11)


def test_predict_grid_table(fit_file):
    r = run_cli("predict", fit_file, "--N", "1e9:1e11:3", "--D", "1e10:1e12:2", "--grid")
    assert r.code == 0, r.err
    lines = r.out.strip().splitlines()
    assert len(lines) == 1 + 6 and "loss_median" in lines[0]


def test_predict_rejects_target_the_model_does_not_take(fit_file):
    r = run_cli("predict", fit_file, "--N", "1e9", "--D", "1e10", "--target-loss", "2.5")
    assert r.code == 2 and r.err.startswith("error:") and "--target-loss" in r.err


def test_baseline_needs_no_fit():
    r = run_cli("predict", "--baseline", "steplaw", "--N", "1e9", "--D", "2e10", "--json")
    assert r.code == 0, r.err
    p = r.json()
    # Step Law: eta* = 1.79 N^-0.713 D^0.307, B* = 0.58 D^0.571 (tokens)
    assert p["lr_opt"]["median"] == pytest.approx(1.79 * 1e9 ** -0.713 * 2e10 ** 0.307, rel=1e-6)
    assert p["batch_opt"]["median"] == pytest.approx(0.58 * 2e10 ** 0.571, rel=1e-6)
    assert p["lr_opt"]["unit"] and p["lr_opt"]["definition"] and p["batch_loss_opt"]["unit"] == "tokens/step"
    assert p["batch_opt"]["alias_of"] == "batch_loss_opt" and p["batch_opt"]["median"] == p["batch_loss_opt"]["median"]


@pytest.mark.parametrize("N, D", [("1e9", "1e8:1e6:2"), ("1e9,2e9", "1e8")])
def test_a_baseline_at_several_points_is_one_line(N, D):
    # fuzz_cli.py seed 4 found a traceback here: a peer law answers at one (N, D)
    r = run_cli("predict", "--baseline", "steplaw", "--N", N, "--D", D)
    assert r.code == 2 and r.err.strip().splitlines() == [
        f"error: --baseline answers at one point: give one value of {'--D' if ':' in D else '--N'}, not 2"], r.err


def test_the_lr_papers_baseline_says_which_reading_of_its_units_it_uses():
    """Zhou et al.'s Eq. 6 leaves N's unit open: the answer reads raw counts, says so, and gives the other
    reading's value (N in millions: x 1e6^0.2219 = 21.5)."""
    r = run_cli("predict", "--baseline", "zhou2026", "--N", "1.3e9", "--D", "5e11", "--json")
    assert r.code == 0, r.err
    p = r.json()
    assert p["lr_opt"]["median"] == pytest.approx(38.4588 * 1.3e9 ** -0.2219 * 5e11 ** -0.3509, rel=1e-6)
    assert "raw" in p["reading"]
    assert any("does not state the units" in w and "(21x)" in w for w in p["warnings"]), p["warnings"]


def _bad(tmp_path, name: str, text: str | bytes):
    p = tmp_path / name
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return p


@pytest.mark.parametrize("name, content, fmt, expect", [
    ("missing.csv", "N,D\n1e8,1e9\n", None, "loss"),
    ("negative.csv", "N,D,loss\n-1e8,1e9,3.0\n", None, "'N'"),
    ("nanloss.csv", "N,D,loss\n1e8,1e9,nan\n", None, "'loss'"),
    ("empty.csv", "", None, "empty"),
    ("seqs.csv", "N,D,loss,batch_seqs\n1e8,1e9,3.0,64\n", None, "seq_len"),
    ("ok.csv", "N,D,loss\n1e8,1e9,3.0\n", "no-such-format", "no-such-format"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, name, content, fmt, expect):
    path = _bad(tmp_path, name, content)
    args = ["fit", path, "--model", "chinchilla", "-o", tmp_path / "x.nc"]
    if fmt:
        args += ["--format", fmt]
    r = run_cli(*args)
    assert r.code == 2, (r.code, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expect in lines[0], r.err
    assert "Traceback" not in r.err
    assert not (tmp_path / "x.nc").exists()


def test_not_a_fit_file(tmp_path):
    p = _bad(tmp_path, "junk.nc", b"\x00\x01 not netcdf")
    r = run_cli("summary", p, "--json")
    assert r.code == 2 and "not a netCDF fit file" in r.err and "Traceback" not in r.err
    r = run_cli("summary", tmp_path / "absent.nc")
    assert r.code == 2 and "no such file" in r.err


def test_console_script_subprocess(fit_file):
    # the installed entry point, as a user runs it: JSON alone on stdout
    exe = ROOT / ".venv" / "bin" / "scalinfer"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "scalinfer.cli"]
    out = subprocess.run(cmd + ["predict", str(fit_file), "--N", "1e9", "--D", "1e10", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "loss" in json.loads(out.stdout)


@pytest.mark.parametrize("command, listed", [("fit", "gemstones"), ("plot", "trace"), ("schedule", "cosine")])
def test_help_lists_the_choices(command, listed):
    r = run_cli(command, "--help")
    assert r.code == 0 and listed in r.out, r.out
