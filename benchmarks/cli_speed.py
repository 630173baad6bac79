"""How fast the command line answers: ``scalinfer --help``, ``summary FIT --json`` and ``predict FIT --json``.

Each command runs in a fresh process (the console script beside this interpreter, else
``python -m scalinfer.cli``) ``--repeats`` times (default 5); the table gives the median, fastest and slowest
wall time against the limit, and the packages that took longest to import in one more run under
``-X importtime`` (what is left to cut). Without ``--fit`` a fit file is made first: the surface model on the
bundled calibration runs by MAP (a NUTS or Laplace fit's ``predict`` also computes the answer's prior sensitivity,
importing arviz_stats).

    .venv/bin/python benchmarks/cli_speed.py [--fit FIT.nc --N 1e7 --D 2e8] [--repeats 5]

The last line is one JSON object: ``{"help_s", "summary_s", "predict_s", "limits", "imports"}``. On a busy
machine the times grow with the load; compare them with the limits on an idle one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMITS = {"help_s": 0.5, "summary_s": 1.5, "predict_s": 1.5}


def _command() -> list[str]:
    script = Path(sys.executable).with_name("scalinfer")
    return [str(script)] if script.exists() else [sys.executable, "-m", "scalinfer.cli"]


def _run(argv: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(_command() + argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"scalinfer {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall


def _slowest_imports(argv: list[str], top: int = 6) -> dict[str, float]:
    """The packages that took longest to import in one run of ``scalinfer ARGV``: seconds from the start to
    the end of each top-level package's import, wherever it was first imported (a package's time includes
    the packages it imports: numpyro's includes jax's)."""
    code = f"import sys; from scalinfer.cli import main; sys.exit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True)
    cumulative: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = line.split("|")
        name = name.strip()
        if cum.strip().isdigit() and "." not in name and not name.startswith("_"):
            cumulative[name] = max(cumulative.get(name, 0.0), int(cum) / 1e6)
    return {k: round(v, 3) for k, v in sorted(cumulative.items(), key=lambda kv: -kv[1])[:top]}


def _make_fit(folder: Path) -> Path:
    path = folder / "calibration_map.nc"
    print(f"fitting {path.name} (surface, MAP, data/calibration/runs.jsonl)...", file=sys.stderr)
    _run(["fit", str(ROOT / "data" / "calibration" / "runs.jsonl"), "--model", "surface", "--method", "map",
          "-o", str(path)])
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fit", type=Path, help="a fit file (default: a surface MAP fit of the calibration runs)")
    p.add_argument("--N", default="1e7", help="predict's --N (default 1e7)")
    p.add_argument("--D", default="2e8", help="predict's --D (default 2e8)")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        fit = args.fit or _make_fit(Path(tmp))
        commands = {"help_s": ["--help"], "summary_s": ["summary", str(fit), "--json"],
                    "predict_s": ["predict", str(fit), "--N", args.N, "--D", args.D, "--json"]}
        times = {k: [_run(argv) for _ in range(args.repeats)] for k, argv in commands.items()}
        imports = {k: _slowest_imports(argv) for k, argv in commands.items()}

    print(f"{'command':<10} {'median s':>9} {'min s':>7} {'max s':>7} {'limit s':>8}  ok   slowest imports (s)")
    for k, ts in times.items():
        med = statistics.median(ts)
        slow = ", ".join(f"{name} {s:.2f}" for name, s in imports[k].items())
        print(f"{k[:-2]:<10} {med:9.3f} {min(ts):7.3f} {max(ts):7.3f} {LIMITS[k]:8.2f}  "
              f"{'yes' if med < LIMITS[k] else 'NO ':3s}  {slow}")
    out = {k: round(statistics.median(ts), 3) for k, ts in times.items()}
    print(json.dumps({**out, "limits": LIMITS, "imports": imports}))


if __name__ == "__main__":
    main()
