"""Write data/update_size/summary.csv: one row per finished run of the update-size study.

Columns: size (``d32l2h2`` ...), N (N_total), d_model, mup (muP or standard parametrization), lr (the global
peak LR), lr_over_opt (lr over the size's optimum LR, make_sweep.LR_OPT), loss (held-out nats per byte token),
diverged, then per module group g the relative update ||dW_g|| / ||W_g|| (``update_rel_<g>``: its median over
the diagnostics rows of the run's middle half, steps 25%-75% of the run, all in the WSD schedule's constant-LR
phase), wall_s, run_id.

    python data/update_size/summarize.py
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from scalinfer.sweep.store import finished_runs
from scalinfer.train.diagnostics import read_diagnostics
from scalinfer.train.optimizer import GROUPS

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_sweep import LR_OPT  # noqa: E402  (the study's one list of optimum LRs)


def middle_half(frame):
    """The diagnostics rows of the run's middle half (steps in [25%, 75%] of the last row's step)."""
    last = frame["step"].max()
    return frame[(frame["step"] >= 0.25 * last) & (frame["step"] <= 0.75 * last)]


def main() -> None:
    rows = []
    for run, rec in finished_runs(HERE):
        size = run["name"].split("-")[0]
        mid = middle_half(read_diagnostics(HERE / "runs" / run["run_id"]))
        rows.append({"size": size, "N": rec["N"], "d_model": rec["d_model"], "mup": rec["mup"], "lr": rec["lr"],
                     "lr_over_opt": round(rec["lr"] / LR_OPT[size], 3), "loss": rec["loss"],
                     "diverged": rec["diverged"],
                     **{f"update_rel_{g}": round(float(mid[f"update_rel/{g}"].median()), 6) for g in GROUPS
                        if f"update_rel/{g}" in mid},
                     "wall_s": run["wall_s"], "run_id": run["run_id"]})
    rows.sort(key=lambda r: (r["N"], r["mup"], r["lr"]))
    with open(HERE / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["size"])
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {HERE / 'summary.csv'}: {len(rows)} runs")


if __name__ == "__main__":
    main()
