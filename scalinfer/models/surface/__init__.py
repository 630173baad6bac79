"""``surface``: one posterior over the loss surface in (N, D, LR, batch); the math is in `model`'s docstring.

=================  ==========================================================================================
module             what it holds
=================  ==========================================================================================
``model``          `Surface` (options as fields)
``numpyro_model``  the NumPyro model function `surface_model` (the likelihood), its size-scatter sites and its
                   three distributions: the only module that imports NumPyro and JAX at the top
``priors``         the parameters' priors (`Priors`, `PRIORS`) and the sites' names
``loss``           the mean log loss at runs, built from `scalinfer.laws.lr` and `scalinfer.laws.batch`
``size_scatter``   each model size's level off the laws: the math, its basis and offsets (NumPy)
``data``           run table -> arrays: settings, sizes, centering, diverged (censored) runs
``predict``        predictions for a new setting at targets (N, D[, lr, batch])
``simulate``       run tables drawn at known parameters (`TRUE_PARAMS`, `default_design`)
=================  ==========================================================================================

The names of ``numpyro_model`` are imported on first use (``from scalinfer.models.surface import
surface_model``), so that reading a fit and predicting import neither NumPyro nor JAX.
"""

import importlib

from scalinfer.models.surface.data import (DIVERGENCE_RATIO, censor_levels, require_lr_and_batch, settings_of,
                                           sizes_of)
from scalinfer.models.surface.loss import curvatures, laws, setting_values, surface_at, surface_terms
from scalinfer.models.surface.model import MODEL, Surface
from scalinfer.models.surface.priors import (PINNED, PRIORS, SCALARS, SETTING, SIZE, SIZE_PRIOR, VALLEY_BY_BATCH,
                                             Priors)
from scalinfer.models.surface.size_scatter import size_basis, size_offsets

#: the names of `numpyro_model`, imported on first use
_NUMPYRO = ("surface_model", "Exceeds", "SmallNormal", "IsotropicStudentT", "size_line_scale", "law_given_levels",
            "pinned_offset")

__all__ = ["Surface", "MODEL", "surface_model", "Priors", "PRIORS", "SCALARS", "VALLEY_BY_BATCH", "SETTING", "PINNED",
           "SIZE", "SIZE_PRIOR", "Exceeds", "SmallNormal", "IsotropicStudentT", "laws", "curvatures", "setting_values",
           "surface_terms", "surface_at", "DIVERGENCE_RATIO", "settings_of", "sizes_of", "censor_levels",
           "require_lr_and_batch", "size_basis", "size_line_scale", "law_given_levels", "size_offsets",
           "pinned_offset"]


def __getattr__(name: str):
    """A name of `scalinfer.models.surface.numpyro_model`, imported on first use."""
    if name in _NUMPYRO:
        return getattr(importlib.import_module("scalinfer.models.surface.numpyro_model"), name)
    raise AttributeError(f"module 'scalinfer.models.surface' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
