"""Write data/module_lr/sweep.toml: the module-level LR study (issue #24, the LR paper's "Figure 5" protocol).

For each of the calibration sweep's three smallest MoE sizes (d32l2h2, d48l2h3, d64l2h4), the base LR is the
surface model's optimum at the study's batch and token budget, ``lr_opt_at_batch`` from a MAP fit of
``scalinfer.fit(runs, model="surface", method="map")`` on the calibration table's MoE records
(data/calibration/runs.jsonl, N = N_total). Then one module group at a time gets an LR multiplier of
30^(k/3), k = -3..3 (x1/30 .. x30, 7 log-spaced points, neighbours 3.11x apart), the others staying at x1:

    embedding   optimizer.lr_mult.embedding
    hidden      optimizer.lr_mult.attention and optimizer.lr_mult.experts, together (the hidden matrices)
    router      optimizer.lr_mult.router
    lm_head     optimizer.lr_mult.lm_head

(norm gains keep x1). The x1 point is the same configuration for every group, so it is run once per size
(``<size>-base``): 3 x (1 + 4 x 6) = 75 runs.

Runs are written as ``[[run]]`` tables (one axis cannot set attention and experts together) in rings of
distance from the base: every size's base first, then k = +-1 for every size and group, then +-2, then +-3,
so a sweep cut short still has a symmetric bracket around every base.

    PYTHONPATH=<trainer checkout> python data/module_lr/make_sweep.py [-o data/module_lr/sweep.toml]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import scalinfer

HERE = Path(__file__).resolve().parent
CALIBRATION = HERE.parent / "calibration" / "runs.jsonl"

# (name, d_model, n_heads): the calibration sweep's three smallest MoE shapes (2 layers, d_ff = d_model,
# 8 experts top-2, capacity factor 1.25) and their N_total (non-embedding)
SIZES = (("d32l2h2", 32, 2, 58_016), ("d48l2h3", 48, 3, 130_032), ("d64l2h4", 64, 4, 230_720))
TOTAL_TOKENS = 327_680   # the calibration sweep's main-run D; no decay branches
BATCH_TOKENS = 256       # the calibration's loss-optimal batch is 128-256 tokens at this scale
GROUPS = {"embedding": ("embedding",), "hidden": ("attention", "experts"), "router": ("router",),
          "lm_head": ("lm_head",)}
STEPS = (1, 2, 3)        # k: multiplier 30^(+-k/3)


def base_lrs() -> dict[str, float]:
    """The surface model's MAP optimum LR at (N_total, TOTAL_TOKENS, BATCH_TOKENS) per size, 3 significant digits."""
    runs = scalinfer.load_runs(str(CALIBRATION), where="n_experts > 1")
    fit = scalinfer.fit(runs, model="surface", method="map")
    out = {}
    for name, _, _, n in SIZES:
        p = fit.predict(N=n, D=TOTAL_TOKENS, batch=BATCH_TOKENS)
        out[name] = float(f"{float(np.median(p.draws['lr_opt_at_batch'])):.3g}")
    return out


def multiplier(k: int) -> float:
    return float(f"{30.0 ** (k / 3):.4g}")


def sweep_text(lrs: dict[str, float]) -> str:
    lines = [
        "# module-level LR study (issue #24); written by data/module_lr/make_sweep.py",
        "# base LR per size: the surface model's MAP optimum at D = 327,680 tokens, batch 256 tokens",
        "# (lr_opt_at_batch; fit on data/calibration/runs.jsonl, MoE records, N = N_total):",
        *(f"#   {name}: {lrs[name]}" for name, *_ in SIZES),
        "# one module group at a time at x 30^(k/3), k = -3..3; the others at x1",
        "",
        "[sweep]",
        'name = "module_lr"',
        'preset = "cal-xs"',
        'description = "module-level LR search: one module group at a time, x1/30 .. x30 around each size\'s optimum"',
        "",
        "[base]",
        "seed = 0",
        f"total_tokens = {TOTAL_TOKENS}",
        f"batch_tokens = {BATCH_TOKENS}",
        "eval_tokens = 32768",
        "log_every = 5",
        "",
        "[base.optimizer]",
        "warmup = 0.05",
        "decay = 0.2",
    ]

    def run(size, d, h, name, mults):
        mult = ", ".join(f"{f} = {v}" for f, v in mults.items())
        return ["", "[[run]]", f'name = "{name}"',
                f"model = {{d_model = {d}, n_layers = 2, n_heads = {h}, d_ff = {d}, n_experts = 8, top_k = 2, "
                f"capacity_factor = 1.25}}",
                f"optimizer = {{lr = {lrs[size]}" + (f", lr_mult = {{{mult}}}}}" if mults else "}")]

    lines += ["", "# ring 0: the base of every size (x1 for every group)"]
    for size, d, h, _ in SIZES:
        lines += run(size, d, h, f"{size}-base", {})
    for k in STEPS:
        lines += ["", f"# ring {k}: multipliers {multiplier(-k)} and {multiplier(k)}"]
        for size, d, h, _ in SIZES:
            for group, fields in GROUPS.items():
                for sign in (-1, 1):
                    m = multiplier(sign * k)
                    lines += run(size, d, h, f"{size}-{group}-x{m:g}", {f: m for f in fields})
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default=str(HERE / "sweep.toml"))
    args = ap.parse_args()
    lrs = base_lrs()
    Path(args.output).write_text(sweep_text(lrs))
    print(f"wrote {args.output}: base LRs {lrs}")


if __name__ == "__main__":
    main()
