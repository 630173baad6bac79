"""``surface``: one posterior over the loss surface in (N, D, LR, batch); the math is in `model`'s docstring.

=================  ==========================================================================================
module             what it holds
=================  ==========================================================================================
``model``          `Surface` (options as fields) and the NumPyro model function `surface_model`
``priors``         the parameters' priors (`Priors`, `PRIORS`) and the sites' names
``loss``           the mean log loss at runs, built from `scalinfer.laws.lr` and `scalinfer.laws.batch`
``size_scatter``   each model size's level off the laws: its basis, conditionals and two small distributions
``data``           run table -> arrays: settings, sizes, centering, diverged (censored) runs
``predict``        predictions for a new setting at targets (N, D[, lr, batch])
``simulate``       run tables drawn at known parameters (`TRUE_PARAMS`, `default_design`)
=================  ==========================================================================================
"""

from scalinfer.models.surface.data import (DIVERGENCE_RATIO, censor_levels, require_lr_and_batch, settings_of,
                                           sizes_of)
from scalinfer.models.surface.loss import laws, setting_values, surface_at, surface_terms
from scalinfer.models.surface.model import MODEL, Exceeds, Surface, surface_model
from scalinfer.models.surface.priors import PRIORS, SCALARS, SETTING, SIZE, SIZE_PRIOR, Priors
from scalinfer.models.surface.size_scatter import (IsotropicStudentT, SmallNormal, law_given_levels, size_basis,
                                                   size_line_scale, size_offsets)

__all__ = ["Surface", "MODEL", "surface_model", "Priors", "PRIORS", "SCALARS", "SETTING", "SIZE", "SIZE_PRIOR",
           "Exceeds", "SmallNormal", "IsotropicStudentT", "laws", "setting_values", "surface_terms", "surface_at",
           "DIVERGENCE_RATIO", "settings_of", "sizes_of", "censor_levels", "require_lr_and_batch", "size_basis",
           "size_line_scale", "law_given_levels", "size_offsets"]
