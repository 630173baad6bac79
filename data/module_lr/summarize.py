"""Write data/module_lr/summary.csv: one row per finished run of the module-LR study, its module group and multiplier.

The run table (runs.jsonl) has the global ``lr`` but not the per-module multipliers (the trainer's records do
not carry ``optimizer.lr_mult``); they are read from each run's configuration in manifest.json. Columns:
size, group (``base``, ``embedding``, ``hidden``, ``router``, ``lm_head``), multiplier (of that group's LR;
1 for ``base``), lr (the global peak LR, the base), loss (held-out nats per byte token; empty if diverged),
diverged, wall_s, run_id.

    python data/module_lr/summarize.py
"""

from __future__ import annotations

from pathlib import Path

from scalinfer.sweep.store import finished_runs, write_summary

HERE = Path(__file__).resolve().parent
HIDDEN = ("attention", "experts")


def group_of(mult: dict[str, float]) -> tuple[str, float]:
    """The one module group whose multiplier is not 1 (attention and experts together are ``hidden``)."""
    moved = {k: v for k, v in mult.items() if v != 1.0}
    if not moved:
        return "base", 1.0
    if set(moved) == set(HIDDEN) and len(set(moved.values())) == 1:
        return "hidden", moved["attention"]
    if len(moved) == 1:
        ((k, v),) = moved.items()
        return k, v
    raise ValueError(f"more than one module group moved: {moved}")


def main() -> None:
    rows = []
    for run, rec in finished_runs(HERE):
        group, m = group_of(run["config"]["optimizer"]["lr_mult"])
        rows.append({"size": run["name"].split("-")[0], "group": group, "multiplier": m, "lr": rec["lr"],
                     "loss": rec["loss"], "diverged": rec["diverged"], "wall_s": run["wall_s"],
                     "run_id": run["run_id"]})
    rows.sort(key=lambda r: (r["size"], r["group"], r["multiplier"]))
    print(f"wrote {write_summary(HERE, rows)}: {len(rows)} runs")


if __name__ == "__main__":
    main()
