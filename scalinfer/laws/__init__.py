"""Closed forms of docs/laws.md as pure JAX functions: no sampling, no I/O.

One module per section of docs/laws.md; every function takes and returns arrays, broadcasts over its
arguments, jits and vmaps, and keeps its inputs' dtype (enable float64 with
``jax.config.update("jax_enable_x64", True)`` for N ~ 1e12). Models, predictions and plots build on
these.

- `chinchilla`: loss against (N, D) and the compute-optimal allocation (section 1);
- `wsd`: loss along one WSD run against tokens (section 2);
- `lr`: the LR valley, the eta*(N, D) law and the LR-batch ridge eta*(N, D, B) (sections 3-4);
- `batch`: steps/tokens to a target loss against batch size, OpenAI's model, the gradient noise
  scale, the paper's piecewise E(S), the noise-floor surface, the B*(N, D) law (section 5);
- `peers`: published eta* and B* laws to compare against (section 4).

Each name below is imported from its module on first use (``from scalinfer.laws import valley``), so that a
module that needs one law imports only that law's module; JAX is imported by the functions that compute with it.
"""

import importlib

#: each law's module (one module per section of docs/laws.md) and its names
_MODULES = {
    "chinchilla": (  # section 1
        "loss_chinchilla", "log_loss_chinchilla", "compute_optimal", "ComputeOptimal",
    ),
    "wsd": (  # section 2
        "loss_wsd", "tokens_to_target_wsd",
    ),
    "lr": (  # sections 3-4
        "valley", "valley_at", "lr_opt_law", "log_lr_opt_law", "log_lr_opt_at_batch",
    ),
    "batch": (  # section 5
        "steps_openai", "tokens_openai", "tokens_at_steps_openai", "batch_crit_openai", "b_simple_from_grad_norms",
        "GradNoiseScale", "wsd_piecewise_coefficients", "WsdPiecewiseCoefficients", "tokens_wsd_piecewise",
        "loss_noise_floor", "batch_min_floor", "steps_min_floor", "tokens_floor", "steps_opt_floor",
        "batch_opt_floor", "tokens_min_floor", "steps_to_target_floor", "tokens_to_target_floor",
        "log_batch_opt_law",
    ),
    "peers": (  # section 4
        "step_law_lr_opt", "step_law_batch_opt", "deepseek_lr_opt", "deepseek_batch_opt",
        "deepseek_flops_per_token", "compute_6nd", "zhou_lr_opt", "Baseline", "BASELINES",
    ),
}
__all__ = [name for names in _MODULES.values() for name in names]
_HOMES = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str):
    """A law (or a law module) of this package, imported on first use."""
    if name in _HOMES:
        return getattr(importlib.import_module(f"scalinfer.laws.{_HOMES[name]}"), name)
    if name in _MODULES:
        return importlib.import_module(f"scalinfer.laws.{name}")
    raise AttributeError(f"module 'scalinfer.laws' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, *_MODULES])
