"""Write data/update_size/sweep.toml: update sizes under the global-LR optimum vs muP (issue #24 item 2).

Designed from first principles (the LR paper's protocol for its "uniform update magnitudes" explanation could
not be recovered): does muP make the relative update ||dW|| / ||W|| of each module group the same across
widths, where standard parametrization (SP) does not, and what does SP do at an LR transferred unchanged?

Sizes, token budget and schedule are the QK-norm stability study's (data/stability/): the calibration sweep's
three smallest MoE shapes d32l2h2, d48l2h3, d64l2h4 (2 layers, d_ff = d_model, 8 experts top-2, capacity
factor 1.25, QK-norm off), 163,840 tokens at batch 256, WSD (5% warmup, 20% linear decay), seed 0. Three arms:

- ``sp`` at each size's own optimum: the stability study's base LRs, the surface model's MAP optimum at this
  batch and budget (data/stability/make_sweep.py): d32 0.00909, d48 0.00575, d64 0.00416 (the global LR tuned
  per size);
- ``sp`` at the smallest size's optimum transferred unchanged: 0.00909 at every size;
- ``mup`` (``MupConfig(base_d_model=32, base_n_layers=2)``, no depth scaling, router as an output layer) at
  0.00909 at every size: hidden matrices get 0.00909 x 32 / d_model, the LM head and router outputs are
  multiplied by 32 / d_model.

The first two coincide at d32 (one run), so 8 runs, named ``<size>-<sp|mup>-lr<peak LR>``. Every run records
`scalinfer.train.diagnostics` every 10 steps (``diagnostics.jsonl``: 64 rows of a 640-step run).

    PYTHONPATH=<trainer checkout> python data/update_size/make_sweep.py [-o data/update_size/sweep.toml]
"""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (name, d_model, n_heads): the stability study's sizes
SIZES = (("d32l2h2", 32, 2), ("d48l2h3", 48, 3), ("d64l2h4", 64, 4))
#: each size's optimum LR at this batch and budget (data/stability/sweep.toml's base LRs)
LR_OPT = {"d32l2h2": 0.00909, "d48l2h3": 0.00575, "d64l2h4": 0.00416}
LR_TRANSFER = LR_OPT["d32l2h2"]
MUP = "{base_d_model = 32, base_n_layers = 2}"
TOTAL_TOKENS = 163_840
BATCH_TOKENS = 256
DIAGNOSTICS_EVERY = 10


def runs() -> list[tuple[str, str, int, int, float, bool]]:
    """(run name, size, d_model, n_heads, peak LR, muP) of every run, in sweep order."""
    out = []
    for name, d, h in SIZES:
        for lr, mup in sorted({(LR_OPT[name], False), (LR_TRANSFER, False), (LR_TRANSFER, True)}):
            out.append((f"{name}-{'mup' if mup else 'sp'}-lr{lr:.3g}", name, d, h, lr, mup))
    return out


def sweep_text() -> str:
    lines = [
        "# Update sizes under the global-LR optimum vs muP (issue #24 item 2); written by data/update_size/make_sweep.py",
        "# SP at each size's optimum LR (data/stability's base LRs), SP at d32's optimum transferred unchanged,",
        "# muP (base d_model 32, 2 layers) at d32's optimum; diagnostics every 10 steps",
        "",
        "[sweep]",
        'name = "update_size"',
        'preset = "cal-xs"',
        'description = "update sizes per module group: SP at the per-size optimum, SP transferred, muP"',
        "",
        "[base]",
        "seed = 0",
        f"total_tokens = {TOTAL_TOKENS}",
        f"batch_tokens = {BATCH_TOKENS}",
        "eval_tokens = 32768",
        "log_every = 5",
        f"diagnostics_every = {DIAGNOSTICS_EVERY}",
        "",
        "[base.optimizer]",
        "warmup = 0.05",
        "decay = 0.2",
    ]
    for run, _, d, h, lr, mup in runs():
        lines += [
            "",
            "[[run]]",
            f'name = "{run}"',
            f"model = {{d_model = {d}, n_layers = 2, n_heads = {h}, d_ff = {d}, n_experts = 8, top_k = 2, "
            f"capacity_factor = 1.25, qk_norm = false{f', mup = {MUP}' if mup else ''}}}",
            f"optimizer = {{lr = {lr}}}",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default=str(HERE / "sweep.toml"))
    args = ap.parse_args()
    Path(args.output).write_text(sweep_text())
    print(f"wrote {args.output}: {len(runs())} runs")


if __name__ == "__main__":
    main()
