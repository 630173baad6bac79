"""The Mixture-of-Experts MLP: float32 top-k softmax router, sort-based dispatch, batched experts.

Tokens are routed in groups of ``S`` tokens (``moe_group_tokens``, default one sequence), so that
the routing of a group never depends on another data shard. Per group, the ``S * k`` assignments
(in token order) are sorted by expert with a stable argsort; an assignment's rank inside its
expert gives its row in the expert's buffer. Token order makes capacity causal: whether a token is
dropped depends only on the tokens before it, so no information flows from later positions
(first-choices-first priority, as in Switch, would let a later token's first choice evict an
earlier token's second choice).

- Capacity routing: each expert has ``C = ceil(capacity_factor * S * k / E)`` rows per group;
  assignments ranked past C are dropped (their contribution is zero; the token still flows through
  the residual) and counted in ``dropped_fraction``. All groups' buffers are laid out as one
  ``[E, G * C, D]`` array, gathered from the tokens with one index array, so the experts run as
  one batched matmul per weight (``einsum("emd,edf->emf")``) with ``capacity_factor`` x the
  useful FLOPs. No ``[tokens, E, C]`` dispatch mask is ever built.
- Dropless routing (``capacity_factor=None``): each expert's rows are padded to a multiple of a
  block of ``blk`` rows (``nb = ceil(S k / blk) + E`` blocks bound any routing), each block knows
  its expert, and the blocks run as one batched matmul against their experts' gathered weights.

Dispatch and combine are gathers, and so are their gradients (`dispatch`, `combine`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from scalinfer.train.config import ModelConfig

__all__ = ["MoeStats", "moe_mlp", "swiglu", "group_tokens", "capacity", "dropless_block"]


class MoeStats(NamedTuple):
    """Router statistics of one layer (scalars unless noted).

    Attributes
    ----------
    balance_loss : E * sum_e f_e P_e (f_e: share of assignments, P_e: mean router probability);
        1 when the load is uniform.
    z_loss : mean over tokens of logsumexp(router_logits)^2.
    dropped_fraction : share of token-expert assignments dropped for capacity.
    load_E : f_e * E per expert (1 = its fair share).
    entropy : mean over tokens of the router's entropy -sum_e p_e log p_e (nats; log E when
        uniform, 0 with one expert); only with ``moe_mlp(..., diagnostics=True)``, else None.
    """

    balance_loss: jax.Array
    z_loss: jax.Array
    dropped_fraction: jax.Array
    load_E: jax.Array
    entropy: jax.Array | None = None


def swiglu(x_MxD, w_gate_DxF, w_up_DxF, w_down_FxD):
    h_MxF = jax.nn.silu(x_MxD @ w_gate_DxF) * (x_MxD @ w_up_DxF)
    return h_MxF @ w_down_FxD


def group_tokens(cfg: ModelConfig) -> int:
    return cfg.moe_group_tokens or cfg.seq_len


def capacity(cfg: ModelConfig, group: int) -> int:
    """Rows per expert per routing group (capacity routing)."""
    c = math.ceil(cfg.capacity_factor * group * cfg.top_k / cfg.n_experts)
    return max(1, min(c, group))


def dropless_block(cfg: ModelConfig, group: int) -> tuple[int, int]:
    """(rows per block, blocks per group) of dropless routing."""
    per_expert = group * cfg.top_k / cfg.n_experts
    blk = int(min(128, max(8, 2 ** math.floor(math.log2(max(per_expert, 1)) - 1))))
    return blk, -(-group * cfg.top_k // blk) + cfg.n_experts


# Dispatch and combine as gathers in both directions. Plain indexing would differentiate into
# scatter-adds over a zero-filled copy; with the inverse index maps at hand, each gradient is a
# gather too (faster for the whole MoE layer on CPU; benchmarks/README.md).


def _take_rows(x_NxD, idx_M):
    """Rows ``idx`` of ``x`` (an index >= N reads zeros)."""
    return jnp.take(x_NxD, idx_M, axis=0, mode="fill", fill_value=0)


@jax.custom_vjp
def dispatch(x_TxD, src_R, row_TxK):
    """Expert buffer rows ``buf[r] = x[src[r]]`` (zeros where ``src[r] >= T``). ``row_TxK`` is the
    inverse map (the row of each token's k-th assignment, >= R when dropped); it makes the
    gradient a gather: dx[t] = sum_k dbuf[row[t, k]]."""
    return _take_rows(x_TxD, src_R)


def _dispatch_fwd(x_TxD, src_R, row_TxK):
    return _take_rows(x_TxD, src_R), (src_R, row_TxK)


def _dispatch_bwd(res, dbuf_RxD):
    src_R, row_TxK = res
    return jnp.sum(_take_rows(dbuf_RxD, row_TxK), axis=1), None, None


dispatch.defvjp(_dispatch_fwd, _dispatch_bwd)


@jax.custom_vjp
def combine(out_RxD, gate_TxK, row_TxK, assign_R):
    """``y[t] = sum_k gate[t, k] * out[row[t, k]]`` (dropped assignments, row >= R, add 0).
    ``assign_R`` is the inverse map (the assignment t * K + k held by row r, >= T * K when empty);
    the gradient for ``out`` is then the gather dout[r] = gate[a] * dy[a // K]."""
    return _combine_fwd(out_RxD, gate_TxK, row_TxK, assign_R)[0]


def _combine_fwd(out_RxD, gate_TxK, row_TxK, assign_R):
    # Elementwise products and sums over k, not einsums: XLA:CPU would make "tkd,tk->td" a
    # batched dot of T tiny matrices.
    picked_TxKxD = _take_rows(out_RxD, row_TxK)
    y_TxD = jnp.sum(picked_TxKxD * gate_TxK[:, :, None], axis=1)
    return y_TxD, (picked_TxKxD, gate_TxK, assign_R)


def _combine_bwd(res, dy_TxD):
    picked_TxKxD, gate_TxK, assign_R = res
    T, K = gate_TxK.shape
    dgate_TxK = jnp.sum(picked_TxKxD * dy_TxD[:, None, :], axis=2)
    scale_R = jnp.take(gate_TxK.reshape(-1), assign_R, mode="fill", fill_value=0)
    dout_RxD = _take_rows(dy_TxD, assign_R // K) * scale_R[:, None].astype(dy_TxD.dtype)
    return dout_RxD, dgate_TxK, None, None


combine.defvjp(_combine_fwd, _combine_bwd)


def _rank_in_expert(expert_A, n_experts):
    """Stable sort of assignments by expert: each assignment's rank inside its expert, and the
    per-expert counts."""
    n = expert_A.shape[0]
    order_A = jnp.argsort(expert_A, stable=True)
    counts_E = jnp.zeros((n_experts,), jnp.int32).at[expert_A].add(1)
    starts_E = jnp.cumsum(counts_E) - counts_E
    rank_sorted = jnp.arange(n, dtype=jnp.int32) - starts_E[expert_A[order_A]]
    rank_A = jnp.zeros((n,), jnp.int32).at[order_A].set(rank_sorted, unique_indices=True)
    return rank_A, counts_E


def _route_capacity(expert_A, n_experts, cap):
    """One group: the row of each assignment in the [E * C] buffer (E * C when dropped), and the
    assignment held by each row (A for an empty row)."""
    n = expert_A.shape[0]
    rank_A, _ = _rank_in_expert(expert_A, n_experts)
    keep_A = rank_A < cap
    row_A = jnp.where(keep_A, expert_A * cap + rank_A, n_experts * cap)
    assign_R = jnp.full((n_experts * cap,), n, jnp.int32).at[row_A].set(
        jnp.arange(n, dtype=jnp.int32), mode="drop")
    return row_A, keep_A, assign_R


def _route_dropless(expert_A, n_experts, blk, nb):
    """One group: the row of each assignment in the [nb * blk] block buffer, the assignment held
    by each row (A for a padding row), and the expert of each block."""
    n = expert_A.shape[0]
    rank_A, counts_E = _rank_in_expert(expert_A, n_experts)
    padded_E = -(-counts_E // blk) * blk
    end_E = jnp.cumsum(padded_E)
    row_A = end_E[expert_A] - padded_E[expert_A] + rank_A
    assign_R = jnp.full((nb * blk,), n, jnp.int32).at[row_A].set(
        jnp.arange(n, dtype=jnp.int32), unique_indices=True)
    block_expert_N = jnp.searchsorted(end_E, jnp.arange(nb) * blk, side="right")
    return row_A, assign_R, jnp.minimum(block_expert_N, n_experts - 1)


def moe_mlp(x_BxLxD, p: dict, cfg: ModelConfig, router_out: float, key=None, train: bool = False,
            diagnostics: bool = False):
    """The MoE (or, with one expert, dense) SwiGLU MLP of one layer.

    ``p`` holds ``w_gate``/``w_up`` [E, D, F], ``w_down`` [E, F, D], ``router`` [D, E] when
    E > 1 and ``shared_gate``/``shared_up``/``shared_down`` with a shared expert. Returns the
    output [B, L, D] and `MoeStats` (with the router entropy when ``diagnostics``, static).
    """
    B, L, D = x_BxLxD.shape
    E = cfg.n_experts
    dt = x_BxLxD.dtype
    x_TxD = x_BxLxD.reshape(B * L, D)
    zero = jnp.zeros((), jnp.float32)
    if E == 1:
        y_TxD = swiglu(x_TxD, p["w_gate"][0], p["w_up"][0], p["w_down"][0])
        stats = MoeStats(jnp.ones((), jnp.float32), zero, zero, jnp.ones((1,), jnp.float32),
                         zero if diagnostics else None)
    else:
        y_TxD, stats = _routed(x_TxD, p, cfg, router_out, key, train, diagnostics)
    if cfg.shared_expert:
        y_TxD = y_TxD + swiglu(x_TxD, p["shared_gate"], p["shared_up"], p["shared_down"])
    return y_TxD.reshape(B, L, D).astype(dt), stats


def _routed(x_TxD, p, cfg: ModelConfig, router_out, key, train, diagnostics=False):
    T, D = x_TxD.shape
    E, K = cfg.n_experts, cfg.top_k
    S = group_tokens(cfg)
    G = T // S
    # Router in float32: small logit differences decide the expert.
    xr_TxD = x_TxD.astype(jnp.float32)
    if train and cfg.router_jitter > 0 and key is not None:
        xr_TxD = xr_TxD * jax.random.uniform(key, xr_TxD.shape, jnp.float32,
                                             1.0 - cfg.router_jitter, 1.0 + cfg.router_jitter)
    router_logits_TxE = (xr_TxD @ p["router"].astype(jnp.float32)) * router_out
    probs_TxE = jax.nn.softmax(router_logits_TxE, axis=-1)
    gate_TxK, expert_TxK = jax.lax.top_k(probs_TxE, K)
    if cfg.router_renormalize and K > 1:
        gate_TxK = gate_TxK / jnp.sum(gate_TxK, axis=-1, keepdims=True)

    load_E = jnp.zeros((E,), jnp.float32).at[expert_TxK.reshape(-1)].add(1.0) / (T * K)
    balance = E * jnp.sum(load_E * jnp.mean(probs_TxE, axis=0))
    z_loss = jnp.mean(jax.nn.logsumexp(router_logits_TxE, axis=-1) ** 2)
    entropy = None
    if diagnostics:
        logp_TxE = jax.nn.log_softmax(router_logits_TxE, axis=-1)
        entropy = -jnp.mean(jnp.sum(probs_TxE * logp_TxE, axis=-1))

    # Assignments per group in token order: [G, A = S*K]; global assignment index = t * K + k.
    expert_GxA = expert_TxK.reshape(G, S * K)
    A = S * K
    w_gate, w_up, w_down = p["w_gate"], p["w_up"], p["w_down"]

    if cfg.capacity_factor is not None:
        C = capacity(cfg, S)
        row_GxA, keep_GxA, assign_GxR = jax.vmap(lambda e: _route_capacity(e, E, C))(expert_GxA)
        # Buffer rows laid out [E, G, C] so that each expert's rows of every group are contiguous.
        g_Gx1 = jnp.arange(G, dtype=jnp.int32)[:, None]
        assign_ExM = jnp.where(assign_GxR < A, assign_GxR + g_Gx1 * A, T * K).reshape(G, E, C) \
            .transpose(1, 0, 2).reshape(E * G * C)
        e_GxA, r_GxA = row_GxA // C, row_GxA % C
        row_TxK = jnp.where(keep_GxA, e_GxA * (G * C) + g_Gx1 * C + r_GxA, E * G * C).reshape(T, K)
        buf_ExMxD = dispatch(x_TxD, assign_ExM // K, row_TxK).reshape(E, G * C, D)
        h_ExMxF = jax.nn.silu(jnp.einsum("emd,edf->emf", buf_ExMxD, w_gate)) * jnp.einsum(
            "emd,edf->emf", buf_ExMxD, w_up)
        out_RxD = jnp.einsum("emf,efd->emd", h_ExMxF, w_down).reshape(E * G * C, D)
        dropped = jnp.mean((~keep_GxA).astype(jnp.float32))
    else:
        blk, nb = dropless_block(cfg, S)
        row_GxA, assign_GxR, block_expert_GxN = jax.vmap(
            lambda e: _route_dropless(e, E, blk, nb))(expert_GxA)
        g_Gx1 = jnp.arange(G, dtype=jnp.int32)[:, None]
        assign_R = jnp.where(assign_GxR < A, assign_GxR + g_Gx1 * A, T * K).reshape(-1)
        row_TxK = (row_GxA + g_Gx1 * (nb * blk)).reshape(T, K)
        buf_GxNxBxD = dispatch(x_TxD, assign_R // K, row_TxK).reshape(G, nb, blk, D)
        wg, wu, wd = w_gate[block_expert_GxN], w_up[block_expert_GxN], w_down[block_expert_GxN]
        h = jax.nn.silu(jnp.einsum("gnbd,gndf->gnbf", buf_GxNxBxD, wg)) * jnp.einsum(
            "gnbd,gndf->gnbf", buf_GxNxBxD, wu)
        out_RxD = jnp.einsum("gnbf,gnfd->gnbd", h, wd).reshape(G * nb * blk, D)
        assign_ExM = assign_R
        dropped = jnp.zeros((), jnp.float32)

    # Combine: each assignment's output, weighted by its gate, summed over k.
    y_TxD = combine(out_RxD, gate_TxK.astype(out_RxD.dtype), row_TxK, assign_ExM)
    return y_TxD, MoeStats(balance, z_loss, dropped, load_E * E, entropy)
