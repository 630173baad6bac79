"""The batch-schedule study's answer (#24 item 4): summary.csv, the findings, and the figure.

For each of the 9 runs (3 arms x 3 seeds: the best constant batch ``const``, a ``scalinfer schedule`` fitted
on the project's curves ``fitted``, the batch paper's rule ``rule``; same model, same peak LR, same 1.31M
tokens) it reads the held-out loss curve (``eval_loss`` every 512 steps in ``runs/<run_id>/metrics.jsonl``) and
the final record (``runs.jsonl``), and reports, per arm, the mean over the seeds with a 90% Student-t interval
(2 degrees of freedom: with 3 seeds the interval is wide, t = 2.92) of

- ``loss``: the final held-out loss (nats per byte token);
- ``steps``: optimizer steps to the end (the serial work on an accelerator, where a step's time does not grow
  with the batch until the chip is full);
- ``wall_s``: wall time of the run on this machine's CPU (where a step's time does grow with the batch, and
  the sweep shared 2 cores with other jobs: read it as a rough figure);
- ``steps_to_target``, ``tokens_to_target``: when the held-out curve first reaches the target loss fixed
  before the runs were read (README): the constant arm's median final loss x 1.01 (interpolated linearly in
  log steps, log tokens; empty if never);
- ``loss - const``: the paired difference from the constant-batch run of the same seed (same initialization);
- ``steps_saved``: 1 - (the arm's steps) / (the steps the constant-batch run of the same seed took to reach
  the arm's final loss, on its held-out curve interpolated linearly in log steps): the share of steps the
  schedule saves at equal loss (negative if the constant run got there sooner). Where the constant run never
  reached it (the schedule ended lower), its whole run's steps stand in, and the saving is a lower bound
  (``steps_saved_bound`` true).

    python data/batch_schedule/summarize.py [--figure FIGURE.png]

writes summary.csv beside this file (one row per run) and prints the per-arm table and the findings; with
``--figure``, the figure: held-out loss against tokens and against steps, one line per run.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ARMS = ("const", "fitted", "rule")


def load(folder: Path = HERE) -> list[dict]:
    """One dict per finished run: arm, seed, the final record's loss, steps and wall time, and the
    held-out curve (arrays ``eval_steps``, ``eval_tokens``, ``eval_loss``)."""
    from scalinfer.sweep.store import finished_runs

    runs = []
    for run, rec in finished_runs(folder):
        _, arm, seed = run["name"].rsplit("-", 2)
        curve = [json.loads(line) for line in (folder / "runs" / run["run_id"] / "metrics.jsonl").open()]
        curve = [c for c in curve if "eval_loss" in c]
        runs.append({"name": run["name"], "run_id": run["run_id"], "arm": arm, "seed": int(seed.lstrip("s")),
                     "loss": float(rec["loss"]), "steps": int(rec["steps"]), "wall_s": float(rec["wall_time_s"]),
                     "eval_steps": np.array([c["step"] for c in curve], float),
                     "eval_tokens": np.array([c["tokens"] for c in curve], float),
                     "eval_loss": np.array([c["eval_loss"] for c in curve], float)})
    return sorted(runs, key=lambda r: (ARMS.index(r["arm"]), r["seed"]))


#: the target loss, as the README fixed it before the runs were read: the constant arm's median final loss x 1.01
TARGET_FACTOR = 1.01


def steps_to_reach(run: dict, loss: float, axis: str = "eval_steps") -> float:
    """The first step (`axis` "eval_tokens": token) at which `run`'s held-out curve reaches `loss` (linear in log
    steps between evaluations); nan if it never does."""
    s, y = run[axis], run["eval_loss"]
    hit = np.flatnonzero(y <= loss)
    if not hit.size:
        return math.nan
    i = int(hit[0])
    if i == 0:
        return float(s[0])
    w = (y[i - 1] - loss) / (y[i - 1] - y[i])
    return float(np.exp(np.log(s[i - 1]) + w * (np.log(s[i]) - np.log(s[i - 1]))))


def mean_interval(values) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean over seeds and its 90% Student-t interval (n - 1 degrees of freedom)."""
    from scipy.stats import t

    v = np.asarray([x for x in values if np.isfinite(x)], float)
    if v.size < 2:
        return (float(v.mean()) if v.size else math.nan), math.nan, math.nan
    half = float(t.ppf(0.95, v.size - 1)) * v.std(ddof=1) / math.sqrt(v.size)
    return float(v.mean()), float(v.mean() - half), float(v.mean() + half)


