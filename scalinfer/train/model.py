"""Decoder-only MoE transformer as plain pytrees of arrays and pure functions.

Pre-norm blocks (RMSNorm), rotary positions, optional QK-norm, causal softmax attention, and the
MoE SwiGLU MLP of `scalinfer.train.moe`. Layers are stacked on a leading axis. Up to
`MAX_UNROLLED_LAYERS` layers the forward pass is unrolled: ``lax.scan`` would store each layer's
activations for the backward pass in stacked buffers that XLA zero-fills every step (a sizeable
part of a step on CPU at calibration sizes); deeper models use ``lax.scan`` to keep compile time flat.
Parameters::

    embed        [V, D]
    blocks       attn_norm [L, D], wqkv [L, D, 3, H, K], wo [L, H, K, D], (q_norm, k_norm [L, K]),
                 mlp_norm [L, D], w_gate / w_up [L, E, D, F], w_down [L, E, F, D],
                 (router [L, D, E]), (shared_gate / shared_up [L, D, F], shared_down [L, F, D])
    final_norm   [D]
    lm_head      [D, V]

Parameter counts follow the run table (`scalinfer.runs.schema`): N is non-embedding, so it
excludes the embedding and the LM head and includes everything else (norm gains and router too);
for MoE, ``N_active`` counts top_k of the n_experts routed experts.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scalinfer.train import moe
from scalinfer.train.config import ModelConfig
from scalinfer.train.mup import Multipliers, multipliers

__all__ = ["init_params", "forward", "loss_fn", "Aux", "ParamCounts", "param_counts",
           "flops_per_token", "module_of"]

Params = dict
MAX_UNROLLED_LAYERS = 8


class Aux(NamedTuple):
    """Per-layer diagnostics of a forward pass (arrays with a leading layer axis).

    Attributes
    ----------
    moe : `scalinfer.train.moe.MoeStats` per layer.
    rms_L : RMS of the residual stream after each block.
    attn_rms_L, mlp_rms_L : RMS of each block's attention and MLP branch outputs.
    attn_logit_max_L : the largest pre-softmax attention logit (q.k times the attention scale)
        over batch, heads and causal positions; only with ``forward(..., diagnostics=True)``,
        else None.
    """

    moe: moe.MoeStats
    rms_L: jax.Array
    attn_rms_L: jax.Array
    mlp_rms_L: jax.Array
    attn_logit_max_L: jax.Array | None = None


def init_params(cfg: ModelConfig, seed: int) -> Params:
    """Initial parameters (float32 NumPy arrays; put them on devices with ``jax.device_put``).

    Init stds per `scalinfer.train.mup`. Drawn with NumPy's PCG64 from ``seed``: the same on every
    machine, and free of the several seconds per tensor shape that compiling JAX's threefry
    normal sampler costs on CPU."""
    V, D, L, H, K = cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_head
    E, F = cfg.n_experts, cfg.d_ff
    mult = multipliers(cfg)
    rng = np.random.default_rng(seed)

    def normal(shape, std):
        return (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)

    ones = lambda *shape: np.ones(shape, np.float32)  # noqa: E731
    blocks = {
        "attn_norm": ones(L, D),
        "wqkv": normal((L, D, 3, H, K), D ** -0.5),
        "wo": normal((L, H, K, D), (H * K) ** -0.5),
        "mlp_norm": ones(L, D),
        "w_gate": normal((L, E, D, F), D ** -0.5),
        "w_up": normal((L, E, D, F), D ** -0.5),
        "w_down": normal((L, E, F, D), F ** -0.5),
    }
    if cfg.qk_norm:
        blocks["q_norm"] = ones(L, K)
        blocks["k_norm"] = ones(L, K)
    if E > 1:
        blocks["router"] = normal((L, D, E), mult.router_init_std)
    if cfg.shared_expert:
        blocks["shared_gate"] = normal((L, D, F), D ** -0.5)
        blocks["shared_up"] = normal((L, D, F), D ** -0.5)
        blocks["shared_down"] = normal((L, F, D), F ** -0.5)
    return {
        "embed": normal((V, D), cfg.init_std_embed),
        "blocks": blocks,
        "final_norm": ones(D),
        "lm_head": normal((D, V), mult.head_init_std),
    }


def module_of(path: tuple[str, ...]) -> str:
    """The module group of a parameter (for per-module learning rates): ``embedding``,
    ``attention``, ``experts``, ``router``, ``lm_head`` or ``norms``."""
    name = path[-1]
    if name == "embed":
        return "embedding"
    if name == "lm_head":
        return "lm_head"
    if name.endswith("norm"):
        return "norms"
    if name in ("wqkv", "wo"):
        return "attention"
    if name == "router":
        return "router"
    if name.startswith(("w_", "shared_")):
        return "experts"
    raise ValueError(f"no module group for parameter {'/'.join(path)}")


def rms_norm(x, scale, eps: float = 1e-6):
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * scale).astype(x.dtype)


def _rope_tables(seq_len: int, d_head: int, theta: float):
    inv_freq = theta ** (-jnp.arange(0, d_head, 2, dtype=jnp.float32) / d_head)
    angles_LxK2 = jnp.arange(seq_len, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.cos(angles_LxK2), jnp.sin(angles_LxK2)


def _rope(x_BxLxHxK, cos_LxK2, sin_LxK2):
    x1, x2 = jnp.split(x_BxLxHxK, 2, axis=-1)
    c = cos_LxK2[None, :, None, :].astype(x1.dtype)
    s = sin_LxK2[None, :, None, :].astype(x1.dtype)
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _attention(h_BxLxD, p, cfg: ModelConfig, cos, sin, scale, diagnostics: bool = False):
    B, L, D = h_BxLxD.shape
    H, K = p["wqkv"].shape[-2:]
    qkv_BxLx3xHxK = _matmul(h_BxLxD, p["wqkv"].reshape(D, 3 * H * K)).reshape(B, L, 3, H, K)
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = (qkv_BxLx3xHxK[:, :, i] for i in range(3))
    if cfg.qk_norm:
        q_BxLxHxK = rms_norm(q_BxLxHxK, p["q_norm"])
        k_BxLxHxK = rms_norm(k_BxLxHxK, p["k_norm"])
    q_BxLxHxK = _rope(q_BxLxHxK, cos, sin)
    k_BxLxHxK = _rope(k_BxLxHxK, cos, sin)
    att_BxHxLxL = jnp.einsum("blhk,bmhk->bhlm", q_BxLxHxK, k_BxLxHxK).astype(jnp.float32) * scale
    causal_LxL = jnp.tril(jnp.ones((L, L), bool))
    att_BxHxLxL = jnp.where(causal_LxL, att_BxHxLxL, -1e30)
    logit_max = jnp.max(att_BxHxLxL) if diagnostics else None  # never a masked -1e30: the diagonal is causal
    probs_BxHxLxL = jax.nn.softmax(att_BxHxLxL, axis=-1).astype(v_BxLxHxK.dtype)
    o_BxLxHxK = jnp.einsum("bhlm,bmhk->blhk", probs_BxHxLxL, v_BxLxHxK)
    return _matmul(o_BxLxHxK.reshape(B, L, H * K), p["wo"].reshape(H * K, D)), logit_max


def _matmul(x_BxLxD, w_DxF):
    """``x @ w`` over the last axis, as one 2-D matmul of the B * L rows. The 3-D einsum ``bld,df->blf`` is the
    same product, but its gradient for ``w`` contracts two axes (b and l), which XLA:CPU runs several times
    slower than the 2-D matmul's (benchmarks/README.md, "train_speed.py")."""
    B, L, D = x_BxLxD.shape
    return (x_BxLxD.reshape(B * L, D) @ w_DxF).reshape(B, L, w_DxF.shape[-1])


