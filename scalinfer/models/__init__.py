"""The models, by name. Each lives in its own module with its math in the docstring.

=================  ==========================================================================================
name               what it fits
=================  ==========================================================================================
``chinchilla``     L(N, D) = E + A N^-alpha + B D^-beta, in log space (docs/laws.md section 1)
``surface``        loss over (N, D, LR, B) with valleys around eta*(N, D, B) and B*(N, D) (sections 3-4)
``classic``        per-setting quadratic vertex in log LR, then OLS of log eta* on log N, log D (bootstrap)
``batch-openai``   steps to target S = S_min (1 + B_crit / B) (section 5, McCandlish et al.)
``batch-wsd``      the piecewise E(S) of the batch-size paper, continuous at the breakpoints (section 5)
``batch-floor``    the noise-floor surface L(S; B) = L_inf + a S^-alpha + c / B on loss curves (section 5)
=================  ==========================================================================================

Every model is a frozen dataclass implementing `Model` (`scalinfer.models.base`): its fields are its
options (``get_model("surface").with_options(size_scatter=True)``); the models with a loss-vs-tokens law
also implement `LossCurve`. The NumPyro distributions they share with their log densities written out (Beta,
Gamma, Student t) are in `scalinfer.models.distributions`.
"""

from __future__ import annotations

import importlib

from scalinfer.errors import ModelError
from scalinfer.models.base import LossCurve, Model

__all__ = ["Model", "LossCurve", "get_model", "model_version", "MODEL_NAMES"]

# name -> ("module:attribute", version); imported on first use so `import scalinfer` stays light. The version
# is the model's `version` (tests/test_model_interface.py checks they agree): reading a fit file checks it
# without importing the model's code, so that `scalinfer summary` needs neither JAX nor NumPyro.
_REGISTRY = {
    "chinchilla": ("scalinfer.models.chinchilla:MODEL", "1"),
    "surface": ("scalinfer.models.surface:MODEL", "1"),
    "classic": ("scalinfer.models.classic:MODEL", "1"),
    "batch-openai": ("scalinfer.models.batch:OPENAI", "2"),
    "batch-wsd": ("scalinfer.models.batch:WSD", "3"),
    "batch-floor": ("scalinfer.models.batch:FLOOR", "2"),
}
MODEL_NAMES = tuple(_REGISTRY)


def get_model(name: str | Model) -> Model:
    """The model registered under `name` (a `Model` instance passes through)."""
    if isinstance(name, Model):
        return name
    if name not in _REGISTRY:
        raise ModelError(f"unknown model {name!r} (one of: {', '.join(MODEL_NAMES)})")
    module, attr = _REGISTRY[name][0].split(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ModelError(f"model {name!r} is not available in this installation ({e})") from None


def model_version(name: str) -> str:
    """The version of the model registered under `name`, without importing its code."""
    if name not in _REGISTRY:
        raise ModelError(f"unknown model {name!r} (one of: {', '.join(MODEL_NAMES)})")
    return _REGISTRY[name][1]
