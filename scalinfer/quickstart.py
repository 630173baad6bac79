"""`scalinfer quickstart`: fit the bundled run table and predict a larger run, end to end.

What is fit and what is asked is read from ``data/manifest.json`` (``quickstart`` entry), so the bundled data
can change (simulated today, the project's own calibration runs later) without touching this code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from scalinfer.errors import ScalinferError

__all__ = ["quickstart", "data_dir"]


def data_dir() -> Path:
    """The repository's ``data/`` folder (an editable install keeps it beside the package)."""
    return Path(__file__).resolve().parent.parent / "data"


def quickstart(json_output: bool = False, quiet: bool = True, samples: int | None = None) -> int:
    from scalinfer.inference import fit
    from scalinfer.runs import load_runs

    manifest_path = data_dir() / "manifest.json"
    if not manifest_path.exists():
        raise ScalinferError(f"{manifest_path}: bundled data manifest not found (is this a source checkout?)")
    manifest = json.loads(manifest_path.read_text())
    q = manifest["quickstart"]
    path = data_dir() / q["runs"]
    runs = load_runs(path, format=q.get("format"), where=q.get("where"))
    label = "simulated" if manifest.get("simulated") else "measured"
    print(f"scalinfer quickstart: {len(runs)} {label} runs from {path.name}; model {q['model']}", file=sys.stderr)
    f = fit(runs, model=q["model"], chains=4, warmup=q.get("warmup", 500), samples=samples or q.get("samples", 500),
            seed=q.get("seed", 0), quiet=quiet)
    out = {"data": str(path), "simulated": bool(manifest.get("simulated")), "model": q["model"],
           "n_runs": len(runs), "fit_seconds": round(f.timings["total_s"], 1), "predictions": []}
    for target in q["targets"]:
        pred = f.predict(**target)
        out["predictions"].append(pred.to_dict())
    if "true_params" in manifest:
        out["true_params"] = manifest["true_params"]
    if json_output:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    s = f.summary()
    print(f"fit: {q['model']} by NUTS on {len(runs)} runs in {out['fit_seconds']} s; "
          f"{f.divergences} divergences; max R-hat {max(v['r_hat'] for v in s.values()):.3f}")
    for p in out["predictions"]:
        t = ", ".join(f"{k}={v:.3g}" for k, v in p["targets"].items())
        ext = ", ".join(f"{k} {v:.3g}" for k, v in p["extrapolation"].items())
        print(f"\nat {t}  (extrapolation: {ext})")
        for k, v in p.items():
            if isinstance(v, dict) and "median" in v:
                print(f"  {k:>12}: {v['median']:.4g}   90% interval [{v['lo']:.4g}, {v['hi']:.4g}]")
        for w in p["warnings"]:
            print(f"  warning: {w}")
    return 0