def _rms(x):
    return jnp.sqrt(jnp.mean(jnp.square(x.astype(jnp.float32))))


def forward(params: Params, tokens_BxL: jax.Array, cfg: ModelConfig, key: jax.Array | None = None,
            train: bool = False, mult: Multipliers | None = None,
            diagnostics: bool = False) -> tuple[jax.Array, Aux]:
    """Logits [B, L, V] (float32) of next-token prediction, and per-layer `Aux`.

    ``diagnostics`` (static) adds the max attention logit and the router entropy to `Aux` (for
    `scalinfer.train.diagnostics`); off, the program is the plain forward. ``mult`` overrides ``multipliers(cfg)`` (its fields may be traced arrays: the coordinate
    check compiles one function for muP and standard parametrization)."""
    mult = multipliers(cfg) if mult is None else mult
    dt = jnp.dtype(cfg.dtype)
    B, L = tokens_BxL.shape
    cast = lambda t: jax.tree.map(lambda a: a.astype(dt) if a.dtype != dt else a, t)  # noqa: E731
    x_BxLxD = params["embed"].astype(dt)[tokens_BxL]
    cos, sin = _rope_tables(L, cfg.d_head, cfg.rope_theta)
    keys = (jax.random.split(key, cfg.n_layers) if key is not None
            else jnp.zeros((cfg.n_layers, 2), jnp.uint32))

    def block(x_BxLxD, layer):
        p, k = layer
        router = p.get("router")
        p = cast(p)
        if router is not None:
            p["router"] = router  # stays float32
        a_BxLxD, logit_max = _attention(rms_norm(x_BxLxD, p["attn_norm"]), p, cfg, cos, sin, mult.attn_scale,
                                        diagnostics)
        x_BxLxD = x_BxLxD + mult.residual * a_BxLxD
        m_BxLxD, stats = moe.moe_mlp(rms_norm(x_BxLxD, p["mlp_norm"]), p, cfg, mult.router_out,
                                     k if key is not None else None, train, diagnostics)
        x_BxLxD = x_BxLxD + mult.residual * m_BxLxD
        return x_BxLxD, (stats, _rms(x_BxLxD), _rms(a_BxLxD), _rms(m_BxLxD), logit_max)

    if cfg.n_layers <= MAX_UNROLLED_LAYERS:
        outs = []
        for i in range(cfg.n_layers):
            x_BxLxD, out = block(x_BxLxD, (jax.tree.map(lambda a: a[i], params["blocks"]), keys[i]))
            outs.append(out)
        stats, rms_L, attn_rms_L, mlp_rms_L, logit_max_L = jax.tree.map(lambda *a: jnp.stack(a), *outs)
    else:
        x_BxLxD, (stats, rms_L, attn_rms_L, mlp_rms_L, logit_max_L) = jax.lax.scan(
            block, x_BxLxD, (params["blocks"], keys))
    x_BxLxD = rms_norm(x_BxLxD, params["final_norm"].astype(dt))
    logits_BxLxV = _matmul(x_BxLxD, params["lm_head"].astype(dt))
    logits_BxLxV = logits_BxLxV.astype(jnp.float32) * mult.head_out
    return logits_BxLxV, Aux(stats, rms_L, attn_rms_L, mlp_rms_L, logit_max_L)


