"""muP and depth-muP multipliers (docs/laws.md section 6), in one place for the model and the optimizer.

With width multiplier m_N = d_model / base_d_model and depth multiplier
m_L = n_layers / base_n_layers, under Adam(W):

==================  ======================  =====================  ==========================
parameters          init std                forward multiplier     learning rate
==================  ======================  =====================  ==========================
embedding           ``init_std_embed``      1                      eta
hidden matrices     1/sqrt(fan_in)          residual m_L^-alpha_d  eta / m_N * m_L^(alpha_d-1)
(attention, experts, shared expert)
LM head             1/sqrt(base_d_model)    1/m_N                  eta
router "output"     1/sqrt(base_d_model)    1/m_N                  eta
router "hidden"     1/sqrt(fan_in)          1                      eta / m_N
norm gains          1                       1                      eta
==================  ======================  =====================  ==========================

and attention logits scaled 1/d_head instead of 1/sqrt(d_head). Without muP (standard
parametrization) every multiplier is 1, every init std is 1/sqrt(fan_in) (the embedding keeps
``init_std_embed``), attention uses 1/sqrt(d_head), and every module gets eta. At the base shape
both parametrizations give the same forward pass except the attention scale.
"""

from __future__ import annotations

from typing import NamedTuple

from scalinfer.train.config import ModelConfig

__all__ = ["Multipliers", "multipliers"]


class Multipliers(NamedTuple):
    """Scalars the model and the optimizer read.

    Attributes
    ----------
    width, depth : m_N and m_L (1 without muP).
    residual : factor on each residual branch.
    attn_scale : factor on q.k.
    head_out, router_out : factors on the LM head's and the router's outputs.
    head_init_std, router_init_std : init std of the LM head and the router.
    lr_hidden, lr_router : LR factors of hidden matrices and of the router (embedding, LM head and
        norm gains always get 1).
    """

    width: float
    depth: float
    residual: float
    attn_scale: float
    head_out: float
    router_out: float
    head_init_std: float
    router_init_std: float
    lr_hidden: float
    lr_router: float


def multipliers(cfg: ModelConfig) -> Multipliers:
    """The multipliers of ``cfg`` (see the module docstring's table)."""
    fan_in_std = cfg.d_model ** -0.5
    if cfg.mup is None:
        return Multipliers(width=1.0, depth=1.0, residual=1.0, attn_scale=cfg.d_head ** -0.5,
                           head_out=1.0, router_out=1.0, head_init_std=fan_in_std,
                           router_init_std=fan_in_std, lr_hidden=1.0, lr_router=1.0)
    mu = cfg.mup
    m_n = cfg.d_model / mu.base_d_model
    m_l = cfg.n_layers / mu.base_n_layers
    lr_hidden = m_l ** (mu.depth_alpha - 1.0) / m_n if mu.depth_alpha else 1.0 / m_n
    base_std = mu.base_d_model ** -0.5
    if mu.router == "output":
        router_out, router_std, lr_router = 1.0 / m_n, base_std, 1.0
    else:
        router_out, router_std, lr_router = 1.0, fan_in_std, 1.0 / m_n
    return Multipliers(
        width=m_n, depth=m_l, residual=m_l ** -mu.depth_alpha, attn_scale=1.0 / cfg.d_head,
        head_out=1.0 / m_n, router_out=router_out, head_init_std=base_std,
        router_init_std=router_std, lr_hidden=lr_hidden, lr_router=lr_router)
