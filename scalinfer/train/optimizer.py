"""AdamW with per-module learning rates, muP scaling, and the warmup-stable-decay schedule.

The optimizer returned by `make_optimizer` produces updates for a learning rate of 1; the train
step multiplies them by the schedule's value, which the loop computes from the tokens seen (so a
batch that grows during the run keeps the schedule in tokens). Module groups (`model.module_of`)
each get ``scale_by_adam -> add_decayed_weights -> scale(-multiplier)`` through
``optax.partition``, where the multiplier is the module's ``lr_mult`` times its muP factor
(`scalinfer.train.mup`). AdamW's update is then ``-lr_t * mult * (adam + lambda * w)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from scalinfer.errors import TrainError
from scalinfer.train.config import ModelConfig, OptimizerConfig
from scalinfer.train.model import module_of
from scalinfer.train.mup import multipliers

__all__ = ["wsd_schedule", "decay_fn", "module_labels", "lr_multipliers", "weight_decays",
           "make_optimizer", "GROUPS"]

GROUPS = ("embedding", "attention", "experts", "router", "lm_head", "norms")


def decay_fn(shape: str):
    """The decay shape as a function of progress p in [0, 1] -> factor in [1, 0]."""
    if shape == "linear":
        return lambda p: 1.0 - p
    if shape == "cosine":
        return lambda p: 0.5 * (1.0 + jnp.cos(jnp.pi * p))
    if shape == "1-sqrt":
        return lambda p: 1.0 - jnp.sqrt(p)
    raise TrainError(f"unknown decay shape {shape!r} (linear, cosine or 1-sqrt)")


def _decay_schedule(peak: float, length: float, shape: str, final_fraction: float) -> optax.Schedule:
    f = decay_fn(shape)
    final = peak * final_fraction

    def schedule(count):
        p = jnp.clip(jnp.asarray(count, jnp.float32) / max(length, 1e-30), 0.0, 1.0)
        value = final + (peak - final) * f(p)
        return jnp.where(p >= 1.0, final, value)  # exactly the final value at the end

    return schedule


def wsd_schedule(peak: float, total: float, warmup: float, decay: float,
                 shape: str = "linear", final_fraction: float = 0.0) -> optax.Schedule:
    """Warmup-stable-decay: linear warmup from 0 over ``warmup``, ``peak`` until
    ``total - decay``, then ``shape`` down to ``final_fraction * peak`` at ``total``.

    All lengths are in one unit (steps or tokens; the loop uses tokens). The value is exactly
    ``peak`` from the end of warmup to the start of the decay and exactly the final value from
    ``total`` on. Built with ``optax.join_schedules``.
    """
    if not (0 <= warmup and 0 <= decay and warmup + decay <= total):
        raise TrainError(f"WSD schedule: warmup {warmup} + decay {decay} exceed the run's length {total}")
    decay_start = total - decay
    warm = (optax.linear_schedule(0.0, peak, int(warmup)) if warmup > 0 else optax.constant_schedule(peak))
    return optax.join_schedules(
        [warm, optax.constant_schedule(peak), _decay_schedule(peak, decay, shape, final_fraction)],
        [warmup, decay_start])


def module_labels(params) -> dict:
    """The module group of every parameter leaf (a pytree of strings like ``params``)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: module_of(tuple(getattr(k, "key", str(k)) for k in path)), params)


def lr_multipliers(model: ModelConfig, opt: OptimizerConfig) -> dict[str, float]:
    """LR multiplier per module group: ``lr_mult`` times the muP factor."""
    mult = multipliers(model)
    mup = {"embedding": 1.0, "attention": mult.lr_hidden, "experts": mult.lr_hidden,
           "router": mult.lr_router, "lm_head": 1.0, "norms": 1.0}
    return {g: getattr(opt.lr_mult, g) * mup[g] for g in GROUPS}


def weight_decays(model: ModelConfig, opt: OptimizerConfig, steps: int) -> dict[str, float]:
    """AdamW lambda per module group. With ``weight_decay_timescale`` tau, lambda_g is set so
    that 1 / (eta_g lambda_g) = tau * steps: the decay forgets over the same share of the run
    at every width, LR and batch size (lambda proportional to B / (eta D), MATH.md section 6)."""
    if opt.weight_decay_timescale is None:
        return {g: opt.weight_decay for g in GROUPS}
    mults = lr_multipliers(model, opt)
    return {g: 1.0 / (opt.lr * mults[g] * opt.weight_decay_timescale * max(steps, 1)) for g in GROUPS}


def make_optimizer(model: ModelConfig, opt: OptimizerConfig, params, steps: int) -> optax.GradientTransformation:
    """Unit-LR AdamW with per-module multipliers (the train step multiplies by lr_t).

    Weight decay applies to matrices, not to norm gains. Gradients are clipped by global norm
    first when ``clip_grad_norm`` is set.
    """
    mults = lr_multipliers(model, opt)
    decays = weight_decays(model, opt, steps)
    labels = module_labels(params)
    transforms = {}
    for g in GROUPS:
        parts = [optax.scale_by_adam(b1=opt.b1, b2=opt.b2, eps=opt.eps)]
        if decays[g] > 0 and g != "norms":
            parts.append(optax.add_decayed_weights(decays[g]))
        parts.append(optax.scale(-mults[g]))
        transforms[g] = optax.chain(*parts)
    chain = [optax.partition(transforms, labels)]
    if opt.clip_grad_norm is not None:
        chain.insert(0, optax.clip_by_global_norm(opt.clip_grad_norm))
    return optax.chain(*chain)
