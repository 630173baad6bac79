"""Write data/update_size/summary.csv: one row per finished run of the update-size study.

Columns: size (``d32l2h2`` ...), N (N_total), d_model, mup (muP or standard parametrization), lr (the global
peak LR), lr_over_opt (lr over the size's optimum LR, make_sweep.LR_OPT), loss (held-out nats per byte token),
diverged, wall_s, run_id. The update sizes are in each run's ``diagnostics.jsonl``
(`scalinfer.train.diagnostics.read_diagnostics`), summarized in notebooks/stability.ipynb.

    python data/update_size/summarize.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from scalinfer.sweep.store import finished_runs, write_summary

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_sweep import LR_OPT  # noqa: E402  (the study's one list of optimum LRs)


def main() -> None:
    rows = []
    for run, rec in finished_runs(HERE):
        size = run["name"].split("-")[0]
        rows.append({"size": size, "N": rec["N"], "d_model": rec["d_model"], "mup": rec["mup"], "lr": rec["lr"],
                     "lr_over_opt": round(rec["lr"] / LR_OPT[size], 3), "loss": rec["loss"],
                     "diverged": rec["diverged"], "wall_s": run["wall_s"], "run_id": run["run_id"]})
    rows.sort(key=lambda r: (r["N"], r["mup"], r["lr"]))
    print(f"wrote {write_summary(HERE, rows)}: {len(rows)} runs")


if __name__ == "__main__":
    main()
