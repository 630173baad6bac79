"""Stability and feature-learning diagnostics of a train step (issue #24 item 2).

Every ``TrainConfig.diagnostics_every`` steps (0 = never) the loop runs a second compiled train step,
``make_train_step(..., diagnostics=True)``: the same update (its forward asks `model.forward` for
its diagnostics with a static flag, so the ordinary step's program is unchanged), which also
returns `summarize`'s values. They are written as one JSON line per due step to
``diagnostics.jsonl`` in the run folder (``diagnostics-<branch>.jsonl`` for a decay branch), with
the same truncate-on-resume as ``metrics.jsonl``; `read_diagnostics` reads them into a DataFrame.

Quantities (columns; ``g`` a module group of `scalinfer.train.optimizer.GROUPS` present in the
model, ``l`` a layer index)::

    update_rel/g         ||dW_g|| / ||W_g||: Frobenius norms over all of the group's parameters,
                         W_g before the step's update, dW_g the update applied (lr_t included)
    param_rms/g          sqrt(mean(W_g^2)) after the update
    act_rms/Ll           RMS of the residual stream after block l (the block's output)
    attn_out_rms/Ll      RMS of block l's attention branch output (before the residual multiplier)
    mlp_out_rms/Ll       RMS of block l's MLP branch output
    attn_logit_max/Ll    max over batch, heads and causal positions of the pre-softmax logit
                         q.k * attn_scale (after QK-norm and rotary positions)
    router_entropy/Ll    mean over tokens of -sum_e p_e log p_e (nats; log E when uniform)
    router_load_max/Ll   max_e E f_e, f_e the share of token-expert assignments to expert e
    router_load_min/Ll   min_e E f_e (both 1 under a uniform load)
    router_load_cv/Ll    std_e(f_e) / mean_e(f_e), the coefficient of variation (0 when uniform)

The router columns are absent for a dense model (one expert). Activation statistics cover all
micro-batches of the step: RMS from the mean of their mean squares, the max logit the max of theirs,
entropy and load their means (equal-sized micro-batches, so these are the step's own values).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from scalinfer.errors import TrainError
from scalinfer.train.model import Aux
from scalinfer.train.optimizer import GROUPS, module_labels

__all__ = ["activation_stats", "accumulate", "average", "summarize", "to_record", "read_diagnostics"]

_MAX_KEYS = ("attn_logit_max_L",)


def activation_stats(aux: Aux) -> dict[str, jax.Array]:
    """The per-layer activation statistics of one forward (``forward(..., diagnostics=True)``), in a
    form that micro-batches `accumulate`: mean squares, max logits, entropies, loads."""
    return {"act_ms_L": jnp.square(aux.rms_L), "attn_out_ms_L": jnp.square(aux.attn_rms_L),
            "mlp_out_ms_L": jnp.square(aux.mlp_rms_L), "attn_logit_max_L": aux.attn_logit_max_L,
            "router_entropy_L": aux.moe.entropy, "router_load_LxE": aux.moe.load_E}


def accumulate(total: dict, new: dict, i: jax.Array) -> dict:
    """Fold micro-batch ``i``'s `activation_stats` into the running ``total`` (max for the max logit,
    sums otherwise; ``total`` is ignored when i == 0, so any initial value works)."""
    first = i == 0
    return {k: jnp.where(first, v, jnp.maximum(total[k], v) if k in _MAX_KEYS else total[k] + v)
            for k, v in new.items()}


def average(total: dict, n: jax.Array) -> dict:
    """The step's statistics from the `accumulate`d total of ``n`` micro-batches."""
    return {k: v if k in _MAX_KEYS else v / n.astype(v.dtype) for k, v in total.items()}


def _group_sums(tree, labels) -> dict[str, tuple[jax.Array, int]]:
    """Sum of squares and element count per module group."""
    out: dict[str, tuple[jax.Array, int]] = {}
    for leaf, g in zip(jax.tree.leaves(tree), jax.tree.leaves(labels)):
        sq = jnp.sum(jnp.square(leaf.astype(jnp.float32)))
        s, c = out.get(g, (jnp.zeros((), jnp.float32), 0))
        out[g] = (s + sq, c + leaf.size)
    return out


def summarize(acts: dict, params, updates, new_params) -> dict[str, jax.Array]:
    """All diagnostics of a step (pure; jit it). ``acts``: the step's `average`d `activation_stats`;
    ``params`` before the update, ``updates`` the update applied, ``new_params`` after it. Returns
    scalars ``update_rel/g``, ``param_rms/g`` and per-layer arrays [L] named as the module
    docstring's columns without the ``/Ll`` suffix."""
    labels = module_labels(params)
    w, dw, w_new = (_group_sums(t, labels) for t in (params, updates, new_params))
    out = {}
    for g in GROUPS:
        if g in w:
            out[f"update_rel/{g}"] = jnp.sqrt(dw[g][0]) / jnp.sqrt(w[g][0])
            out[f"param_rms/{g}"] = jnp.sqrt(w_new[g][0] / w_new[g][1])
    out["act_rms"] = jnp.sqrt(acts["act_ms_L"])
    out["attn_out_rms"] = jnp.sqrt(acts["attn_out_ms_L"])
    out["mlp_out_rms"] = jnp.sqrt(acts["mlp_out_ms_L"])
    out["attn_logit_max"] = acts["attn_logit_max_L"]
    load_LxE = acts["router_load_LxE"]
    if load_LxE.shape[-1] > 1:
        out["router_entropy"] = acts["router_entropy_L"]
        out["router_load_max"] = jnp.max(load_LxE, axis=-1)
        out["router_load_min"] = jnp.min(load_LxE, axis=-1)
        out["router_load_cv"] = jnp.std(load_LxE, axis=-1) / jnp.mean(load_LxE, axis=-1)
    return out


def to_record(diag: dict) -> dict[str, float]:
    """`summarize`'s values (fetched to the host) as flat JSON columns: a per-layer array ``x``
    becomes ``x/L0``, ``x/L1``, ..."""
    rec = {}
    for k, v in diag.items():
        a = np.asarray(v, np.float64)
        if a.ndim == 0:
            rec[k] = float(a)
        else:
            rec.update({f"{k}/L{i}": float(x) for i, x in enumerate(a.reshape(-1))})
    return rec


def read_diagnostics(run_dir: str | Path, branch: str | None = None):
    """The diagnostics of a run folder as a `pandas.DataFrame`, one row per due step (columns
    ``step``, ``tokens``, ``lr`` and the module docstring's quantities; null values, a diverged
    step's, are NaN). ``branch`` reads a decay branch's file. A missing file or a damaged line is a
    `TrainError` naming it."""
    import json

    import pandas as pd

    path = Path(run_dir) / (f"diagnostics-{branch}.jsonl" if branch else "diagnostics.jsonl")
    if not path.is_file():
        raise TrainError(f"{path} does not exist: the run was trained without diagnostics "
                         f"(set diagnostics_every=K, K > 0) or {run_dir} is not a run folder")
    rows = []
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines):
                break  # the torn last line of a killed run (its resume removes it)
            raise TrainError(f"{path}: line {i} is not a JSON record ({e.msg}); the diagnostics log is damaged") \
                from None
    return pd.DataFrame(rows).astype(float).astype({"step": int, "tokens": int}) if rows else \
        pd.DataFrame(columns=["step", "tokens", "lr"])
