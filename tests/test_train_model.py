"""The MoE transformer: routing against a dense reference, capacity drops, counts, causality."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from scalinfer.train import model, moe
from scalinfer.train.config import ModelConfig

BASE = ModelConfig(vocab_size=256, d_model=16, n_layers=2, n_heads=2, d_ff=8, n_experts=4, top_k=2,
                   seq_len=16, capacity_factor=1.25)


def _layer(cfg, seed=0):
    return jax.tree.map(lambda a: a[0], model.init_params(cfg, seed)["blocks"])


def _reference(x_BxLxD, p, cfg, drop_mask_TxK=None):
    """Every expert on every token, then pick: the dense-mask MoE the dispatch must equal."""
    x = np.asarray(x_BxLxD, np.float64).reshape(-1, cfg.d_model)
    logits = x @ np.asarray(p["router"], np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :cfg.top_k]
    gate = np.take_along_axis(probs, top, -1)
    if cfg.top_k > 1:
        gate /= gate.sum(-1, keepdims=True)
    silu = lambda z: z / (1 + np.exp(-z))  # noqa: E731
    y = np.zeros_like(x)
    for t in range(len(x)):
        for j, e in enumerate(top[t]):
            if drop_mask_TxK is not None and drop_mask_TxK[t, j]:
                continue
            w = {k: np.asarray(p[k][e], np.float64) for k in ("w_gate", "w_up", "w_down")}
            y[t] += gate[t, j] * ((silu(x[t] @ w["w_gate"]) * (x[t] @ w["w_up"])) @ w["w_down"])
    return y.reshape(x_BxLxD.shape), top


@pytest.mark.parametrize("top_k, capacity_factor", [(2, None), (1, None), (4, None), (2, 4.0)])
def test_dispatch_equals_dense_reference(top_k, capacity_factor):
    cfg = dataclasses.replace(BASE, top_k=top_k, capacity_factor=capacity_factor)
    p = _layer(cfg)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(3, cfg.seq_len, cfg.d_model)), jnp.float32)
    y, stats = jax.jit(lambda x, p: moe.moe_mlp(x, p, cfg, 1.0))(x, p)
    ref, _ = _reference(x, p, cfg)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=2e-4, atol=2e-5)
    assert float(stats.dropped_fraction) == 0.0   # dropless, or capacity = the whole group


def test_capacity_drops_are_counted_and_zeroed():
    cfg = dataclasses.replace(BASE, capacity_factor=0.5)
    p = _layer(cfg, seed=2)
    x = jnp.asarray(np.random.default_rng(3).normal(size=(3, cfg.seq_len, cfg.d_model)), jnp.float32)
    y, stats = jax.jit(lambda x, p: moe.moe_mlp(x, p, cfg, 1.0))(x, p)
    _, top = _reference(x, p, cfg)
    # Capacity per group (one sequence), served in token order (causal).
    S, K, E = cfg.seq_len, cfg.top_k, cfg.n_experts
    C = math.ceil(0.5 * S * K / E)
    assert moe.capacity(cfg, S) == C
    dropped = np.zeros(top.shape, bool)
    for g in range(3):
        used = np.zeros(E, int)
        for s in range(S):
            for k in range(K):
                e = top[g * S + s, k]
                dropped[g * S + s, k] = used[e] >= C
                used[e] += 1
    assert float(stats.dropped_fraction) == pytest.approx(dropped.mean())
    assert dropped.mean() >= 0.5 - 1e-9   # at most half the assignments fit at capacity factor 0.5
    ref, _ = _reference(x, p, cfg, drop_mask_TxK=dropped)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=2e-4, atol=2e-5)


def _dense_mask_moe(x_BxLxD, p, cfg, keep_TxK):
    """Differentiable JAX reference: every expert on every token, then a masked pick."""
    x_TxD = x_BxLxD.reshape(-1, cfg.d_model)
    probs_TxE = jax.nn.softmax(x_TxD @ p["router"], axis=-1)
    gate_TxK, top_TxK = jax.lax.top_k(probs_TxE, cfg.top_k)
    gate_TxK = gate_TxK / jnp.sum(gate_TxK, axis=-1, keepdims=True)
    ys_TxExD = jnp.stack([moe.swiglu(x_TxD, p["w_gate"][e], p["w_up"][e], p["w_down"][e])
                          for e in range(cfg.n_experts)], axis=1)
    picked_TxKxD = jnp.take_along_axis(ys_TxExD, top_TxK[..., None], axis=1)
    return jnp.einsum("tk,tkd->td", gate_TxK * keep_TxK, picked_TxKxD).reshape(x_BxLxD.shape)


@pytest.mark.parametrize("capacity_factor", [None, 0.5])
def test_dispatch_gradients_equal_dense_reference(capacity_factor):
    """The gather-only custom VJPs of dispatch and combine give the true gradients."""
    cfg = dataclasses.replace(BASE, capacity_factor=capacity_factor)
    p = {k: v for k, v in _layer(cfg, seed=4).items() if k in ("router", "w_gate", "w_up", "w_down")}
    x = jnp.asarray(np.random.default_rng(5).normal(size=(2, cfg.seq_len, cfg.d_model)), jnp.float32)
    target = jnp.asarray(np.random.default_rng(6).normal(size=x.shape), jnp.float32)
    _, top = _reference(x, p, cfg)
    keep = np.ones(top.shape, np.float32)
    if capacity_factor is not None:   # the same drops as the dispatch (token order, per sequence)
        C = moe.capacity(cfg, cfg.seq_len)
        for g in range(2):
            used = np.zeros(cfg.n_experts, int)
            for t in range(g * cfg.seq_len, (g + 1) * cfg.seq_len):
                for k in range(cfg.top_k):
                    keep[t, k] = used[top[t, k]] < C
                    used[top[t, k]] += 1
        assert keep.mean() < 0.9
    loss = lambda x, p: jnp.sum((moe.moe_mlp(x, p, cfg, 1.0)[0] - target) ** 2)  # noqa: E731
    ref = lambda x, p: jnp.sum((_dense_mask_moe(x, p, cfg, jnp.asarray(keep)) - target) ** 2)  # noqa: E731
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, p)
    want = jax.jit(jax.grad(ref, argnums=(0, 1)))(x, p)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-3, atol=1e-4)


def test_model_counts_causality_and_router_stats():
    cfg = dataclasses.replace(BASE, shared_expert=True, qk_norm=True)
    params = model.init_params(cfg, 0)
    assert sum(a.size for a in jax.tree.leaves(params)) == model.param_counts(cfg).total
    dense = dataclasses.replace(cfg, n_experts=1, top_k=1, shared_expert=False)
    shapes = model.init_params(dense, 0)
    assert "router" not in shapes["blocks"]
    assert sum(a.size for a in jax.tree.leaves(shapes)) == model.param_counts(dense).total

    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 256, (2, cfg.seq_len + 1)), jnp.int32)
    f = jax.jit(lambda p, t: model.loss_fn(p, t, cfg))
    objective, metrics = f(params, tokens)
    assert abs(float(metrics["loss"]) - math.log(256)) < 1.5       # near uniform at init
    assert 1.0 <= float(metrics["router_balance"]) < 2.0            # E * sum f P >= ~1, 1 when balanced
    assert float(objective) > float(metrics["loss"])                # aux and z losses are added
    logits = jax.jit(lambda p, t: model.forward(p, t, cfg)[0])
    changed = tokens.at[:, 10:].set(7)
    a, b = logits(params, tokens[:, :-1]), logits(params, changed[:, :-1])
    np.testing.assert_allclose(a[:, :10], b[:, :10], rtol=1e-5, atol=1e-5)   # causal
    assert not np.allclose(a[:, 10:], b[:, 10:])


def test_flops_per_token_by_hand():
    cfg = ModelConfig(vocab_size=256, d_model=32, n_layers=2, n_heads=2, d_ff=64, n_experts=1, top_k=1,
                      seq_len=64)
    matmul_params = 2 * (4 * 32 * 32 + 3 * 32 * 64) + 32 * 256
    attention = 2 * 2 * 2 * 64 * 32          # layers x (QK + AV) x 2 FLOPs x L x (H * K)
    assert model.flops_per_token(cfg) == 3 * (2 * matmul_params + attention)
    moe_cfg = dataclasses.replace(cfg, n_experts=8, top_k=2, d_ff=32)
    assert model.flops_per_token(moe_cfg) == model.flops_per_token(cfg) + 3 * 2 * 2 * 32 * 8   # + router


def test_scanned_layers_equal_unrolled(monkeypatch):
    """Deep models scan over layers, shallow ones unroll them: the same function either way."""
    params = jax.tree.map(jnp.asarray, model.init_params(BASE, 7))
    tokens = jnp.asarray(np.random.default_rng(8).integers(0, 256, (2, BASE.seq_len)), jnp.int32)
    unrolled, aux_u = jax.jit(lambda p, t: model.forward(p, t, BASE))(params, tokens)
    monkeypatch.setattr(model, "MAX_UNROLLED_LAYERS", 0)
    scanned, aux_s = jax.jit(lambda p, t: model.forward(p, t, BASE))(params, tokens)
    np.testing.assert_allclose(np.asarray(scanned), np.asarray(unrolled), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(aux_s.rms_L), np.asarray(aux_u.rms_L), rtol=1e-5)
