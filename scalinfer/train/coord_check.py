"""muP coordinate check (Yang et al. 2021): activation scales across widths, at init and after a
few Adam steps.

Under muP every activation coordinate stays O(1) as the width grows; under standard
parametrization with one learning rate, Adam's updates make hidden activations and logits grow
roughly in proportion to the width. `coord_check` trains the same small model at several widths
for a few steps (AdamW with the module learning rates of `scalinfer.train.optimizer`, no warmup)
and reports the RMS of the residual stream after each block and of the logits.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scalinfer.train import model as model_lib
from scalinfer.train.config import DataConfig, ModelConfig, MupConfig, OptimizerConfig
from scalinfer.train.data import WindowSampler, load_corpus
from scalinfer.train.mup import multipliers
from scalinfer.train.optimizer import lr_multipliers, module_labels

__all__ = ["coord_check", "width_config"]


def width_config(base: ModelConfig, width: int, mup: bool, base_width: int | None = None) -> ModelConfig:
    """``base`` at another width: heads (fixed head size) and expert width scale with d_model."""
    base_width = base_width or base.d_model
    return dataclasses.replace(
        base, d_model=width, n_heads=max(1, width // base.d_head), head_dim=base.d_head,
        d_ff=max(1, base.d_ff * width // base.d_model),
        mup=dataclasses.replace(base.mup or MupConfig(), base_d_model=base_width,
                                base_n_layers=base.n_layers) if mup else None)


def coord_check(base: ModelConfig, widths=(32, 64, 128), mup: bool = True, steps: int = 5,
                lr: float = 1e-2, batch_seqs: int = 8, seed: int = 0,
                data: DataConfig = DataConfig()) -> dict[str, np.ndarray]:
    """RMS of activations per width at init and after ``steps`` AdamW steps.

    Returns arrays indexed by width (in the order of ``widths``): ``rms_init`` / ``rms_final``
    [W, n_layers] (residual stream after each block), ``logits_init`` / ``logits_final`` [W].
    The base width of muP is ``widths[0]``. Each step uses a new batch; the RMS is measured on
    the batch of the step (after ``steps`` updates for ``*_final``).
    """
    cfg0 = width_config(base, widths[0], mup, widths[0])
    corpus = load_corpus(data, cfg0.vocab_size)
    sampler = WindowSampler(corpus.train, base.seq_len, seed, cfg0.vocab_size)
    batches = jnp.asarray(np.stack([sampler.windows(i * batch_seqs, batch_seqs) for i in range(steps + 1)]))
    opt = OptimizerConfig(lr=lr, weight_decay=0.0, clip_grad_norm=None)
    out = {k: [] for k in ("rms_init", "rms_final", "logits_init", "logits_final")}
    for width in widths:
        cfg = width_config(base, width, mup, widths[0])
        mult = jax.tree.map(jnp.float32, multipliers(cfg))
        params = model_lib.init_params(cfg, seed)
        group_lr = lr_multipliers(cfg, opt)
        lr_tree = jax.tree.map(lambda g: jnp.float32(lr * group_lr[g]), module_labels(params))
        adam_state = _ADAM.init(params)
        # muP only changes the init and the multipliers, which are arguments here: muP and
        # standard parametrization share one compiled step per width.
        static = dataclasses.replace(cfg, mup=None)
        for i in range(steps + 1):
            params, adam_state, rms, logit = _step(params, adam_state, batches[i], mult, lr_tree, static)
            if i == 0:
                out["rms_init"].append(np.asarray(rms))
                out["logits_init"].append(float(logit))
        out["rms_final"].append(np.asarray(rms))
        out["logits_final"].append(float(logit))
    return {"widths": np.asarray(widths), **{k: np.asarray(v) for k, v in out.items()}}


_ADAM = optax.scale_by_adam(b1=0.9, b2=0.95, eps=1e-8)


# A diagnostic of a few steps: compiled at XLA's lowest backend optimization (half the compile
# time on CPU; the steps take milliseconds either way).
@functools.partial(jax.jit, static_argnames="cfg", compiler_options={"xla_backend_optimization_level": 0})
def _step(params, adam_state, batch_BxL1, mult, lr_tree, cfg: ModelConfig):
    """Activation RMS of ``params`` on the batch, and one Adam step on it."""
    def loss(p):
        logits_BxLxV, aux = model_lib.forward(p, batch_BxL1[:, :-1], cfg, mult=mult)
        ce = jnp.mean(model_lib.cross_entropy(logits_BxLxV, batch_BxL1[:, 1:]))
        return ce, (aux.rms_L, jnp.sqrt(jnp.mean(logits_BxLxV ** 2)))
    grads, (rms_L, logits_rms) = jax.grad(loss, has_aux=True)(params)
    updates, adam_state = _ADAM.update(grads, adam_state)
    params = jax.tree.map(lambda p, u, r: p - r * u, params, updates, lr_tree)
    return params, adam_state, rms_L, logits_rms
