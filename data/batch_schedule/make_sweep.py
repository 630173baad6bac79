"""Write data/batch_schedule/sweep.toml and its two schedule files: the batch-size scheduler in training (#24 item 4).

One model (d48l2h3: the calibration's middle MoE size, N_total 130,032) trained to the same token count
D = 1,310,720 (4x the calibration's main run) with the same peak LR and WSD schedule (5% warmup, 20% linear
decay), three ways, three seeds each (9 runs):

(a) ``const``: the best constant batch, the ``surface`` model's loss-optimal batch ``batch_opt`` at (N, D)
    (MAP fit of the calibration's MoE records, as data/stability/make_sweep.py), rounded to whole sequences
    of 128 tokens;
(b) ``fitted``: the schedule ``scalinfer schedule`` builds (`scalinfer.schedules.batch.batch_schedule`) from
    a ``batch-floor`` fit of the project's own loss curves: for each calibration MoE size and batch
    (128 .. 2048 tokens), the run at that batch's best LR, its training loss (every 5th step, a running mean
    over 10 records) in the stable phase after warmup (the floor model describes a constant LR), every 4th
    point; the batch follows the posterior-median B_opt along the run, clipped below by B_min, at most
    2048, changed every quarter of the stable phase;
(c) ``rule``: the batch-size paper's rule, scaled: the paper raises the batch every 125B tokens 2M -> 4M ->
    5M -> 6M with the LR unchanged; here the constant batch x 1, 2, 2.5, 3 over the four quarters of the
    stable phase, rounded to whole sequences, halves up (with a one-sequence constant batch, x2.5 is 3
    sequences, as x3).

The peak LR is the surface model's ``lr_opt_at_batch`` at the constant batch, for all three (the paper does
not change the LR with the batch). Held-out loss every ``EVAL_EVERY_TOKENS`` tokens (the trainer's
``eval_every`` is in steps: set per arm from its smallest batch), for loss against tokens and steps.

    PYTHONPATH=<trainer checkout> nice -n 10 python data/batch_schedule/make_sweep.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

import scalinfer

HERE = Path(__file__).resolve().parent
CAL = HERE.parent / "calibration"
NAME, N_TOTAL = "d48l2h3", 130_032
MODEL = ("{d_model = 48, n_layers = 2, n_heads = 3, d_ff = 48, n_experts = 8, top_k = 2, "
         "capacity_factor = 1.25}")
D = 1_310_720
SEQ = 128
WARMUP, DECAY = 0.05, 0.2
MAX_BATCH = 2048
SEEDS = (0, 1, 2)
EVAL_EVERY_TOKENS = 65_536
RULE = (1.0, 2.0, 2.5, 3.0)  # the paper's 2M -> 4M -> 5M -> 6M, as multiples of the first


def whole(batch: float) -> int:
    """A batch rounded to whole sequences, halves up (at least one)."""
    return int(max(1, math.floor(batch / SEQ + 0.5)) * SEQ)


def constant_batch_and_lr() -> tuple[int, float]:
    """The surface model's loss-optimal batch at (N, D), in whole sequences, and the best LR at that batch."""
    runs = scalinfer.load_runs(str(CAL / "runs.jsonl"), where="n_experts > 1")
    fit = scalinfer.fit(runs, model="surface", method="map")
    b_opt = float(np.median(fit.predict(N=N_TOTAL, D=D)["batch_opt"]))
    print(f"surface MAP: batch_opt {b_opt:.0f} tokens at N = {N_TOTAL:,}, D = {D:,}", flush=True)
    b = whole(b_opt)
    lr = float(np.median(fit.predict(N=N_TOTAL, D=D, batch=b)["lr_opt_at_batch"]))
    return b, float(f"{lr:.3g}")


def calibration_curves() -> pd.DataFrame:
    """Training-loss curves of the calibration's MoE runs, one per (size, batch) at that batch's best LR, in
    the stable phase after warmup: a ``curves`` table (run_id, N, D = tokens seen, batch_tokens, step, loss)."""
    runs = pd.read_json(CAL / "runs.jsonl", lines=True)
    main = runs[(runs["n_experts"] > 1) & (runs["D"] == runs["D"].max()) & runs["loss"].notna()]
    best = main.loc[main.groupby(["N", "batch_tokens"])["loss"].idxmin()]
    rows = []
    for r in best.itertuples():
        m = pd.read_json(CAL / "runs" / r.run_id / "metrics.jsonl", lines=True)
        m["loss"] = m["loss"].rolling(10, min_periods=10).mean()
        stable = m[(m["tokens"] > WARMUP * r.D) & (m["tokens"] <= (1 - DECAY) * r.D) & m["loss"].notna()]
        for s in stable.iloc[::4].itertuples():
            rows.append({"run_id": r.run_id, "N": r.N, "D": s.tokens, "batch_tokens": r.batch_tokens,
                         "step": s.step, "loss": s.loss})
    return pd.DataFrame(rows)


