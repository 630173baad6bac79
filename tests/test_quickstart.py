"""`scalinfer quickstart` (#25): its output explains itself (what was fitted, whether it converged, the answer
with units and definitions, what to run next), its JSON is alone on stdout, and the next commands it prints
are commands the CLI takes. The fit is by MAP here: the NUTS settings are measured in benchmarks/README.md
("quickstart"), not re-run by the suite. Still slow-marked: the surface model's MAP and its prediction on the
448-row table cost ~26 CPU s with compilation (100-260 s wall at load 11-14 on 2 cores)."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path

import pytest

import scalinfer.quickstart
from scalinfer.cli import build_parser
from scalinfer.quickstart import _text, quickstart


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def answer():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert quickstart(json_output=True, method="map") == 0
    return json.loads(out.getvalue())  # the JSON alone on stdout: this fails on anything else there


def test_the_text_says_what_was_fitted_and_what_the_answer_means(answer):
    text = _text(answer, n_draws=1)
    for section in ("DATA", "MODEL", "FIT", "QUESTION", "ANSWER", "NEXT"):
        assert f"\n{section} " in text, section
    assert "112 training runs" in text and "448 rows" in text  # runs, not rows counted as runs
    assert "measured" in text and "docs/models.md" in text
    for unit in ("peak learning rate", "tokens/step", "nats/token"):  # every number with its unit
        assert unit in text, unit
    assert "the largest in the data" in text  # the extrapolation in words, not 'N_ratio'
    assert "fitted_size" not in text and "N_ratio" not in text


def test_the_next_commands_are_commands_the_cli_takes(answer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart.nc").touch()  # the fit file the first command writes (the parser checks it exists)
    (tmp_path / "data").symlink_to(Path(scalinfer.quickstart.data_dir()))
    parser = build_parser()
    assert len(answer["next"]) >= 4
    for command in answer["next"]:
        argv = shlex.split(command)
        assert argv[0] == "scalinfer"
        args = parser.parse_args(argv[1:])  # exits (SystemExit) on a flag or choice it does not take
        assert args.func is not None


def test_the_suggested_fit_command_runs_the_quickstarts_nuts_settings(answer, monkeypatch):
    """The first next command redoes the quickstart's fit draw for draw: parsed by the CLI, its chains, warmup,
    draws and seed are the quickstart's (the manifest's, which the command passes where they are not the CLI's
    defaults)."""
    monkeypatch.chdir(scalinfer.quickstart.data_dir().parent)  # the command's table path is the checkout's
    args = build_parser().parse_args(shlex.split(answer["next"][0])[1:])
    q = scalinfer.quickstart._manifest()["quickstart"]
    assert (args.chains, args.warmup, args.samples, args.seed) == (answer["chains"], answer["warmup"],
                                                                    q.get("samples"), q["seed"])
    assert args.samples is None  # the fit's default draws: 1,000 per chain, more while not converged
