"""Summarize the muTransfer study of the remaining axes: data/transfer_axes/summary.csv (every finished run) and,
with ``--fit``, each (axis, arm)'s fitted optima: fits/<axis>_<arm>.nc and optima.csv.

summary.csv, one row per finished run: axis (depth, wd, horizon), arm (completep; fixed, timescale), shape (the
axis value: ``d64l4h4``, ``wd0.4``, ``D328k`` ...), N (N_total), D (tokens), steps, n_layers, k (lr = the proxy's
optimum x 2^k, make_sweep.LR_PROXY), lr, weight_decay (AdamW's lambda in this run: the ``timescale`` arm's is
1 / (lr tau steps)), timescale (1 / (lr lambda steps), the AdamW timescale as a fraction of the run), loss
(held-out nats per byte token), diverged, wall_s, run_id.

``--fit``: each (axis, arm)'s runs (three valleys, one batch) fitted with the ``surface`` model as
data/transfer/summarize.py does: its ``fixed_batch`` design, one setting per shape (the run table's ``group``
is the shape, so that the weight-decay axis's three valleys, at one N and one D, are three settings), the
population prior, size scatter off, runs above 1.3x their shape's best censored, NUTS 4 x (2,000 + 1,000) at
target acceptance 0.95 (data/transfer/summarize.py says why), drawing 1,000 more per chain at a time, up to
4,000, while the draws have not converged (`scalinfer.fit`'s ``max_samples``: at exactly 1,000, three of the
five fits had an R-hat of 1.011-1.018 on ``sigma0`` or ``tau_loss``). A shape's optimum is its setting's valley
centre x*_s per posterior draw. optima.csv, per (axis, arm, shape): the best LR on the grid and its loss, the
loss at the proxy's LR and what it costs over the grid's best, the fitted optimum's median and 90% interval,
the drift optimum(shape) / optimum(proxy) per draw (median, 90% interval, P(drift < 1); 1 where the proxy's
LR transfers), and the drift as an exponent of the axis's multiplier (layers, lambda or tokens over the
proxy's): drift = multiplier^exponent, so that on the horizon axis -exponent is beta_D of eta ~ D^-beta_D.

    python data/transfer_axes/summarize.py            # summary.csv (data/sync.sh runs this)
    PYTHONPATH=. nice -n 10 .venv/bin/python data/transfer_axes/summarize.py --fit [AXIS ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from scalinfer.sweep.store import finished_runs, write_summary

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_sweep import AXES, LR_PROXY  # noqa: E402  (the study's one list of axes and the proxy's LR)

SETTINGS = dict(chains=4, warmup=2000, samples=1000, max_samples=4000, target_accept=0.95, seed=0,
                size_scatter=False)
CI = 0.9
Q = [(1 - CI) / 2, 0.5, (1 + CI) / 2]


def summary_rows() -> list[dict]:
    rows = []
    for run, rec in finished_runs(HERE):
        axis, shape, arm = run["name"].split("-")[:3]
        tau = rec["weight_decay_timescale"]
        lam = rec["weight_decay"] if tau is None else 1.0 / (rec["lr"] * tau * rec["steps"])
        rows.append({"axis": axis, "arm": arm, "shape": shape, "N": rec["N"], "D": rec["D"], "steps": rec["steps"],
                     "n_layers": rec["n_layers"], "k": round(float(np.log2(rec["lr"] / LR_PROXY))),
                     "lr": rec["lr"], "weight_decay": lam, "timescale": 1.0 / (rec["lr"] * lam * rec["steps"]),
                     "loss": rec["loss"], "diverged": rec["diverged"], "wall_s": run["wall_s"],
                     "run_id": run["run_id"]})
    order = {axis: [s[0] for s in spec["shapes"]] for axis, spec in AXES.items()}
    rows.sort(key=lambda r: (list(AXES).index(r["axis"]), AXES[r["axis"]]["arms"].index(r["arm"]),
                             order[r["axis"]].index(r["shape"]), r["lr"]))
    return rows


def multiplier(axis: str, shape: str) -> float:
    """The shape's multiplier along its axis over the proxy's: layers, lambda, or tokens."""
    shapes = {s[0]: s for s in AXES[axis]["shapes"]}
    proxy, here = AXES[axis]["shapes"][0], shapes[shape]
    i = {"depth": 1, "wd": 2, "horizon": 3}[axis]
    return here[i] / proxy[i]


def setting_optima(fit) -> np.ndarray:
    """Draws of each fitted setting's optimal LR at the table's batch, exp(m_lr + x*_s), shape (draws, S)."""
    from scalinfer.models.surface import setting_values
    from scalinfer.models.surface.design import design_of, fill_left_out

    c, cd = fit.constants, fit.tree["constant_data"]
    n_s, d_s = np.asarray(cd["n_s"]), np.asarray(cd["d_s"])
    p = {k: (np.asarray(v)[:, None] if np.ndim(v) == 1 else np.asarray(v)) for k, v in fit.draws().items()}
    n = len(next(iter(p.values())))  # the fixed-batch design's left-out batch sites at their values there
    p = fill_left_out(p, design_of(c), np.zeros((n, 1)), np.zeros((n, len(n_s))), np.zeros((n, 0)))
    return np.exp(c["m_lr"] + np.asarray(setting_values(p, n_s, d_s)["x_star"]))


def fit_all(axes: list[str]) -> None:
    import pandas as pd

    import scalinfer
    import scalinfer.runtime
    from scalinfer.models.surface.data import settings_of

    scalinfer.runtime.configure(n_devices=SETTINGS["chains"])
    runs = pd.read_json(HERE / "runs.jsonl", lines=True)
    runs["axis"], runs["shape"], runs["arm"] = zip(*(n.split("-")[:3] for n in runs["name"]))
    runs["group"] = runs["shape"]  # one setting per shape: the wd axis's valleys share N and D
    (HERE / "fits").mkdir(exist_ok=True)
    old = pd.read_csv(HERE / "optima.csv") if (HERE / "optima.csv").exists() else None
    out = [] if old is None else old[~old["axis"].isin(axes)].to_dict("records")
    for axis in axes:
        shapes = [s[0] for s in AXES[axis]["shapes"]]
        for arm in AXES[axis]["arms"]:
            df = runs[(runs["axis"] == axis) & (runs["arm"] == arm)].reset_index(drop=True)
            path = HERE / "fits" / f"{axis}_{arm}.nc"
            if df["shape"].nunique() < len(shapes) or df.groupby("shape")["lr"].nunique().min() < 3:
                print(f"{axis} {arm}: {len(df)} runs landed: a shape has fewer than three LRs, not fitted")
                path.unlink(missing_ok=True)
                continue
            table = scalinfer.load_runs(df.drop(columns=["axis", "shape", "arm"]))
            t0 = time.perf_counter()
            fit = scalinfer.fit(table, model="surface", **SETTINGS)
            fit.save(path)
            print(f"{axis} {arm}: {fit} ({len(df)} runs) in {time.perf_counter() - t0:.0f} s; settings {SETTINGS}")
            for w in fit.warnings():
                print(f"  warning: {w}")
            _, settings = settings_of(table.df)
            opt = dict(zip(settings["group"].astype(str), setting_optima(fit).T))
            proxy = opt[shapes[0]]
            for shape in shapes:
                mine = df[(df["shape"] == shape) & ~df["diverged"]]
                at_proxy = mine.loc[np.isclose(mine["lr"], LR_PROXY), "loss"]
                q = np.quantile(opt[shape], Q)
                row = {"axis": axis, "arm": arm, "shape": shape, "multiplier": multiplier(axis, shape),
                       "best_lr_grid": mine.loc[mine["loss"].idxmin(), "lr"], "best_loss": mine["loss"].min(),
                       "loss_at_proxy_lr": at_proxy.min() if len(at_proxy) else np.nan,
                       "lr_opt": q[1], "lr_opt_lo": q[0], "lr_opt_hi": q[2]}
                row["proxy_lr_cost"] = row["loss_at_proxy_lr"] / row["best_loss"] - 1
                if shape != shapes[0]:
                    drift = opt[shape] / proxy
                    r, e = np.quantile(drift, Q), np.quantile(np.log(drift) / np.log(row["multiplier"]), Q)
                    row |= {"drift": r[1], "drift_lo": r[0], "drift_hi": r[2],
                            "p_drift_below_1": float(np.mean(drift < 1)),
                            "exponent": e[1], "exponent_lo": e[0], "exponent_hi": e[2]}
                out.append(row)
    order = list(AXES)
    out.sort(key=lambda r: (order.index(r["axis"]), AXES[r["axis"]]["arms"].index(r["arm"]),
                            [s[0] for s in AXES[r["axis"]]["shapes"]].index(r["shape"])))
    cols = ["axis", "arm", "shape", "multiplier", "best_lr_grid", "best_loss", "loss_at_proxy_lr", "proxy_lr_cost",
            "lr_opt", "lr_opt_lo", "lr_opt_hi", "drift", "drift_lo", "drift_hi", "p_drift_below_1", "exponent",
            "exponent_lo", "exponent_hi"]
    rows = [{c: r.get(c) if not (isinstance(r.get(c), float) and np.isnan(r.get(c))) else None for c in cols}
            for r in out]
    print(f"wrote {write_summary(HERE, rows, 'optima.csv')}: {len(rows)} rows")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="also fit each (axis, arm) and write optima.csv")
    ap.add_argument("axes", nargs="*", default=[], metavar="AXIS",
                    help=f"with --fit, only these axes ({', '.join(AXES)}; default all)")
    args = ap.parse_args()
    if unknown := sorted(set(args.axes) - set(AXES)):
        ap.error(f"unknown axis {', '.join(unknown)}: the axes are {', '.join(AXES)}")
    rows = summary_rows()
    print(f"wrote {write_summary(HERE, rows)}: {len(rows)} rows")
    if args.fit:
        fit_all(args.axes or list(AXES))


if __name__ == "__main__":
    main()
