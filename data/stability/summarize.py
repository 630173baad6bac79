"""Write data/stability/summary.csv: one row per finished run of the QK-norm stability study.

Columns: size (``d32l2h2`` ...), N (N_total), qk_norm, lr (the global peak LR), lr_ratio (lr over the size's
base LR, the surface model's optimum: 2^k, k = -1..7), loss (held-out nats per byte token; empty if
diverged), diverged (a non-finite training loss stopped the run), diverged_at_tokens, wall_s, run_id.

    python data/stability/summarize.py
"""

from __future__ import annotations

from pathlib import Path

from scalinfer.sweep.store import finished_runs, write_summary

HERE = Path(__file__).resolve().parent
#: the base LR per size (the sweep's x1 point; sweep.toml's header, written by make_sweep.py)
BASE = {"d32l2h2": 0.00909, "d48l2h3": 0.00575, "d64l2h4": 0.00416}


def main() -> None:
    rows = []
    for run, rec in finished_runs(HERE):
        size = run["name"].split("-")[0]
        rows.append({"size": size, "N": rec["N"], "qk_norm": rec["qk_norm"], "lr": rec["lr"],
                     "lr_ratio": round(rec["lr"] / BASE[size], 3), "loss": rec["loss"],
                     "diverged": rec["diverged"], "diverged_at_tokens": rec.get("diverged_at_tokens"),
                     "wall_s": run["wall_s"], "run_id": run["run_id"]})
    rows.sort(key=lambda r: (r["N"], r["qk_norm"], r["lr"]))
    print(f"wrote {write_summary(HERE, rows)}: {len(rows)} runs")


if __name__ == "__main__":
    main()
