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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=RUNS)
    p.add_argument("--out", type=Path, default=OUT,
                   help="trainings and the held-out fit are cached here (shared with end_to_end.py)")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    import scalinfer.runtime

    scalinfer.runtime.configure(args.chains)  # as the CLI (the sweeps train in worker processes of their own)
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


if __name__ == "__main__":
    sys.exit(main() and 0)
