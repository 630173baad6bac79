"""Fuzz the command line: 2,000+ invocations of `scalinfer` with drawn flags, every outcome classified.

Each invocation is built for one command (fit, simulate, summary, predict, plot, schedule, compare,
recommend, plan, sweep, train, or none) from that command's flags, each flag given a plausible value or,
with some probability, a hostile one: zero, negative, NaN, infinite, huge or tiny numbers, lists and ranges
where one number is expected, text, JSON that is not an object or names no parameter, empty strings, unknown
flags, a required argument dropped. Output paths are drawn from a pool that holds a new file, an existing
file (with or without ``--force``), an input of the same command, a folder, a fifo, ``/dev/full``,
``/dev/null``, ``/proc/x.nc`` and paths under missing folders. Nothing is run that fits with NUTS or trains:
``fit`` always gets ``--method map`` (or a method the model refuses), ``train`` gets ``--dry-run`` unless its
output is unusable, ``sweep`` lists, merges, or is given a sweep file it cannot run.

Each runs in this process (``scalinfer.cli.main``, as tests/conftest.py's ``run_cli``) in a scratch folder,
with a 120 s alarm. An outcome is:

- ``ok`` (exit 0) or ``error`` (exit 2 with exactly one line ``error: ...`` on stderr, the last; the command's
  progress, such as the report of the table it read, may precede it) or ``other`` (another exit code a command documents: 1 for a
  sweep with unfinished runs);
- ``traceback``: an exception escaped `main`, or "Traceback" was printed;
- ``multi_line``: exit 2 with more than one error line, or argparse's usage block;
- ``side_effect``: a file outside the output paths named on the command line changed, appeared or vanished
  in the scratch folder, ``/dev/full`` is not the same device any more, or a folder above the output
  (``/nonexistent_dir_scalinfer_fuzz``) was created;
- ``hang``: the alarm fired.

The scratch folder is restored after each invocation that wrote an output. Prints a table per command, the
first failures, then, as the last line, one JSON object (``invocations``, ``ok``, ``errors``, ``other``,
``tracebacks``, ``multi_line``, ``side_effects``, ``hangs``, ``seconds``, ``seed``).

Usage: ``python benchmarks/fuzz_cli.py [--invocations 2000] [--seed 0]``
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import random
import shutil
import signal
import stat
import sys
import tempfile
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "data" / "simulated_chinchilla.csv"
OUTSIDE = Path("/nonexistent_dir_scalinfer_fuzz")

MODELS = ("chinchilla", "surface", "classic", "batch-openai", "batch-wsd", "batch-floor")
NUMBERS = ("0", "-5", "-1", "nan", "inf", "-inf", "1e30", "1e-30", "", "abc", "1,2", "1e9:1e11:3", "-7e9", "1.5",
           "99999999999999999999", "0x10", "1e9,", ",", "1e8:1e6:2", "1e8:1e9:0", "4")
TEXTS = ("", "x", "null", "{}", "[1]", '{"nope": 1}', "--json", "ümlaut", "a b", "\x00")


class Alarm(Exception):
    pass


def _on_alarm(signum, frame):
    raise Alarm


# ---- the scratch folder ----------------------------------------------------------------------------------------
def make_workspace(ws: Path) -> None:
    """runs.csv (the bundled table), fit.nc (its MAP fit), existing.nc (a copy), notes.txt, sweep.toml (a valid
    sweep file, only ever listed), broken.toml, a folder and a fifo."""
    from scalinfer.cli import main

    ws.mkdir()
    shutil.copy(TABLE, ws / "runs.csv")
    with redirect_stderr(io.StringIO()):
        code = main(["fit", str(ws / "runs.csv"), "--model", "chinchilla", "--method", "map", "-o", str(ws / "fit.nc")])
    assert code == 0, "the MAP fit of the bundled table failed"
    shutil.copy(ws / "fit.nc", ws / "existing.nc")
    (ws / "notes.txt").write_text("a file that is not a table\n")
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        main(["plan", "--size", "d32l2h2", "--target-N", "1e6", "--target-D", "1e7", "--lrs", "2", "--decays", "1",
              "--tokens", "16384", "-o", str(ws / "sweep.toml")])
    (ws / "broken.toml").write_text("[[run]]\nname = 'a'\nbatch_tokens = 100\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "kept.txt").write_text("kept\n")
    os.mkfifo(ws / "pipe")


def snapshot(ws: Path) -> dict[str, tuple]:
    out = {}
    for p in [ws, *ws.rglob("*")]:
        st = os.lstat(p)
        kind = stat.S_IFMT(st.st_mode)
        out[str(p)] = (kind, stat.S_IMODE(st.st_mode)) + (() if kind == stat.S_IFDIR else (st.st_size, st.st_mtime_ns))
    dev = Path("/dev/full")
    if dev.exists():
        st = os.stat(dev)
        out["/dev/full"] = (st.st_mode, st.st_rdev, st.st_ino)
    out[str(OUTSIDE)] = OUTSIDE.exists()
    return out


def restore(ws: Path, pristine: Path) -> None:
    """Put the scratch folder back as `pristine` holds it (outputs written by an invocation removed)."""
    for p in sorted(ws.rglob("*"), key=lambda q: -len(q.parts)):
        rel = p.relative_to(ws)
        if not (pristine / rel).exists() and not (pristine / rel).is_symlink() and rel.name != "pipe":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for p in pristine.rglob("*"):
        rel = p.relative_to(pristine)
        dest = ws / rel
        if p.is_dir():
            dest.mkdir(exist_ok=True)
        elif not dest.exists() or dest.read_bytes() != p.read_bytes() or dest.stat().st_mode != p.stat().st_mode:
            if dest.exists() and dest.is_dir():
                shutil.rmtree(dest)
            shutil.copy2(p, dest)


# ---- drawing invocations ---------------------------------------------------------------------------------------
def _pick(rnd: random.Random, good, bad, p: float):
    """`good` (one value or a list to choose from), or with probability `p` a value from `bad`."""
    if rnd.random() < p:
        return rnd.choice(bad)
    return rnd.choice(good) if isinstance(good, list) else good


def _num(rnd: random.Random, good: str, p: float) -> str:
    return _pick(rnd, good, NUMBERS, p)


def _out(rnd: random.Random, suffix: str, p: float, inputs: tuple[str, ...] = ()) -> str:
    bad = ["existing.nc", "notes.txt", "sub", "pipe", "/dev/full", "/dev/null", "/proc/x.nc", f"{OUTSIDE}/x{suffix}",
           f"missing/x{suffix}", f"missing/deeper/x{suffix}", "", "-", "sub/", "./runs.csv", *inputs]
    return _pick(rnd, [f"new{suffix}", f"sub/new{suffix}"], bad, p)


def _out_dir(rnd: random.Random, p: float) -> str:
    return _pick(rnd, ["newdir", "sub"], ["notes.txt", "missing/deeper", f"{OUTSIDE}/d", "/proc/d", "pipe", ""], p)


def draw(rnd: random.Random) -> tuple[str, list[str], list[str]]:
    """(command, argv, output paths it may write: files, or folders whose whole tree it may write). A third of
    the invocations are meant to succeed; in the others each value is hostile with probability 0.3."""
    cmd = rnd.choices(["fit", "simulate", "summary", "predict", "plot", "schedule", "compare", "recommend", "plan",
                       "sweep", "train", "top"],
                      weights=[4, 3, 1, 4, 2, 2, 1, 1, 2, 2, 2, 1])[0]
    p = 0.0 if rnd.random() < 1 / 3 else 0.3
    argv: list[str] = [cmd]
    outs: list[str] = []
    force = ["--force"] if rnd.random() < 0.4 else []
    if cmd == "fit":
        runs = _pick(rnd, "runs.csv", ["notes.txt", "sub", "missing.csv", "fit.nc", "broken.toml"], p)
        model = _pick(rnd, "chinchilla", [*MODELS, "", "nope", "CHINCHILLA"], p)
        method = _pick(rnd, "map", ["bootstrap", "tempering", "", "nuts"], p)
        if method == "nuts":  # never sample: the model refuses it, or the flags do
            model = "classic"
        o = _out(rnd, ".nc", p, (runs,))
        argv += [runs, "--model", model, "--method", method, "-o", o, *force]
        for flag, good in (("--chains", "2"), ("--samples", "10"), ("--max-samples", "20"), ("--warmup", "10"),
                           ("--seed", "1")):
            if rnd.random() < 0.5:
                argv += [flag, _num(rnd, good, p)]
        if rnd.random() < 0.2:
            argv += ["--where", _pick(rnd, ["N > 1e8", "D == D"], ["N >", "nope > 1", "", "loss < 0"], p)]
        if rnd.random() < 0.2:
            argv += ["--format", _pick(rnd, "csv", ["gemstones", "nope", "jsonl", ""], p)]
        if rnd.random() < 0.1:
            argv += [rnd.choice(["--size-scatter", "--no-size-scatter"])]
        outs = [o]
    elif cmd == "simulate":
        o = _out(rnd, ".csv", p)
        argv += [_pick(rnd, list(MODELS), ["nope", ""], p), "-o", o, *force]
        if rnd.random() < 0.5:
            argv += ["--params", _pick(rnd, '{"alpha": 0.3}', [*TEXTS, '{"alpha": -1}', '{"E": "x"}'], p)]
        if rnd.random() < 0.3:
            argv += ["--seed", _num(rnd, "3", p)]
        outs = [o, f"{o}.manifest.json"]
    elif cmd in ("summary", "predict", "plot", "schedule", "recommend"):
        fit = _pick(rnd, "fit.nc", ["notes.txt", "sub", "missing.nc", "runs.csv", ""], p)
        argv += [fit]
        if cmd == "summary":
            argv += ["--json"] if rnd.random() < 0.5 else []
        elif cmd == "predict":
            for flag, good in (("--N", "1e10"), ("--D", "2e11"), ("--C", "1e22"), ("--lr", "1e-3"),
                               ("--batch", "1e6"), ("--target-loss", "2.5"), ("--ci", "0.9")):
                if rnd.random() < (0.9 if flag in ("--N", "--D") else 0.1 + p / 3):
                    argv += [flag, _num(rnd, good, p)]
            argv += [f for f in ("--grid", "--json") if rnd.random() < 0.3]
            if rnd.random() < 0.1:
                argv = ["predict", "--baseline", _pick(rnd, ["steplaw", "deepseek", "zhou2026"], ["nope"], p),
                        "--N", _num(rnd, "1e9", p), "--D", _num(rnd, "2e10", p)]
        elif cmd == "plot":
            o = _out(rnd, ".png", p, (fit,))
            kind = _pick(rnd, ["trace", "rank", "chinchilla-ppc", "loss-vs-N", "loss-vs-D"], ["lr-valley", "nope"], p)
            argv += [kind, "-o", o, *force]
            outs = [o]
        elif cmd == "schedule":  # a chinchilla fit: schedule refuses it, after checking its outputs
            argv += ["--N", _num(rnd, "1e9", p), "--D", _num(rnd, "2e10", p)]
            if rnd.random() < 0.5:
                o = _out(rnd, ".json", p, (fit,))
                argv += ["-o", o]
                outs.append(o)
            if rnd.random() < 0.3:
                o = _out(rnd, ".png", p, (fit,))
                argv += ["--plot", o]
                outs.append(o)
            for flag, good in (("--max-batch", "1e6"), ("--every", "1e8"), ("--multiple-of", "128"),
                               ("--decay-fraction", "0.2")):
                if rnd.random() < 0.2:
                    argv += [flag, _num(rnd, good, p)]
            argv += force
        else:  # recommend: surface fits only
            argv += ["--N", _num(rnd, "1e9", p), "--D", _num(rnd, "2e10", p)]
            for flag, good in (("--excess", "0.005"), ("--prob", "0.9"), ("--lr", "1e-3"), ("--batch", "1e6")):
                if rnd.random() < 0.2:
                    argv += [flag, _num(rnd, good, p)]
    elif cmd == "compare":
        argv += [_pick(rnd, ["fit.nc", "existing.nc"], ["notes.txt", "sub", "missing.nc"], p)
                 for _ in range(rnd.randint(1, 3))]
        argv += ["--json"] if rnd.random() < 0.3 else []
    elif cmd == "plan":
        argv += ["--size", _pick(rnd, ["d32l2h2", "cal-xs", "2e5"], ["nope", "0", "d0l0"], p),
                 "--target-N", _num(rnd, "1e7", p), "--target-D", _num(rnd, "2e8", p)]
        for flag, good in (("--lrs", "3"), ("--decays", "2"), ("--batch-count", "2"), ("--tokens", "131072"),
                           ("--lr-factor", "2"), ("--budget", "1e15"), ("--batches", "512,1024")):
            if rnd.random() < 0.25:
                argv += [flag, _num(rnd, good, p)]
        if rnd.random() < 0.2:
            argv += ["--prior", _pick(rnd, ["steplaw", "deepseek"], ["fit.nc", "notes.txt", "nope"], p)]
        if rnd.random() < 0.6:
            o = _out(rnd, ".toml", p, ("fit.nc",))
            argv += ["-o", o, *force]
            outs = [o]
        argv += ["--json"] if rnd.random() < 0.3 else []
    elif cmd == "sweep":
        mode = rnd.choice(["list", "merge", "bad"])
        if mode == "list":
            argv += [_pick(rnd, "sweep.toml", ["broken.toml", "notes.txt", "missing.toml"], p), "--list"]
            if rnd.random() < 0.5:
                argv += ["--out", _out_dir(rnd, p)]
        elif mode == "merge":
            argv += ["--merge", rnd.choice(["sub", "newdir", "notes.txt", "missing", ""])]
            if rnd.random() < 0.5:
                d = _out_dir(rnd, p)
                argv += ["--export", d]
                outs = [d]
        else:  # a sweep file it cannot run: nothing is trained
            d = _out_dir(rnd, p)
            argv += [rnd.choice(["broken.toml", "notes.txt", "missing.toml", "fit.nc"]), "--out", d]
            argv += ["--workers", _num(rnd, "1", p)] if rnd.random() < 0.3 else []
            outs = [d]
    elif cmd == "train":
        d = _out_dir(rnd, p)
        good = ["optimizer.lr=1e-3", "decay_points=[0.5]", "model.d_model=64"]
        bad = ["optimizer.lr=-1", "model.d_model=0", "nope=1", "total_tokens=x", "=", "model.n_layers=nan"]
        overrides = [_pick(rnd, good, bad, p) for _ in range(rnd.randint(0, 3))]
        argv += [*overrides, "--out", d, "--preset", _pick(rnd, "tiny", ["nope", ""], p)]
        if d in ("newdir", "sub") or rnd.random() < 0.5:  # a usable folder: a dry run only
            argv += ["--dry-run"]
        if rnd.random() < 0.2:
            argv += ["--config", rnd.choice(["notes.txt", "missing.toml", "sweep.toml"])]
        outs = [d]
    else:
        argv = rnd.choice([[], ["--help"], ["--version"], ["nope"], ["fit"], ["--verbose"], ["-o", "x"],
                           ["fit", "--help"], ["plot", "--help"]])
    if p:  # mutations across commands: an unknown flag, a dropped argument, a duplicated one
        r = rnd.random()
        if r < 0.1:
            argv.append(rnd.choice(["--nope", "--force=yes", "-x", "--json=1"]))
        elif r < 0.2 and len(argv) > 2:
            del argv[rnd.randrange(1, len(argv))]
        elif r < 0.26 and len(argv) > 2:
            argv.append(rnd.choice(argv[1:]))
    # a mutation must not make it train: a sweep that lists still lists, a train run stays a dry run
    if cmd == "sweep" and "--merge" not in argv and "--list" not in argv and any(
            a in argv for a in ("sweep.toml", "newdir", "sub")):
        argv.append("--list")
    if cmd == "train" and "--dry-run" not in argv and ("newdir" in argv or "sub" in argv):
        argv.append("--dry-run")
    return cmd, argv, outs


# ---- running one ----------------------------------------------------------------------------------------------
def run(argv: list[str]) -> tuple[int | None, str, str, str | None]:
    """(exit code, stdout, stderr, the escaped exception's traceback or "hang")."""
    from scalinfer.cli import main

    out, err = io.StringIO(), io.StringIO()
    escaped = None
    code = None
    signal.alarm(120)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Alarm:
        escaped = "hang"
    except BaseException:  # noqa: BLE001 - what the fuzzer is here to find
        escaped = traceback.format_exc()
    finally:
        signal.alarm(0)
    return code, out.getvalue(), err.getvalue(), escaped


def _allowed(ws: Path, outs: list[str]) -> list[Path]:
    paths = []
    for o in outs:
        if o:
            p = Path(o) if Path(o).is_absolute() else ws / o
            paths.append(Path(os.path.normpath(p)))
    return paths


def classify(code, out: str, err: str, escaped, changed: list[str], allowed: list[Path]) -> str:
    if escaped == "hang":
        return "hang"
    if escaped is not None or "Traceback" in err or "Traceback" in out:
        return "traceback"
    outside = [c for c in changed if not any(Path(c) == a or a in Path(c).parents for a in allowed)]
    if outside:
        return "side_effect"
    if code == 0:
        return "ok"
    if code == 2:  # one error line, the last; what came before it is the command's progress (the table read)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("error:")]
        if len(errors) == 1 and lines[-1] == errors[0] and "usage:" not in err and "Traceback" not in err:
            return "error"
        return "multi_line"
    if code in (1, 130):
        return "other"
    return "multi_line" if code is None else "other"


def run_fuzz(invocations: int, seed: int, ws: Path, pristine: Path):
    rnd = random.Random(seed)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures: list[str] = []
    before = snapshot(ws)
    for i in range(invocations):
        cmd, argv, outs = draw(rnd)
        code, out, err, escaped = run(argv)
        after = snapshot(ws)
        changed = [k for k in set(before) | set(after) if before.get(k) != after.get(k)]
        status = classify(code, out, err, escaped, changed, _allowed(ws, outs))
        counts[cmd][status] += 1
        if status not in ("ok", "error", "other") and len(failures) < 20:
            detail = (escaped or err).strip().splitlines()[-1:] if status != "side_effect" else sorted(changed)
            failures.append(f"{status} #{i}: scalinfer {' '.join(map(repr, argv))}: {detail}")
        if (i + 1) % 250 == 0:
            print(f"[fuzz_cli] {i + 1} of {invocations}", file=sys.stderr, flush=True)
        if changed:
            restore(ws, pristine)
            if OUTSIDE.exists():  # never ours to keep
                shutil.rmtree(OUTSIDE, ignore_errors=True)
            before = snapshot(ws)
    return counts, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=2000, help="number of invocations (>= 2,000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    signal.signal(signal.SIGALRM, _on_alarm)
    with tempfile.TemporaryDirectory(prefix="scalinfer-fuzz-cli-") as tmp:
        tmp = Path(tmp)
        os.environ["SCALINFER_CACHE"] = str(tmp / "cache")  # compiled programs away from the user's cache
        import scalinfer.runtime

        scalinfer.runtime.configure(2)
        ws, pristine = tmp / "ws", tmp / "pristine"
        make_workspace(ws)
        shutil.copytree(ws, pristine, ignore=shutil.ignore_patterns("pipe"))
        cwd = os.getcwd()
        os.chdir(ws)
        try:
            counts, failures = run_fuzz(args.invocations, args.seed, ws, pristine)
        finally:
            os.chdir(cwd)
    seconds = time.perf_counter() - start

    cols = ("ok", "error", "other", "traceback", "multi_line", "side_effect", "hang")
    header = f"{'command':<12}{'runs':>6}" + "".join(f"{c:>13}" for c in cols)
    print(header)
    print("-" * len(header))
    totals = collections.Counter()
    for cmd in sorted(counts):
        c = counts[cmd]
        totals.update(c)
        print(f"{cmd:<12}{sum(c.values()):>6}" + "".join(f"{c[k]:>13}" for k in cols))
    print("-" * len(header))
    n = sum(totals.values())
    print(f"{'total':<12}{n:>6}" + "".join(f"{totals[k]:>13}" for k in cols))
    print(f"({seconds:.1f} s, {1000 * seconds / max(n, 1):.0f} ms per invocation)")
    for line in failures:
        print(line)
    print(json.dumps({"invocations": n, "ok": totals["ok"], "errors": totals["error"], "other": totals["other"],
                      "tracebacks": totals["traceback"], "multi_line": totals["multi_line"],
                      "side_effects": totals["side_effect"], "hangs": totals["hang"], "seconds": round(seconds, 1),
                      "seed": args.seed}))
    bad = totals["traceback"] + totals["multi_line"] + totals["side_effect"] + totals["hang"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