def stable_quarters() -> list[float]:
    start, end = WARMUP * D, (1 - DECAY) * D
    return [0.0] + [start + k * (end - start) / 4 for k in (1, 2, 3)]


def main() -> None:
    import scalinfer.runtime
    from scalinfer.schedules import file as schedule_file
    from scalinfer.schedules.batch import batch_schedule, write_schedule

    scalinfer.runtime.configure(n_devices=2)
    b_const, lr = constant_batch_and_lr()
    print(f"constant batch {b_const} tokens, peak LR {lr}", flush=True)
    curves = scalinfer.load_runs(calibration_curves())
    fit = scalinfer.fit(curves, model="batch-floor", chains=2, warmup=500, samples=500, seed=0)
    print(f"{fit}; warnings: {fit.warnings()}", flush=True)
    every = ((1 - DECAY) * D - WARMUP * D) / 4
    sched = batch_schedule(fit, N=N_TOTAL, D=D, max_batch=MAX_BATCH, every=every, lr_peak=lr,
                           warmup_fraction=WARMUP, decay_fraction=DECAY, multiple_of=SEQ)
    write_schedule(sched, HERE / "schedule_fitted.json")
    for seg in sched.segments:
        print(f"  segment from {seg.from_tokens:,.0f} tokens: expected loss {seg.loss:.3f}, B_opt {seg.batch_opt:.0f}, "
              f"B_min {seg.batch_min:.0f} -> {seg.batch_tokens} tokens", flush=True)
    for w in sched.warnings:
        print("  schedule warning:", w, flush=True)
    lr_section = json.loads((HERE / "schedule_fitted.json").read_text())["lr"]
    stages = [{"from_tokens": t, "batch_tokens": whole(b_const * k)} for t, k in zip(stable_quarters(), RULE)]
    stages = [s for i, s in enumerate(stages) if i == 0 or s["batch_tokens"] != stages[i - 1]["batch_tokens"]]
    rule = {"format": schedule_file.FORMAT, "batch": stages, "lr": lr_section}
    schedule_file.write_schedule(HERE / "schedule_rule.json", rule)
    fitted = json.loads((HERE / "schedule_fitted.json").read_text())["batch"]
    print("fitted:", fitted, "\nrule:", rule["batch"], flush=True)
    (HERE / "sweep.toml").write_text(sweep_text(b_const, lr, fitted, rule["batch"]))
    print(f"wrote {HERE / 'sweep.toml'}")


def sweep_text(b_const: int, lr: float, fitted: list[dict], rule: list[dict]) -> str:
    def eval_every(smallest_batch: int) -> int:
        return max(1, EVAL_EVERY_TOKENS // smallest_batch)

    arms = [("const", None, b_const), ("fitted", "data/batch_schedule/schedule_fitted.json",
                                       min(s["batch_tokens"] for s in fitted)),
            ("rule", "data/batch_schedule/schedule_rule.json", min(s["batch_tokens"] for s in rule))]
    lines = [
        "# The batch-size scheduler in training (issue #24 item 4); written by data/batch_schedule/make_sweep.py",
        f"# {NAME}, D = {D:,} tokens, peak LR {lr} (surface model's lr_opt_at_batch at the constant batch)",
        f"# const: {b_const} tokens; fitted: {[(s['from_tokens'], s['batch_tokens']) for s in fitted]}",
        f"# rule: {[(s['from_tokens'], s['batch_tokens']) for s in rule]}",
        "# Run from the trainer checkout's root (the schedule files' paths are relative to it).",
        "",
        "[sweep]",
        'name = "batch_schedule"',
        'preset = "cal-xs"',
        'description = "best constant batch vs a fitted batch schedule vs the batch paper\'s rule, 3 seeds"',
        "",
        "[base]",
        f"total_tokens = {D}",
        f"eval_tokens = {32_768}",
        "log_every = 5",
        "",
        "[base.optimizer]",
        f"lr = {lr}",
        f"warmup = {WARMUP}",
        f"decay = {DECAY}",
    ]
    for seed in SEEDS:  # seed-major: a sweep cut short still has every arm at the first seeds
        for name, path, smallest in arms:
            lines += ["", "[[run]]", f'name = "{NAME}-{name}-s{seed}"', f"seed = {seed}", f"model = {MODEL}",
                      f"batch_tokens = {b_const}", f"eval_every = {eval_every(smallest)}"]
            if path:
                lines.append(f'schedule_file = "{path}"')
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
