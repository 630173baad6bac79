"""The README's examples run as written.

The code is read from README.md itself, not copied here: the ```python block(s) under "## In Python" run as a
fresh module (in this process), and each line of the ```bash block(s) under "## On the command line" runs through the
in-process CLI (`run_cli`). Both run in a scratch folder that mirrors the repository root (its folders linked,
and ``../shared`` beside it), so the README's relative paths resolve as they do at the root while whatever the
examples write (``chin.nc``) lands in the scratch folder, not in the repository. Other blocks (the setup and the
calibration sweep) are not run here.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path

import pytest

from conftest import DATASETS, ROOT, run_cli

README = ROOT / "README.md"
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def readme_blocks(text: str) -> list[tuple[str, str, str]]:
    """(heading, language, code) of each fenced code block, in order; heading: the last ATX heading above it.

    CommonMark fences: three or more backticks or tildes (indented at most 3 spaces), closed by a fence of the
    same character at least as long; headings inside a block are code, not headings.
    """
    blocks, heading, fence, lang, body = [], "", None, "", []
    for line in text.splitlines():
        if fence is None:
            m = _FENCE.match(line)
            if m:
                fence, lang, body = m.group(1), m.group(2).lower(), []
                continue
            h = _HEADING.match(line)
            if h:
                heading = h.group(2)
        elif re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", line):
            blocks.append((heading, lang, "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line)
    assert fence is None, f"{README.name}: a code block opened with {fence} is never closed"
    return blocks


def section_code(heading: str, lang: str) -> list[str]:
    blocks = [code for h, l, code in readme_blocks(README.read_text(encoding="utf-8")) if h == heading and l == lang]
    assert blocks, f"{README.name} has no ```{lang} block under '## {heading}'"
    return blocks


def commands(script: str) -> list[list[str]]:
    """The shell lines of a bash block as argument lists (comments dropped, backslash continuations joined)."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        args = shlex.split(line, comments=True)
        if args:
            out.append(args)
    return out


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch repository root: links to the root's folders (not the package, which is imported as installed)
    and ``../shared`` beside it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for entry in ROOT.iterdir():
        if entry.is_dir() and not entry.name.startswith(".") and not (entry / "__init__.py").exists():
            (repo / entry.name).symlink_to(entry, target_is_directory=True)
    if DATASETS.parent.exists():
        (tmp_path / DATASETS.parent.name).symlink_to(DATASETS.parent, target_is_directory=True)
    return repo


def test_readme_blocks_are_found():
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    assert ("In Python", "python") in [(h, l) for h, l, _ in blocks]
    assert ("On the command line", "bash") in [(h, l) for h, l, _ in blocks]
    # a fence inside a block is text, and the heading of a block is the nearest one above it
    text = "## A\n````md\n```python\nx\n```\n## not a heading\n````\n## B\n~~~python\ny = 1\n~~~\n"
    assert readme_blocks(text) == [("A", "md", "```python\nx\n```\n## not a heading\n"), ("B", "python", "y = 1\n")]


@pytest.mark.slow
def test_python_example_runs(workdir: Path, monkeypatch, capsys):
    # in this process, as a fresh module run from the root: the fits share JAX's compiled programs with the
    # command-line example below (a separate interpreter would compile everything again)
    code = "\n".join(section_code("In Python", "python"))
    monkeypatch.chdir(workdir)
    exec(compile(code, f"{README.name} (## In Python)", "exec"), {"__name__": "__main__"})
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert printed, "the README's Python example printed nothing"
    for line in printed:  # what it prints (a summary row, a prediction) are plain Python literals
        ast.literal_eval(line)


@pytest.mark.slow
def test_command_line_example_runs(workdir: Path, monkeypatch):
    lines = [args for block in section_code("On the command line", "bash") for args in commands(block)]
    if any("../shared/datasets" in a for args in lines for a in args) and not DATASETS.exists():
        pytest.skip("the README's commands read published datasets that are not on this machine")
    monkeypatch.chdir(workdir)
    for args in lines:
        assert args[0] == "scalinfer", f"not a scalinfer command: {shlex.join(args)}"
        r = run_cli(*args[1:])
        assert r.code == 0, f"`{shlex.join(args)}` exited {r.code}:\n{r.err[-3000:]}"
        if "--json" in args:  # the JSON alone on stdout
            assert isinstance(json.loads(r.out), dict), r.out[:500]
        for flag in ("-o", "--output"):
            if flag in args:
                out = workdir / args[args.index(flag) + 1]
                assert out.is_file() and out.stat().st_size > 0, f"`{shlex.join(args)}` wrote no {out.name}"
