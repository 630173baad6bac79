"""Summarize the muTransfer study: data/transfer/summary.csv (every finished run) and, with ``--fit``, each
(axis, arm)'s fitted optima: fits/<axis>_<arm>.nc and optima.csv.

summary.csv, one row per finished run: axis (width, depth), arm (sp, mup), shape (``d32l2h2`` ...), N (N_total),
d_model, n_layers, k (lr = the axis's proxy optimum x 2^k, make_sweep.LR_PROXY), lr, loss (held-out nats per
byte token), diverged, wall_s, run_id.

``--fit``: each (axis, arm)'s runs (three shapes, one batch, one D) fitted with the ``surface`` model: its
``fixed_batch`` design (an LR valley per shape at the table's batch, answering ``lr_opt_at_batch``), one setting
per shape, the population prior, size scatter off (each shape is one setting, so a size's level and the
setting's scatter would be the same thing twice), runs above 1.3x their shape's best censored
(``divergence_ratio``). NUTS 4 x (2,000 + 1,000) at target acceptance 0.95: data/module_lr/fit_valleys.py's
settings (it says why NUTS: MAP/Laplace fails on a valley of a few points, and short fixed-batch chains do not
converge) with chains twice as long, because at 4 x (1,000 + 500) the width-SP fit had R-hat 1.08 on
``sigma0`` (the optima moved by less than 0.02 in drift between the two). Each shape's optimum is its setting's x*_s, the LR valley's centre
(`scalinfer.models.surface.setting_values`; at the table's batch the ridge passes through it), per posterior
draw; optima.csv has per (axis, arm, shape) the best LR on the grid, the fitted optimum's median and 90%
interval, and the drift, optimum(shape) / optimum(proxy), per draw (median, 90% interval, and P(drift < 1),
empty for the proxy), the largest shape's being the answer: 1 where the proxy's LR transfers.

    python data/transfer/summarize.py            # summary.csv (data/sync.sh runs this)
    PYTHONPATH=. nice -n 10 .venv/bin/python data/transfer/summarize.py --fit
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

from scalinfer.sweep.store import finished_runs, write_summary

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_sweep import AXES, LR_PROXY  # noqa: E402  (the study's one list of shapes and proxy LRs)

SETTINGS = dict(chains=4, warmup=2000, samples=1000, target_accept=0.95, seed=0, size_scatter=False)
CI = 0.9


def summary_rows() -> list[dict]:
    rows = []
    for run, rec in finished_runs(HERE):
        axis, shape, arm = run["name"].split("-")[:3]
        rows.append({"axis": axis, "arm": arm, "shape": shape, "N": rec["N"], "d_model": rec["d_model"],
                     "n_layers": rec["n_layers"], "k": round(float(np.log2(rec["lr"] / LR_PROXY[axis]))),
                     "lr": rec["lr"], "loss": rec["loss"], "diverged": rec["diverged"], "wall_s": run["wall_s"],
                     "run_id": run["run_id"]})
    order = {axis: [s[0] for s in shapes] for axis, shapes in AXES.items()}
    rows.sort(key=lambda r: (list(AXES).index(r["axis"]), r["arm"] == "mup", order[r["axis"]].index(r["shape"]),
                             r["lr"]))
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    print(f"wrote {write_summary(path.parent, rows, path.name)}: {len(rows)} rows")


def setting_optima(fit) -> dict[float, np.ndarray]:
    """Per fitted setting's N: the draws of its optimal LR at the table's batch, exp(m_lr + x*_s)."""
    from scalinfer.models.surface import setting_values
    from scalinfer.models.surface.design import design_of, fill_left_out

    c, cd = fit.constants, fit.tree["constant_data"]
    n_s, d_s = np.asarray(cd["n_s"]), np.asarray(cd["d_s"])
    p = {k: (np.asarray(v)[:, None] if np.ndim(v) == 1 else np.asarray(v)) for k, v in fit.draws().items()}
    n = len(next(iter(p.values())))  # the fixed-batch design's left-out batch sites at their values there
    p = fill_left_out(p, design_of(c), np.zeros((n, 1)), np.zeros((n, len(n_s))), np.zeros((n, 0)))
    x_star = np.asarray(setting_values(p, n_s, d_s)["x_star"])
    N_s = np.round(np.exp(c["m_N"] + c["h_N"] * n_s))
    return {float(N): np.exp(c["m_lr"] + x_star[:, s]) for s, N in enumerate(N_s)}


def fit_all(rows: list[dict]) -> None:
    import pandas as pd

    import scalinfer
    import scalinfer.runtime

    scalinfer.runtime.configure(n_devices=SETTINGS["chains"])
    runs = pd.read_json(HERE / "runs.jsonl", lines=True)
    runs["axis"], runs["shape"], runs["arm"] = zip(*(n.split("-")[:3] for n in runs["name"]))
    (HERE / "fits").mkdir(exist_ok=True)
    out = []
    for axis, shapes in AXES.items():
        for arm in ("sp", "mup"):
            df = runs[(runs["axis"] == axis) & (runs["arm"] == arm)].reset_index(drop=True)
            path = HERE / "fits" / f"{axis}_{arm}.nc"
            if df.groupby("shape")["lr"].nunique().min() < 3 or df["shape"].nunique() < len(shapes):
                print(f"{axis} {arm}: {len(df)} runs landed: a shape has fewer than three LRs, not fitted")
                path.unlink(missing_ok=True)
                continue
            t0 = time.perf_counter()
            fit = scalinfer.fit(scalinfer.load_runs(df.drop(columns=["axis", "shape", "arm"])), model="surface",
                                **SETTINGS)
            fit.save(path)
            print(f"{axis} {arm}: {fit} ({len(df)} runs) in {time.perf_counter() - t0:.0f} s; settings {SETTINGS}")
            for w in fit.warnings():
                print(f"  warning: {w}")
            opt = setting_optima(fit)
            proxy = shapes[0][0]
            N_of = df.groupby("shape")["N"].first()
            lr_proxy = opt[float(N_of[proxy])]
            for shape, *_ in shapes:
                mine = df[(df["shape"] == shape) & ~df["diverged"]]
                lr = opt[float(N_of[shape])]
                q = np.quantile(lr, [(1 - CI) / 2, 0.5, (1 + CI) / 2])
                r = np.quantile(lr / lr_proxy, [(1 - CI) / 2, 0.5, (1 + CI) / 2])
                out.append({"axis": axis, "arm": arm, "shape": shape, "N": int(N_of[shape]),
                            "best_lr_grid": mine.loc[mine["loss"].idxmin(), "lr"], "best_loss": mine["loss"].min(),
                            "lr_opt": q[1], "lr_opt_lo": q[0], "lr_opt_hi": q[2],
                            "drift": r[1], "drift_lo": r[0], "drift_hi": r[2],
                            "p_drift_below_1": float(np.mean(lr < lr_proxy)) if shape != proxy else None})
    write_csv(HERE / "optima.csv", out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="also fit each (axis, arm) and write optima.csv")
    args = ap.parse_args()
    rows = summary_rows()
    write_csv(HERE / "summary.csv", rows)
    if args.fit:
        fit_all(rows)


if __name__ == "__main__":
    main()
