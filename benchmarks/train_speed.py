"""Trainer speed: tokens/s, model FLOPs per token, achieved FLOP/s, MFU, and MoE vs dense step time.

    python benchmarks/train_speed.py [--preset cal-m] [--steps 20] [--batch-tokens N]

MFU is measured against this machine's own peak: the best FLOP/s of a large float32 matmul timed
in the same process (so a busy machine lowers both). Model FLOPs per token are
`scalinfer.train.flops_per_token` (forward + backward of the useful matmuls, PaLM convention). The
MoE/dense ratio compares the step time of the MoE preset with its ``-dense`` counterpart, which has
the same active parameters and FLOPs per token. Prints a table; the LAST line is one JSON object
with ``tokens_per_s``, ``mfu``, ``moe_dense_step_ratio``, ``matmul_peak_flops`` (and more).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from scalinfer.train import flops_per_token, init_params, make_optimizer, make_train_step, param_counts, preset
from scalinfer.train.loop import TrainState


def matmul_peak(n: int = 2048, reps: int = 5) -> float:
    """Best FLOP/s of an n x n float32 matmul (the machine's practical peak for this dtype)."""
    a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n), np.float32))
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(f(a))
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t))
    return best


def step_time(cfg, steps: int, warmup: int = 2) -> dict:
    """Median seconds per optimizer step of ``cfg`` (one micro-batch per step), after compiling."""
    m = cfg.model
    params = jax.tree.map(jnp.asarray, init_params(m, 0))
    opt = make_optimizer(m, cfg.optimizer, params, 1000)
    state = TrainState(params, opt.init(params), jnp.zeros((), jnp.int32),
                       jax.random.key_data(jax.random.key(0)))
    seqs = cfg.micro_tokens // m.seq_len
    rng = np.random.default_rng(0)
    batches = [jnp.asarray(rng.integers(0, m.vocab_size, (1, seqs, m.seq_len + 1)), jnp.int32) for _ in range(4)]
    step = jax.jit(make_train_step(m, opt, cfg.micro_tokens), donate_argnums=(0,))
    t = time.perf_counter()
    state, metrics = step(state, batches[0], np.int32(1), np.float32(1e-3))
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - t
    for i in range(warmup):
        state, metrics = step(state, batches[i % 4], np.int32(1), np.float32(1e-3))
    jax.block_until_ready(metrics)
    times = []
    for i in range(steps):
        t = time.perf_counter()
        state, metrics = step(state, batches[i % 4], np.int32(1), np.float32(1e-3))
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - t)
    return {"step_s": float(np.median(times)), "compile_s": compile_s,
            "dropped_fraction": float(metrics["dropped_fraction"])}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cal-m", help="MoE calibration preset (its -dense twin is the baseline)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per model")
    p.add_argument("--batch-tokens", type=int, default=None, help="tokens per step (default: the preset's)")
    args = p.parse_args(argv)

    moe_cfg, dense_cfg = preset(args.preset), preset(args.preset + "-dense")
    if args.batch_tokens:
        moe_cfg = dataclasses.replace(moe_cfg, batch_tokens=args.batch_tokens, micro_batch_tokens=None)
        dense_cfg = dataclasses.replace(dense_cfg, batch_tokens=args.batch_tokens, micro_batch_tokens=None)
    peak_before = matmul_peak()
    moe = step_time(moe_cfg, args.steps)
    dense = step_time(dense_cfg, args.steps)
    peak = max(peak_before, matmul_peak())
    rows = []
    for name, cfg, r in ((args.preset, moe_cfg, moe), (args.preset + "-dense", dense_cfg, dense)):
        fpt = flops_per_token(cfg.model)
        tps = cfg.micro_tokens / r["step_s"]
        rows.append({"model": name, "N_total": param_counts(cfg.model).non_embedding,
                     "N_active": param_counts(cfg.model).non_embedding_active, "batch_tokens": cfg.micro_tokens,
                     "step_ms": 1e3 * r["step_s"], "tokens_per_s": tps, "flops_per_token": fpt,
                     "achieved_flops": tps * fpt, "mfu": tps * fpt / peak, "compile_s": r["compile_s"],
                     "dropped_fraction": r["dropped_fraction"]})
    print(f"devices: {jax.device_count()} x {jax.devices()[0].device_kind}; cores: {os.cpu_count()}; "
          f"load average: {os.getloadavg()[0]:.1f}; float32 matmul peak: {peak / 1e9:.1f} GFLOP/s")
    header = f"{'model':<14}{'N_total':>10}{'N_active':>10}{'batch':>7}{'step ms':>9}{'tok/s':>10}" \
             f"{'MFLOP/tok':>10}{'GFLOP/s':>9}{'MFU':>7}{'compile s':>10}"
    print(header)
    for r in rows:
        print(f"{r['model']:<14}{r['N_total']:>10,}{r['N_active']:>10,}{r['batch_tokens']:>7}{r['step_ms']:>9.1f}"
              f"{r['tokens_per_s']:>10.0f}{r['flops_per_token'] / 1e6:>10.2f}{r['achieved_flops'] / 1e9:>9.1f}"
              f"{r['mfu']:>7.1%}{r['compile_s']:>10.1f}")
    ratio = moe["step_s"] / dense["step_s"]
    print(f"MoE / dense step time (same active FLOPs): {ratio:.2f}")
    result = {"tokens_per_s": rows[0]["tokens_per_s"], "mfu": rows[0]["mfu"], "moe_dense_step_ratio": ratio,
              "matmul_peak_flops": peak, "flops_per_token": rows[0]["flops_per_token"],
              "achieved_flops": rows[0]["achieved_flops"], "dense_mfu": rows[1]["mfu"], "preset": args.preset,
              "batch_tokens": moe_cfg.micro_tokens, "load_average": os.getloadavg()[0]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
