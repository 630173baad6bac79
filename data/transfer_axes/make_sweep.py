"""Write data/transfer_axes/sweep.toml: muTransfer of the LR along the item's remaining axes (issue #24 item 3):
depth under CompleteP, weight decay, and token horizon.

data/transfer/ answered width (muP vs SP) and depth (depth-muP, alpha 1/2, vs SP). This study adds, designed
from first principles (the LR paper's protocol and rules could not be recovered; the rules below are the
literature defaults of docs/laws.md section 6, not the paper's), one question per axis: does the optimal
peak LR of a proxy stay optimal on the larger configuration, under each of two parametrizations?

- depth, arm ``completep``: d64l2h4 -> d64l4h4 -> d64l8h4 (x4 in layers) under CompleteP,
  ``MupConfig(base_d_model=64, base_n_layers=2, depth_alpha=1)`` (residual branches times m_L^-1, hidden LR
  unscaled). data/transfer/'s depth-muP arm drifted up 2.1x at x4; CompleteP is the next rule to try.
  LR grid k = -2..2 (5 points), one more than data/transfer/, because that arm's optimum left the grid.
- weight decay (axis ``wd``): the proxy at lambda = 0.1 (data/transfer/'s), then lambda = 0.4 and 1.6 (x4 and
  x16). Two arms: ``fixed``, AdamW's lambda held at the axis value while the LR moves (the per-step shrink
  eta lambda moves with the LR); ``timescale``, the AdamW timescale 1/(eta lambda) held at the axis value as a
  fraction of the run (``weight_decay_timescale``: 1 / (eta_0 lambda steps) with eta_0 the proxy's optimum,
  3.76, 0.94 and 0.23 of the run), so lambda moves against the LR (Wang and Aitchison 2025).
- token horizon (axis ``horizon``): the proxy's 163,840 tokens (640 steps), then x2 and x4 (1,280 and 2,560
  steps; warmup and decay stay 5% and 20% of the run). Two arms: ``fixed``, lambda = 0.1 at every horizon;
  ``timescale``, the timescale held at the proxy's fraction of the run (3.76), so lambda falls as 1/steps.
  The literature's rule is eta proportional to D^-beta_D with beta_D about 0.32-0.35: a drift of 0.63-0.64 at x4.

Every run: d64l2h4 (or deeper on the depth axis), d_ff = d_model, 8 experts top-2, capacity factor 1.25,
QK-norm off, head width 16, muP at the base shape d64l2 (the proxy of every axis, so its multipliers are 1
and only its attention scale, 1/d_head, differs from SP), batch 256 tokens, WSD (5% warmup, 20% linear decay,
AdamW, clipping 1.0), seed 0, as data/transfer/. LR = the proxy's optimum eta_0 = 0.00416 (data/transfer/'s
depth proxy: the `surface` model's MAP optimum at this batch and budget) x 2^k, k = -2..1 on the wd and
horizon axes (the optimum is expected to fall with the horizon).

No run is shared across axes or arms (each axis's proxy runs its own grid; at k = 0 the two arms of the wd
and horizon proxies are the same configuration, run twice, a check of determinism). 15 + 24 + 24 = 63 runs,
named ``<axis>-<shape>-<arm>-lr<peak LR>``, in the order k = 0, -1, 1, -2, 2 so that an interrupted sweep has
each valley's centre first; then one run added once the 63 had landed (``EDGE``): the one valley whose best
run was at the grid's edge (wd1.6, timescale arm, k = +1) gets k = +2: 64 runs.

    PYTHONPATH=<trainer checkout> python data/transfer_axes/make_sweep.py [-o data/transfer_axes/sweep.toml]
"""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: the proxy's optimum LR at this batch and budget (data/transfer/make_sweep.py's LR_PROXY["depth"])
LR_PROXY = 0.00416
TOTAL_TOKENS = 163_840
BATCH_TOKENS = 256
STEPS = TOTAL_TOKENS // BATCH_TOKENS
#: the proxy's weight decay and the AdamW timescale it gives at LR_PROXY, as a fraction of the run
LAMBDA_PROXY = 0.1
TAU_PROXY = 1.0 / (LR_PROXY * LAMBDA_PROXY * STEPS)