def cross_entropy(logits_BxLxV, targets_BxL):
    """Per-token cross-entropy in nats [B, L]."""
    logz_BxL = jax.nn.logsumexp(logits_BxLxV, axis=-1)
    picked_BxL = jnp.take_along_axis(logits_BxLxV, targets_BxL[..., None], axis=-1)[..., 0]
    return logz_BxL - picked_BxL


def loss_fn(params: Params, batch_BxL1: jax.Array, cfg: ModelConfig, key: jax.Array | None = None,
            train: bool = True, diagnostics: bool = False):
    """Training objective on a batch of ``seq_len + 1`` token windows.

    Returns ``(objective, metrics)``: objective = cross-entropy + router_aux_weight * balance loss +
    router_z_weight * z-loss (router terms averaged over layers); metrics hold ``loss`` (the
    cross-entropy, nats/token) and the router statistics; with ``diagnostics`` (static) also
    ``aux``, the forward's `Aux` with its diagnostics.
    """
    inputs_BxL, targets_BxL = batch_BxL1[:, :-1], batch_BxL1[:, 1:]
    logits_BxLxV, aux = forward(params, inputs_BxL, cfg, key, train, diagnostics=diagnostics)
    ce = jnp.mean(cross_entropy(logits_BxLxV, targets_BxL))
    balance = jnp.mean(aux.moe.balance_loss)
    z_loss = jnp.mean(aux.moe.z_loss)
    objective = ce
    if cfg.is_moe:
        objective = objective + cfg.router_aux_weight * balance + cfg.router_z_weight * z_loss
    metrics = {
        "loss": ce, "router_balance": balance, "router_z": z_loss,
        "dropped_fraction": jnp.mean(aux.moe.dropped_fraction),
        "expert_load_max": jnp.max(aux.moe.load_E),
    }
    if diagnostics:
        metrics["aux"] = aux
    return objective, metrics


class ParamCounts(NamedTuple):
    """Parameter counts.

    Attributes
    ----------
    total, active : all parameters; those a token uses (top_k of n_experts routed experts).
    non_embedding, non_embedding_active : N_total and N_active of the run table (no embedding,
        no LM head).
    embedding : embedding plus LM head.
    """

    total: int
    active: int
    non_embedding: int
    non_embedding_active: int
    embedding: int


def param_counts(cfg: ModelConfig) -> ParamCounts:
    D, L, H, K, E, F = cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.n_experts, cfg.d_ff
    attn = 4 * D * H * K + (2 * K if cfg.qk_norm else 0)
    expert = 3 * D * F
    router = D * E if E > 1 else 0
    shared = 3 * D * F if cfg.shared_expert else 0
    norms = 2 * D
    per_layer = attn + norms + router + shared + E * expert
    per_layer_active = attn + norms + router + shared + cfg.top_k * expert
    emb = 2 * cfg.vocab_size * D
    ne, ne_act = L * per_layer + D, L * per_layer_active + D
    return ParamCounts(total=ne + emb, active=ne_act + emb, non_embedding=ne,
                       non_embedding_active=ne_act, embedding=emb)


def flops_per_token(cfg: ModelConfig) -> float:
    """Model FLOPs per trained token (forward + backward = 3 x forward matmul FLOPs).

    Counts the useful matmuls: attention projections, the active experts (top_k of them, not the
    capacity padding), the shared expert, the router, the LM head, and the two attention matmuls
    over the full L x L square (the PaLM convention, 12 L H K T per token for training); norms,
    softmax and the dispatch are not counted.
    """
    D, L, H, K, F, T = cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_ff, cfg.seq_len
    per_layer = 4 * D * H * K + cfg.top_k * 3 * D * F
    per_layer += 3 * D * F if cfg.shared_expert else 0
    per_layer += D * cfg.n_experts if cfg.is_moe else 0
    forward = 2 * (L * per_layer + D * cfg.vocab_size) + L * 4 * T * H * K
    return 3.0 * forward
