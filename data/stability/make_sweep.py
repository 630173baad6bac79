"""Write data/stability/sweep.toml: the QK-norm stability study (issue #24), LR swept past divergence.

For each of the calibration sweep's three smallest MoE sizes (d32l2h2, d48l2h3, d64l2h4), the base LR is the
surface model's optimum at the study's batch and token budget, ``lr_opt_at_batch`` from a MAP fit of
``scalinfer.fit(runs, model="surface", method="map")`` on the calibration table's MoE records
(data/calibration/runs.jsonl, N = N_total). The global LR then runs over base x 2^k, k = -1..7 (x0.5 .. x128,
9 points a factor 2 apart), with ``model.qk_norm`` false (runs ``<size>-lr...``) and true
(``<size>-qkn-lr...``): 3 x 2 x 9 = 54 runs.

Why the grid reaches x128: in the calibration grid at batch 256 the loss passes 1.3x its setting's best (the
surface model's ``divergence_ratio``, past which a run counts as diverged, censored) between 5x and 16x the
optimum without QK-norm, and no run reached a non-finite loss up to 19x (gradient clipping at 1.0). x128
leaves room for QK-norm to move the boundary up by a factor of 8 and still see it crossed; x0.5 .. x2
brackets the optimum, which QK-norm may also move.

The token budget is half the calibration's main run (163,840 tokens, batch 256, no decay branches) to keep
the study near an hour of one CPU core; a divergence that sets in late is then missed, which the censored
fit should treat as the boundary of this budget, not of longer runs.

    PYTHONPATH=<trainer checkout> python data/stability/make_sweep.py [-o data/stability/sweep.toml]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import scalinfer

HERE = Path(__file__).resolve().parent
CALIBRATION = HERE.parent / "calibration" / "runs.jsonl"

# (name, d_model, n_heads, N_total): the calibration sweep's three smallest MoE shapes (2 layers,
# d_ff = d_model, 8 experts top-2, capacity factor 1.25)
SIZES = (("d32l2h2", 32, 2, 58_016), ("d48l2h3", 48, 3, 130_032), ("d64l2h4", 64, 4, 230_720))
TOTAL_TOKENS = 163_840
BATCH_TOKENS = 256
STEPS = range(-1, 8)     # LR = base x 2^k


def base_lrs() -> dict[str, float]:
    """The surface model's MAP optimum LR at (N_total, TOTAL_TOKENS, BATCH_TOKENS) per size, 3 significant digits."""
    runs = scalinfer.load_runs(str(CALIBRATION), where="n_experts > 1")
    fit = scalinfer.fit(runs, model="surface", method="map")
    out = {}
    for name, _, _, n in SIZES:
        p = fit.predict(N=n, D=TOTAL_TOKENS, batch=BATCH_TOKENS)
        out[name] = float(f"{float(np.median(p.draws['lr_opt_at_batch'])):.3g}")
    return out


def sweep_text(lrs: dict[str, float]) -> str:
    lines = [
        "# QK-norm stability study (issue #24); written by data/stability/make_sweep.py",
        "# base LR per size: the surface model's MAP optimum at D = 163,840 tokens, batch 256 tokens",
        "# (lr_opt_at_batch; fit on data/calibration/runs.jsonl, MoE records, N = N_total):",
        *(f"#   {name}: {lrs[name]}" for name, *_ in SIZES),
        "# LR = base x 2^k, k = -1..7, QK-norm off and on",
        "",
        "[sweep]",
        'name = "stability"',
        'preset = "cal-xs"',
        'description = "LR past divergence with QK-norm off and on, three sizes"',
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
    for name, d, h, _ in SIZES:
        grid = ", ".join(f"{lrs[name] * 2.0 ** k:.3g}" for k in STEPS)
        for qk in (False, True):
            lines += [
                "",
                "[[grid]]",
                f'name = "{name}{"-qkn" if qk else ""}"',
                f"model = {{d_model = {d}, n_layers = 2, n_heads = {h}, d_ff = {d}, n_experts = 8, top_k = 2, "
                f"capacity_factor = 1.25, qk_norm = {'true' if qk else 'false'}}}",
                "[grid.axes]",
                f'"optimizer.lr" = [{grid}]',
            ]
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