#: per axis: its arms, LR grid exponents (in run order), and its settings, the proxy first:
#: (shape label, n_layers, weight decay lambda, total tokens)
AXES = {
    "depth": {"arms": ("completep",), "ks": (0, -1, 1, 2, -2),
              "shapes": (("d64l2h4", 2, LAMBDA_PROXY, TOTAL_TOKENS), ("d64l4h4", 4, LAMBDA_PROXY, TOTAL_TOKENS),
                         ("d64l8h4", 8, LAMBDA_PROXY, TOTAL_TOKENS))},
    "wd": {"arms": ("fixed", "timescale"), "ks": (0, -1, 1, -2),
           "shapes": (("wd0.1", 2, 0.1, TOTAL_TOKENS), ("wd0.4", 2, 0.4, TOTAL_TOKENS),
                      ("wd1.6", 2, 1.6, TOTAL_TOKENS))},
    "horizon": {"arms": ("fixed", "timescale"), "ks": (0, -1, 1, -2),
                "shapes": (("D164k", 2, LAMBDA_PROXY, TOTAL_TOKENS), ("D328k", 2, LAMBDA_PROXY, 2 * TOTAL_TOKENS),
                           ("D655k", 2, LAMBDA_PROXY, 4 * TOTAL_TOKENS))},
}


#: (axis, arm, shape, k) added once the 63 had landed: the one valley whose best run was at the grid's edge
#: (wd1.6 under the timescale arm, at k = +1) gets one more LR past it
EDGE = (("wd", "timescale", "wd1.6", 2),)


def timescale(lam: float) -> float:
    """The AdamW timescale 1/(eta_0 lambda) as a fraction of the proxy's run: the ``timescale`` arm's setting."""
    return 1.0 / (LR_PROXY * lam * STEPS)


def runs() -> list[dict]:
    """Every run in sweep order: name, axis, shape, arm, n_layers, k, lr, total_tokens and its optimizer and muP."""
    plan = [(k, axis, arm, shape) for k in (0, -1, 1, -2, 2) for axis, spec in AXES.items() if k in spec["ks"]
            for arm in spec["arms"] for shape in spec["shapes"]]
    plan += [(k, axis, arm, next(s for s in AXES[axis]["shapes"] if s[0] == shape)) for axis, arm, shape, k in EDGE]
    out = []
    for k, axis, arm, (shape, n_layers, lam, tokens) in plan:
        lr = float(f"{LR_PROXY * 2.0 ** k:.3g}")
        if axis == "depth":
            opt, alpha = f"lr = {lr}", 1.0
        elif arm == "fixed":
            opt, alpha = f"lr = {lr}, weight_decay = {lam}", 0.0
        else:  # the proxy's timescale at this axis value; on the horizon axis lambda = 0.1 at every horizon
            tau = timescale(lam) if axis == "wd" else TAU_PROXY
            opt, alpha = f"lr = {lr}, weight_decay_timescale = {tau:.6g}", 0.0
        out.append({"name": f"{axis}-{shape}-{arm}-lr{lr:.3g}", "axis": axis, "shape": shape, "arm": arm,
                    "n_layers": n_layers, "k": k, "lr": lr, "total_tokens": tokens, "optimizer": opt,
                    "mup": f"{{base_d_model = 64, base_n_layers = 2, depth_alpha = {alpha}}}"})
    return out


def sweep_text() -> str:
    lines = [
        "# muTransfer of the LR along depth (CompleteP), weight decay and token horizon (issue #24 item 3); written",
        "# by data/transfer_axes/make_sweep.py. d64l2h4 proxy, muP base d64l2; LR = 0.00416 x 2^k",
        "",
        "[sweep]",
        'name = "transfer_axes"',
        'preset = "cal-xs"',
        'description = "muTransfer of the LR along depth (CompleteP), weight decay and token horizon"',
        "",
        "[base]",
        "seed = 0",
        f"batch_tokens = {BATCH_TOKENS}",
        "eval_tokens = 32768",
        "log_every = 5",
        "",
        "[base.optimizer]",
        "warmup = 0.05",
        "decay = 0.2",
    ]
    for r in runs():
        lines += [
            "",
            "[[run]]",
            f'name = "{r["name"]}"',
            f"total_tokens = {r['total_tokens']}",
            f"model = {{d_model = 64, n_layers = {r['n_layers']}, n_heads = 4, d_ff = 64, n_experts = 8, top_k = 2, "
            f"capacity_factor = 1.25, qk_norm = false, mup = {r['mup']}}}",
            f"optimizer = {{{r['optimizer']}}}",
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
