"""AdamW with per-module learning rates and muP scaling.

The optimizer returned by `make_optimizer` produces updates for a learning rate of 1; the train
step multiplies them by the WSD schedule's value (`scalinfer.schedules.wsd`), which the loop
computes from the tokens seen (so a batch that grows during the run keeps the schedule in tokens).
Module groups (`model.module_of`) each get ``scale_by_adam -> add_decayed_weights ->
scale(-multiplier)`` through ``optax.partition``, where the multiplier is the module's ``lr_mult``
times its muP factor (`scalinfer.train.mup`). AdamW's update is then ``-lr_t * mult * (adam + lambda * w)``.
"""

from __future__ import annotations

import jax
import optax

from scalinfer.train.config import ModelConfig, OptimizerConfig
from scalinfer.train.model import module_of
from scalinfer.train.mup import multipliers

__all__ = ["module_labels", "lr_multipliers", "weight_decays", "make_optimizer", "GROUPS"]

GROUPS = ("embedding", "attention", "experts", "router", "lm_head", "norms")


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
    at every width, LR and batch size (lambda proportional to B / (eta D), docs/laws.md section 6)."""
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
