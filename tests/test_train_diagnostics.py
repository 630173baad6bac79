"""Stability diagnostics (`scalinfer.train.diagnostics`): known values on a tiny model, the step's
wiring (same update, micro-batch accumulation) and the loop's ``diagnostics.jsonl``.

Tolerances: float32 arithmetic on a few hundred numbers, so 1e-5 relative unless the value is exact
(zeros and constants, compared exactly or at 1e-6).
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from scalinfer.errors import TrainError
from scalinfer.train import apply_overrides, diagnostics, make_train_step, model, preset, train
from scalinfer.train.config import ModelConfig
from scalinfer.train.loop import TrainState
from scalinfer.train.optimizer import module_labels

CFG = ModelConfig(vocab_size=64, d_model=16, n_layers=2, n_heads=2, d_ff=8, n_experts=4, top_k=2, seq_len=8,
                  capacity_factor=None)


def _params(cfg=CFG, seed=0):
    return jax.tree.map(jnp.asarray, model.init_params(cfg, seed))


def _tokens(cfg=CFG, batch=2, seed=0, extra=0):
    return jnp.asarray(np.random.default_rng(seed).integers(0, cfg.vocab_size, (batch, cfg.seq_len + extra)))


def _acts(params, tokens, cfg=CFG):
    _, aux = jax.jit(lambda p, t: model.forward(p, t, cfg, diagnostics=True))(params, tokens)
    return diagnostics.activation_stats(aux)


def _summary(params, tokens, cfg=CFG):
    zeros = jax.tree.map(jnp.zeros_like, params)
    return diagnostics.summarize(_acts(params, tokens, cfg), params, zeros, params)


def test_forward_without_the_flag_is_unchanged():
    params, tokens = _params(), _tokens()
    plain, aux = jax.jit(lambda p, t: model.forward(p, t, CFG))(params, tokens)
    diag, aux_d = jax.jit(lambda p, t: model.forward(p, t, CFG, diagnostics=True))(params, tokens)
    assert aux.attn_logit_max_L is None and aux.moe.entropy is None
    np.testing.assert_array_equal(plain, diag)
    assert aux_d.attn_logit_max_L.shape == (CFG.n_layers,) and aux_d.moe.entropy.shape == (CFG.n_layers,)


def test_constant_parameters_and_zero_blocks_give_known_rms():
    # Embedding 0.5, every block weight 0: the blocks add nothing, so the residual stream after each
    # block is the embedding (RMS 0.5), both branches output 0, and each group's RMS is its constant.
    params = _params()
    params["embed"] = jnp.full_like(params["embed"], 0.5)
    params["blocks"] = {k: (jnp.full_like(v, 2.0) if k.endswith("norm") else jnp.zeros_like(v))
                        for k, v in params["blocks"].items()}
    params["lm_head"] = jnp.full_like(params["lm_head"], -0.25)
    d = _summary(params, _tokens())
    np.testing.assert_allclose(d["act_rms"], [0.5, 0.5], rtol=1e-6)
    np.testing.assert_array_equal(d["attn_out_rms"], [0.0, 0.0])
    np.testing.assert_array_equal(d["mlp_out_rms"], [0.0, 0.0])
    np.testing.assert_array_equal(d["attn_logit_max"], [0.0, 0.0])  # zero queries and keys
    # norms mix final_norm (1) with the block norms (2): sqrt((2 * 2 * L * D * 4 + D) / (2 * L * D + D))
    L, D = CFG.n_layers, CFG.d_model
    expected = {"embedding": 0.5, "lm_head": 0.25, "attention": 0.0, "experts": 0.0, "router": 0.0,
                "norms": math.sqrt((2 * L * D * 4.0 + D) / (2 * L * D + D))}
    for g, v in expected.items():
        assert float(d[f"param_rms/{g}"]) == pytest.approx(v, rel=1e-6), g
        assert float(d[f"update_rel/{g}"]) == 0.0 or v == 0.0


def test_uniform_router_has_entropy_log_e_and_known_load():
    params = _params()
    params["blocks"]["router"] = jnp.zeros_like(params["blocks"]["router"])
    d = _summary(params, _tokens())
    np.testing.assert_allclose(d["router_entropy"], [math.log(4)] * 2, rtol=1e-6)
    # top-2 of 4 tied experts: lax.top_k keeps the lower indices, so experts 0 and 1 take every
    # assignment: E f = [2, 2, 0, 0], max 2, min 0, coefficient of variation std/mean = 1/1.
    np.testing.assert_allclose(d["router_load_max"], [2.0, 2.0], rtol=1e-6)
    np.testing.assert_array_equal(d["router_load_min"], [0.0, 0.0])
    np.testing.assert_allclose(d["router_load_cv"], [1.0, 1.0], rtol=1e-6)
    # with top_k = n_experts every token uses every expert: a uniform load
    cfg = dataclasses.replace(CFG, top_k=4)
    d = _summary(params, _tokens(cfg), cfg)
    np.testing.assert_allclose(d["router_load_max"], [1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(d["router_load_min"], [1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(d["router_load_cv"], [0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(d["router_entropy"], [math.log(4)] * 2, rtol=1e-6)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_zero_queries_have_max_logit_zero(qk_norm):
    cfg = dataclasses.replace(CFG, qk_norm=qk_norm)
    params = _params(cfg)
    params["blocks"]["wqkv"] = params["blocks"]["wqkv"].at[:, :, 0].set(0.0)
    np.testing.assert_array_equal(_summary(params, _tokens(cfg), cfg)["attn_logit_max"], [0.0, 0.0])
    # with queries, the max over causal positions is positive somewhere (the random init's logits
    # have both signs) and differs between layers
    d = _summary(_params(cfg), _tokens(cfg), cfg)
    assert np.all(np.isfinite(d["attn_logit_max"])) and float(np.max(d["attn_logit_max"])) > 0


def test_dense_model_has_no_router_columns():
    cfg = dataclasses.replace(CFG, n_experts=1, top_k=1)
    d = _summary(_params(cfg), _tokens(cfg), cfg)
    assert not any(k.startswith("router") for k in d)
    assert "update_rel/experts" in d and "update_rel/router" not in d


def _state(params, opt):
    return TrainState(params, opt.init(params), jnp.zeros((), jnp.int32), jax.random.key_data(jax.random.key(0)))


@pytest.mark.slow
def test_sgd_step_relative_update_and_same_update_as_the_plain_step():
    # Unit-LR SGD: the step applies dW = -lr * grad, so ||dW_g|| / ||W_g|| = lr ||grad_g|| / ||W_g||.
    lr, opt = 0.1, optax.sgd(1.0)
    params = _params()
    batch = _tokens(batch=2, extra=1)[None]
    grads = jax.grad(lambda p: model.loss_fn(p, batch[0], CFG)[0])(params)
    plain = jax.jit(make_train_step(CFG, opt, 2 * CFG.seq_len))
    diag = jax.jit(make_train_step(CFG, opt, 2 * CFG.seq_len, diagnostics=True))
    s_plain, m_plain = plain(_state(params, opt), batch, jnp.int32(1), jnp.float32(lr))
    s_diag, m_diag = diag(_state(params, opt), batch, jnp.int32(1), jnp.float32(lr))
    assert "diagnostics" not in m_plain
    np.testing.assert_allclose(m_diag["loss"], m_plain["loss"], rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), s_diag.params, s_plain.params)
    d = m_diag["diagnostics"]
    labels = module_labels(params)
    for g in ("embedding", "attention", "experts", "router", "lm_head", "norms"):
        def sq(tree):
            return sum(float(jnp.sum(jnp.square(x))) for x, lab in zip(jax.tree.leaves(tree), jax.tree.leaves(labels))
                       if lab == g)
        n = sum(x.size for x, lab in zip(jax.tree.leaves(params), jax.tree.leaves(labels)) if lab == g)
        assert float(d[f"update_rel/{g}"]) == pytest.approx(lr * math.sqrt(sq(grads)) / math.sqrt(sq(params)),
                                                            rel=1e-4), g
        assert float(d[f"param_rms/{g}"]) == pytest.approx(math.sqrt(sq(s_plain.params) / n), rel=1e-5), g


@pytest.mark.slow
def test_micro_batches_accumulate_to_the_steps_statistics():
    # Two micro-batches: RMS from the mean of mean squares, the max logit the larger one, entropy and
    # load the mean (equal-sized micro-batches).
    opt = optax.sgd(1.0)
    params = _params()
    a, b = _tokens(seed=1, extra=1), _tokens(seed=2, extra=1)
    step = jax.jit(make_train_step(CFG, opt, 2 * CFG.seq_len, diagnostics=True))
    _, m = step(_state(params, opt), jnp.stack([a, b]), jnp.int32(2), jnp.float32(0.0))
    d = m["diagnostics"]
    one = [_acts(params, t[:, :-1]) for t in (a, b)]
    np.testing.assert_allclose(d["act_rms"], np.sqrt((one[0]["act_ms_L"] + one[1]["act_ms_L"]) / 2), rtol=1e-5)
    np.testing.assert_allclose(d["attn_logit_max"], np.maximum(one[0]["attn_logit_max_L"],
                                                               one[1]["attn_logit_max_L"]), rtol=1e-5)
    np.testing.assert_allclose(d["router_entropy"], (one[0]["router_entropy_L"] + one[1]["router_entropy_L"]) / 2,
                               rtol=1e-5)
    load = (one[0]["router_load_LxE"] + one[1]["router_load_LxE"]) / 2
    np.testing.assert_allclose(d["router_load_max"], load.max(-1), rtol=1e-5)
    np.testing.assert_array_equal(d["update_rel/attention"], 0.0)  # lr 0: no update


OVERRIDES = ["name=d", "total_tokens=24576", "batch_tokens=2048", "micro_batch_tokens=1024", "lr=1e-2",
             "checkpoint_every=4", "eval_tokens=4096", "model.seq_len=32", "model.d_model=16"]


@pytest.mark.slow  # three short trainings (each compiles its steps): 209 s wall at load 10-20 on 2 cores
def test_loop_writes_diagnostics_at_due_steps_and_resumes(tmp_path):
    cfg = apply_overrides(preset("tiny"), [*OVERRIDES, "diagnostics_every=3"])
    train(apply_overrides(cfg, ["stop_after_steps=7"]), tmp_path / "diag")  # stops with a checkpoint at 7
    train(cfg, tmp_path / "diag")  # resumes to the end (12 steps)
    frame = diagnostics.read_diagnostics(tmp_path / "diag")
    assert frame["step"].tolist() == [3, 6, 9, 12]
    assert frame["tokens"].tolist() == [3 * 2048, 6 * 2048, 9 * 2048, 12 * 2048]
    for col in ("update_rel/embedding", "param_rms/router", "act_rms/L1", "attn_logit_max/L0",
                "router_entropy/L0", "router_load_cv/L1"):
        assert np.all(np.isfinite(frame[col])), col
    assert np.all(frame["router_entropy/L0"] <= math.log(4) + 1e-6)
    # the diagnostics step makes the same update: the losses match a run without it
    train(cfg := apply_overrides(cfg, ["diagnostics_every=0"]), tmp_path / "plain")
    assert not (tmp_path / "plain" / "diagnostics.jsonl").exists()

    def losses(run):
        return [r["loss"] for r in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
                if "loss" in r and "eval_loss" not in r]
    np.testing.assert_allclose(losses("diag"), losses("plain"), rtol=1e-5)


def test_bad_option_and_missing_file_are_one_line_errors(tmp_path):
    with pytest.raises(TrainError, match="diagnostics_every=-1 must be >= 0"):
        apply_overrides(preset("tiny"), ["diagnostics_every=-1"])
    with pytest.raises(TrainError, match="diagnostics.jsonl does not exist"):
        diagnostics.read_diagnostics(tmp_path)
    (tmp_path / "diagnostics.jsonl").write_text('{"step": 1, "tokens": 2, "lr": 0.1}\nnot json\n{"step": 2}\n')
    with pytest.raises(TrainError, match="line 2 is not a JSON record"):
        diagnostics.read_diagnostics(tmp_path)