def summarize(runs: list[dict]) -> tuple[list[dict], dict]:
    """Per-run rows (summary.csv) and per-arm figures {arm: {quantity: (mean, lo, hi)}}."""
    const = {r["seed"]: r for r in runs if r["arm"] == "const"}
    target = TARGET_FACTOR * float(np.median([c["loss"] for c in const.values()]))
    rows = []
    for r in runs:
        c = const.get(r["seed"])
        reach, bound = math.nan, False
        if c is not None and r["arm"] != "const":
            reach = steps_to_reach(c, r["loss"])
            if not np.isfinite(reach):
                reach, bound = float(c["steps"]), True
        rows.append({"name": r["name"], "arm": r["arm"], "seed": r["seed"], "loss": r["loss"], "steps": r["steps"],
                     "wall_s": round(r["wall_s"], 1), "target_loss": round(target, 5),
                     "steps_to_target": round(steps_to_reach(r, target), 1),
                     "tokens_to_target": round(steps_to_reach(r, target, "eval_tokens"), 0),
                     "loss_minus_const": r["loss"] - c["loss"] if c is not None else math.nan,
                     "const_steps_to_this_loss": round(reach, 1),
                     "steps_saved": 1.0 - r["steps"] / reach if np.isfinite(reach) else math.nan,
                     "steps_saved_bound": bound, "run_id": r["run_id"]})
    arms = {}
    for arm in ARMS:
        sub = [row for row in rows if row["arm"] == arm]
        if sub:
            arms[arm] = {q: mean_interval(row[q] for row in sub)
                         for q in ("loss", "steps", "wall_s", "loss_minus_const", "steps_saved", "steps_to_target",
                                   "tokens_to_target")}
            arms[arm]["n"] = len(sub)
    return rows, arms


def figure(runs: list[dict]):
    """Held-out loss against tokens and against steps, one line per run, one colour per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    colours = dict(zip(ARMS, ("tab:blue", "tab:orange", "tab:green")))
    for r in runs:
        label = r["arm"] if r["seed"] == 0 else None
        for ax, x in zip(axes, ("eval_tokens", "eval_steps")):
            ax.plot(r[x], r["eval_loss"], color=colours[r["arm"]], lw=1, alpha=0.8, label=label, marker=".")
    for ax, xl in zip(axes, ("tokens", "optimizer steps")):
        ax.set_xscale("log")
        ax.set_xlabel(xl)
        ax.set_ylabel("held-out loss (nats / byte)")
        ax.set_ylim(top=min(2.6, max(float(r["eval_loss"].max()) for r in runs)))
    axes[0].legend(title="batch", fontsize=8)
    fig.suptitle("d48 MoE to 1.31M tokens: constant batch vs fitted schedule vs the batch paper's rule (3 seeds)")
    return fig


def _fmt(m: tuple[float, float, float], spec: str) -> str:
    mean, lo, hi = m
    return "-" if not np.isfinite(mean) else f"{mean:{spec}} [{lo:{spec}}, {hi:{spec}}]"


def main(argv=None, folder: Path = HERE) -> dict:
    from scalinfer._io import atomic_write_with
    from scalinfer.sweep.store import write_summary

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--figure", help="write the figure here (PNG)")
    args = ap.parse_args(argv)
    runs = load(folder)
    rows, arms = summarize(runs)
    write_summary(folder, rows)
    print(f"{'arm':<8}{'n':>3}  {'final loss':<26}{'loss - const':<30}{'steps':<24}{'steps saved at equal loss':<28}"
          f"{'steps to target':<24}{'tokens to target':<32}wall s")
    for arm, a in arms.items():
        print(f"{arm:<8}{a['n']:>3}  {_fmt(a['loss'], '.4f'):<26}{_fmt(a['loss_minus_const'], '+.4f'):<30}"
              f"{_fmt(a['steps'], '.0f'):<24}{_fmt(a['steps_saved'], '.2f'):<28}{_fmt(a['steps_to_target'], '.0f'):<24}"
              f"{_fmt(a['tokens_to_target'], '.0f'):<32}{_fmt(a['wall_s'], '.0f')}")
    print(f"target loss {rows[0]['target_loss']:.4f} (the constant arm's median final loss x {TARGET_FACTOR})")
    if args.figure:
        fig = figure(runs)
        atomic_write_with(args.figure, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
        print(f"wrote {args.figure}")
    return {"rows": rows, "arms": arms}


if __name__ == "__main__":
    main()
