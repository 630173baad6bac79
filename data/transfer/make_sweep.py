"""Write data/transfer/sweep.toml: muTransfer of the LR along width and depth, muP vs SP (issue #24 item 3).

Designed from first principles (the LR paper's transfer protocol could not be recovered): does the optimal
peak LR of a proxy stay optimal on a wider or a deeper model under muP, where it drifts under standard
parametrization (SP)? Two axes, each with a proxy and two larger shapes (2 layers, d_ff = d_model, 8 experts
top-2, capacity factor 1.25, QK-norm off, as data/update_size/):

- width: d32l2h2 -> d64l2h4 -> d128l2h8 (x4 in d_model, head width 16), muP ``MupConfig(base_d_model=32,
  base_n_layers=2)`` (no depth scaling, router as an output layer);
- depth: d64l2h4 -> d64l4h4 -> d64l8h4 (x4 in layers), muP ``MupConfig(base_d_model=64, base_n_layers=2,
  depth_alpha=0.5)`` (depth-muP: residual branches times m_L^-1/2, hidden LR times m_L^-1/2).

Budget, batch, schedule and seed as data/update_size/: 163,840 tokens at batch 256 (640 steps), WSD (5%
warmup, 20% linear decay, AdamW, weight decay 0.1, clipping 1.0), seed 0. LR grid: the proxy's optimum times
2^k, k = -2..1 (4 points a factor 2 apart), the optimum being the stability study's base LR (the `surface`
model's MAP optimum at this batch and budget): d32l2h2 0.00909 for width, d64l2h4 0.00416 for depth. Every
shape of an axis runs the axis's grid in both arms. The grid was to be k = -2..2; k = +2 was cut to fit the
session's CPU budget (about 50 minutes at one worker: d64l8h4 took 122 s, d128l2h8 see README.md), keeping
k = -2 because under SP the optimum is expected to fall with width (the stability study's own optima fall as
d_model^-1.1).

No run is shared: muP at the base shape differs from SP by its attention scale (1/d_head against
1/sqrt(d_head)), and d64l2h4, in both axes, runs different LR grids (and, under muP, different bases) in each.
2 axes x 2 arms x 3 shapes x 4 LRs = 48 runs, named ``<width|depth>-<shape>-<sp|mup>-lr<peak LR>``, in the
order k = 0, -1, +1, -2 so that an interrupted sweep has each shape's centre of the valley first; then 2 runs
added once the 48 had landed (``EDGE``): the two shapes whose best run was at the grid's edge get one more LR
past it, SP d128l2h8 at k = -3 and depth-muP d64l8h4 at k = +2: 50 runs.

    PYTHONPATH=<trainer checkout> python data/transfer/make_sweep.py [-o data/transfer/sweep.toml]
"""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: (name, d_model, n_layers, n_heads) of each axis's shapes, the proxy first
AXES = {
    "width": (("d32l2h2", 32, 2, 2), ("d64l2h4", 64, 2, 4), ("d128l2h8", 128, 2, 8)),
    "depth": (("d64l2h4", 64, 2, 4), ("d64l4h4", 64, 4, 4), ("d64l8h4", 64, 8, 4)),
}
#: the proxy's optimum LR at this batch and budget (data/stability/sweep.toml's base LRs)
LR_PROXY = {"width": 0.00909, "depth": 0.00416}
#: each axis's muP, relative to its proxy
MUP = {"width": "{base_d_model = 32, base_n_layers = 2}",
       "depth": "{base_d_model = 64, base_n_layers = 2, depth_alpha = 0.5}"}
#: LR grid exponents: lr = LR_PROXY[axis] * 2**k, in run order
KS = (0, -1, 1, -2)
#: (axis, shape, muP, k) added after the 48: the two shapes whose best run was at the grid's edge (SP d128l2h8
#: at k = -2, depth-muP d64l8h4 at k = +1), one more point past it each, to bracket their optimum
EDGE = (("width", "d128l2h8", False, -3), ("depth", "d64l8h4", True, 2))
TOTAL_TOKENS = 163_840
BATCH_TOKENS = 256


def runs() -> list[dict]:
    """Every run in sweep order: name, axis, shape, d_model, n_layers, n_heads, k, lr, mup."""
    plan = [(k, axis, mup, shape) for k in KS for axis, shapes in AXES.items() for mup in (False, True)
            for shape, *_ in shapes]
    plan += [(k, axis, mup, shape) for axis, shape, mup, k in EDGE]
    out = []
    for k, axis, mup, shape in plan:
        _, d, n_layers, h = next(s for s in AXES[axis] if s[0] == shape)
        lr = float(f"{LR_PROXY[axis] * 2.0 ** k:.3g}")
        out.append({"name": f"{axis}-{shape}-{'mup' if mup else 'sp'}-lr{lr:.3g}", "axis": axis, "shape": shape,
                    "d_model": d, "n_layers": n_layers, "n_heads": h, "k": k, "lr": lr, "mup": mup})
    return out


def sweep_text() -> str:
    lines = [
        "# muTransfer of the LR along width and depth, muP vs SP (issue #24 item 3); written by data/transfer/make_sweep.py",
        "# width d32l2h2 -> d64l2h4 -> d128l2h8 (muP base d32l2), depth d64l2h4 -> d64l4h4 -> d64l8h4 (depth-muP base",
        "# d64l2, depth_alpha 0.5); LR = the proxy's optimum x 2^k, k = -2..1",
        "",
        "[sweep]",
        'name = "transfer"',
        'preset = "cal-xs"',
        'description = "muTransfer of the LR along width and depth: muP vs SP, 5 LRs per shape"',
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
    for r in runs():
        mup = f", mup = {MUP[r['axis']]}" if r["mup"] else ""
        lines += [
            "",
            "[[run]]",
            f'name = "{r["name"]}"',
            f"model = {{d_model = {r['d_model']}, n_layers = {r['n_layers']}, n_heads = {r['n_heads']}, "
            f"d_ff = {r['d_model']}, n_experts = 8, top_k = 2, capacity_factor = 1.25, qk_norm = false{mup}}}",
            f"optimizer = {{lr = {r['lr']}}}",
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
