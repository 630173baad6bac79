"""Fitting vs Transfer (docs/laws.md sections 4 and 6) at the largest calibration size, on CPU.

Two ways to choose the peak learning rate of a model larger than any tuned one:

- **Transfer** (muTransfer): tune the LR on the smallest size in muP (`scalinfer.train.MupConfig`, base shape =
  the smallest size, so its multipliers are 1 there), at that size's best batch from the calibration sweep
  and the sweep's largest D; train the largest size in muP with the same LR and batch (muP moves the LR to
  each module by the width rules: hidden matrices eta / m_N, output and router multipliers 1 / m_N);
- **Fitting**: fit the ``surface`` model to the calibration runs of every size but the largest (as
  `end_to_end.py` does) and train the largest size, in standard parametrization like the sweep, at the
  predicted (eta*, B*) (posterior medians; the batch rounded to whole sequences).

Both are trained at the largest size for the sweep's largest D with the sweep's configuration otherwise, and
compared with each other and with the best run of the sweep's own grid at that size (what an exhaustive
search there found), which is also re-trained with today's code as a control of the noise floor. One more
line trains the transferred LR (muP) at the fitted batch, to tell the part of the gap due to the batch from
the part due to the LR. A third line trains the largest size in standard parametrization at the LR tuned on
the smallest in standard parametrization (the naive "use the small model's LR"), for scale.

    nice -n 10 .venv/bin/python benchmarks/fitting_vs_transfer.py [--runs data/calibration/runs.jsonl]
        [--out out/calibration_checks] [--chains 4 --warmup 500 --samples 500]

``--studies`` runs the same comparison along each axis of the project's muTransfer studies (data/transfer/:
width and depth, muP against SP; data/transfer_axes/: depth under CompleteP, token horizon with a fixed
lambda or a fixed AdamW timescale), from their committed LR valleys, one row per (axis, arm):

- **Transfer**: the proxy's best LR on its grid, used unchanged at the axis's largest value (4x the width,
  depth or tokens); its loss there is the study's own run at that LR.
- **Fitting**: the ``surface`` model (the fixed-batch design, as the studies' ``summarize.py``, default NUTS
  draws) fitted to the valleys of the proxy and the middle value only, predicting ``lr_opt_at_batch`` at the
  largest value's (N, D); the largest model is trained once at the posterior median, with the study's
  configuration otherwise.
- The judge: the largest value's best run on the study's grid (4-5 LRs a factor 2 apart).

The weight-decay axis has no row: the model has no law in lambda to extrapolate along.

    nice -n 10 .venv/bin/python benchmarks/fitting_vs_transfer.py --studies [--out out/transfer_checks]

Trainings and the fit are cached in ``--out``. Prints a table, then as its last line one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from end_to_end import (  # noqa: E402  (a sibling script)
    OUT, RUNS, _clean, base_config, empirical_optimum, holdout_fit, load_table, round_batch, sizes,
    train_control, train_settings,
)


#: (study folder, axis, arm, the axis's values from the proxy to the largest) of each row of ``--studies``
STUDIES = (
    ("transfer", "width", "sp", ("d32l2h2", "d64l2h4", "d128l2h8")),
    ("transfer", "width", "mup", ("d32l2h2", "d64l2h4", "d128l2h8")),
    ("transfer", "depth", "sp", ("d64l2h4", "d64l4h4", "d64l8h4")),
    ("transfer", "depth", "mup", ("d64l2h4", "d64l4h4", "d64l8h4")),
    ("transfer_axes", "depth", "completep", ("d64l2h4", "d64l4h4", "d64l8h4")),
    ("transfer_axes", "horizon", "fixed", ("D164k", "D328k", "D655k")),
    ("transfer_axes", "horizon", "timescale", ("D164k", "D328k", "D655k")),
)
STUDY_OUT = OUT.parent / "transfer_checks"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=RUNS)
    p.add_argument("--out", type=Path, default=None,
                   help=f"trainings and the held-out fit are cached here (default {OUT.relative_to(OUT.parents[1])}, "
                   f"shared with end_to_end.py; with --studies {STUDY_OUT.relative_to(STUDY_OUT.parents[1])})")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--studies", action="store_true",
                   help="compare along the muTransfer studies' axes (data/transfer*/) instead")
    args = p.parse_args(argv)
    import scalinfer.runtime

    scalinfer.runtime.configure(args.chains)  # as the CLI (the sweeps train in worker processes of their own)
    if args.studies:
        return studies(args.out or STUDY_OUT, args.chains, args.seed)
    args.out = args.out or OUT
    t0 = time.perf_counter()
    runs, df = load_table(args.runs)
    ns = sizes(df)
    small, large = ns[0], ns[-1]
    D = float(df["D"].max())
    at_small = df[(df["N"] == small) & (df["D"] == D)]
    at_large = df[(df["N"] == large) & (df["D"] == D)]
    small_opt, large_opt = empirical_optimum(at_small), empirical_optimum(at_large)
    base_small, base_large = base_config(df, small), base_config(df, large)
    m_small, m_large = base_small["model"], base_large["model"]
    if m_small["n_layers"] != m_large["n_layers"]:
        print(f"note: depth differs ({m_small['n_layers']} -> {m_large['n_layers']}); muP's depth rule is off "
              f"(depth_alpha = 0)")
    mup = {"base_d_model": m_small["d_model"], "base_n_layers": m_small["n_layers"], "depth_alpha": 0.0,
           "router": "output"}
    batch_small = int(small_opt["batch_grid"])
    lrs = sorted(at_small["lr"].unique())

    # Transfer: the muP LR sweep at the smallest size, then the largest in muP at the best LR
    tune = train_settings(base_small, [{"name": f"mup-small-lr{lr:g}", "lr": lr, "batch_tokens": batch_small,
                                        "total_tokens": D, "model": {"mup": mup}} for lr in lrs],
                          args.out, "mup_small")
    tune_loss = np.array([np.inf if r["diverged"] else r["loss"] for r in tune])
    lr_mup = float(lrs[int(np.argmin(tune_loss))])

    # Fitting: the held-out posterior's (eta*, B*) at the largest size and D
    f, n_fit, _ = holdout_fit(runs, large, args.out, args.chains, args.warmup, args.samples, args.seed)
    pred = f.predict(N=large, D=D)
    lr_fit = float(f"{float(pred.interval('lr_opt')[0]):.4g}")
    batch_fit = round_batch(float(pred.interval("batch_opt")[0]), int(m_large["seq_len"]))

    arms = [
        {"arm": "transfer (muP)", "name": "transfer-mup", "lr": lr_mup, "batch_tokens": batch_small,
         "total_tokens": D, "model": {"mup": mup}},
        {"arm": "fitting (surface)", "name": "fitting", "lr": lr_fit, "batch_tokens": batch_fit, "total_tokens": D},
        {"arm": "small model's SP LR", "name": "naive-sp", "lr": float(small_opt["lr_grid"]),
         "batch_tokens": batch_small, "total_tokens": D},
        # the transferred LR at the fitted batch: how much of the gap is the batch, not the LR
        {"arm": "transfer LR, fit batch", "name": "transfer-mup-fit-batch", "lr": lr_mup, "batch_tokens": batch_fit,
         "total_tokens": D, "model": {"mup": mup}},
    ]
    recs = train_settings(base_large, [{k: v for k, v in a.items() if k != "arm"} for a in arms], args.out,
                          "largest")
    best = large_opt["loss"]
    rows = []
    for a, r in zip(arms, recs):
        loss = float("nan") if r["diverged"] else float(r["loss"])
        rows.append({"arm": a["arm"], "lr": a["lr"], "batch_tokens": a["batch_tokens"], "D": int(r["D"]),
                     "loss": loss, "vs_grid_best": loss - best, "vs_grid_best_pct": 100 * (loss - best) / best,
                     "diverged": bool(r["diverged"])})
    rows.append({"arm": "grid best (sweep)", "lr": large_opt["lr_grid"], "batch_tokens": int(large_opt["batch_grid"]),
                 "D": int(D), "loss": best, "vs_grid_best": 0.0, "vs_grid_best_pct": 0.0, "diverged": False})
    control = train_control(df, large, args.out)
    rows.append({"arm": "grid best, re-trained", "lr": control["lr"], "batch_tokens": control["batch_tokens"],
                 "D": control["D"], "loss": control["loss"], "vs_grid_best": control["loss"] - best,
                 "vs_grid_best_pct": 100 * (control["loss"] - best) / best, "diverged": False})
    transfer, fitting = rows[0]["loss"], rows[1]["loss"]
    winner = "fitting" if fitting < transfer else "transfer"
    margin = abs(transfer - fitting)

    print(f"sizes: smallest N={small:.4g} (d_model {m_small['d_model']}), largest N={large:.4g} "
          f"(d_model {m_large['d_model']}, m_N = {m_large['d_model'] / m_small['d_model']:g}); D = {D:.4g} tokens")
    print(f"muP LR sweep at the smallest size (batch {batch_small}): "
          + ", ".join(f"{lr:.3g}: {'div' if not np.isfinite(x) else f'{x:.4f}'}" for lr, x in zip(lrs, tune_loss))
          + f" -> {lr_mup:.3g}")
    print(f"surface fit on {n_fit} runs of the smaller sizes -> eta* {lr_fit:.3g}, B* {batch_fit} tokens "
          f"(90% eta* [{float(pred.interval('lr_opt')[1]):.3g}, {float(pred.interval('lr_opt')[2]):.3g}])")
    print(f"{'arm':>22} {'lr':>9} {'batch':>6} {'loss':>8} {'vs grid best':>13}")
    for r in rows:
        print(f"{r['arm']:>22} {r['lr']:>9.3g} {r['batch_tokens']:>6} {r['loss']:>8.4f} {r['vs_grid_best_pct']:>+12.2f}%")
    print(f"winner here: {winner}, by {margin:.4f} nats ({100 * margin / max(transfer, fitting):.2f}%)")
    summary = {"benchmark": "fitting_vs_transfer", "smallest_N": small, "largest_N": large, "D": D,
               "mup_lr_small": lr_mup, "mup_tuning": dict(zip(map(str, lrs), tune_loss.tolist())),
               "fit_lr": lr_fit, "fit_batch": batch_fit, "winner": winner, "margin_nats": margin,
               "margin_pct": 100 * margin / max(transfer, fitting), "rows": rows,
               "wall_s": round(time.perf_counter() - t0, 1)}
    print(json.dumps(_clean(summary)))
    return summary


def studies(out: Path, chains: int, seed: int) -> dict[str, Any]:
    """Fitting against Transfer along the muTransfer studies' axes (see the module docstring)."""
    import pandas as pd

    import scalinfer

    t0 = time.perf_counter()
    data = Path(__file__).resolve().parent.parent / "data"
    rows = []
    for folder, axis, arm, values in STUDIES:
        runs = pd.read_json(data / folder / "runs.jsonl", lines=True)
        runs["_axis"], runs["_value"], runs["_arm"] = zip(*(n.split("-")[:3] for n in runs["name"]))
        runs = runs[(runs["_axis"] == axis) & (runs["_arm"] == arm)]
        ok = runs[~runs["diverged"]]  # the best runs are among the converged; the fit takes every run (censored)
        proxy, large = ok[ok["_value"] == values[0]], ok[ok["_value"] == values[-1]]
        lr_transfer = float(proxy.loc[proxy["loss"].idxmin(), "lr"])
        at_transfer = large[np.isclose(large["lr"], lr_transfer)]
        best = large.loc[large["loss"].idxmin()]
        train = runs[runs["_value"].isin(values[:-1])].drop(columns=["_axis", "_value", "_arm"])
        f = scalinfer.fit(scalinfer.load_runs(train.reset_index(drop=True)), model="surface", chains=chains,
                          seed=seed, size_scatter=False)
        warn = [w for w in f.warnings() if "R-hat" in w or "divergent" in w]
        N, D = float(best["N"]), float(best["D"])
        med, lo, hi = (float(v) for v in f.predict(N=N, D=D).interval("lr_opt_at_batch"))
        lr_fit = float(f"{med:.3g}")
        config = json.loads((data / folder / "runs" / best["run_id"] / "config.json").read_text())
        rec = train_settings(config, [{"name": f"{axis}-{values[-1]}-{arm}-fit-lr{lr_fit:.3g}", "lr": lr_fit,
                                       "batch_tokens": config["batch_tokens"],
                                       "total_tokens": config["total_tokens"]}], out, f"{folder}-{axis}-{arm}")[0]
        fit_loss = float("nan") if rec["diverged"] else float(rec["loss"])
        transfer_loss = float(at_transfer["loss"].iloc[0]) if len(at_transfer) else float("nan")
        g = float(best["loss"])
        rows.append({"study": folder, "axis": axis, "arm": arm, "proxy": values[0], "target": values[-1],
                     "N": N, "D": D, "transfer_lr": lr_transfer, "transfer_loss": transfer_loss,
                     "transfer_vs_grid_pct": 100 * (transfer_loss / g - 1),
                     "fit_lr": lr_fit, "fit_lr_lo": lo, "fit_lr_hi": hi,
                     "fit_loss": fit_loss, "fit_vs_grid_pct": 100 * (fit_loss / g - 1),
                     "grid_best_lr": float(best["lr"]), "grid_best_loss": g,
                     "winner": "fitting" if fit_loss < transfer_loss else "transfer",
                     "fit_draws_per_chain": int(f.posterior["sigma0"].shape[-1]), "fit_warnings": warn})
    print(f"{'axis':>8} {'arm':>10} {'target':>9} {'transfer lr':>11} {'vs grid':>8} {'fitted lr [90%]':>26} "
          f"{'vs grid':>8} {'grid best lr':>12}  winner")
    for r in rows:
        print(f"{r['axis']:>8} {r['arm']:>10} {r['target']:>9} {r['transfer_lr']:>11.3g} "
              f"{r['transfer_vs_grid_pct']:>+7.2f}% {r['fit_lr']:>9.3g} "
              f"[{r['fit_lr_lo']:.3g}, {r['fit_lr_hi']:.3g}]"
              f"{'':>2}{r['fit_vs_grid_pct']:>+7.2f}% {r['grid_best_lr']:>12.3g}  {r['winner']}")
        for w in r["fit_warnings"]:
            print(f"{'':>10}fit warning: {w}")
    summary = {"benchmark": "fitting_vs_transfer", "mode": "studies", "rows": rows,
               "fitting_wins": sum(r["winner"] == "fitting" for r in rows), "n_rows": len(rows),
               "wall_s": round(time.perf_counter() - t0, 1)}
    print(json.dumps(_clean(summary)))
    return summary


if __name__ == "__main__":
    sys.exit(main() and 0)
