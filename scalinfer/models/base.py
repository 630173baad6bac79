"""What every scalinfer model provides.

A model is a small object around a plain NumPyro model function. The inference layer never looks inside it:
it asks the model to turn a run table into arrays (`prepare`), samples `model(**data)`, then asks the model for
natural-scale parameters (`derived`) and for predictions at targets (`predict`). `simulate` draws run tables
from known parameters; it is how tests check recovery and calibration.

Conventions:
- the observed site of the likelihood is called ``"obs"`` (log-likelihood for LOO is read from it); a model
  with censored runs adds a second observed site ``"obs_censored"``;
- ``data`` holds only arrays (the NumPyro model's keyword arguments, observed values included);
  ``constants`` holds scalars needed to undo centering and to measure extrapolation (``max_N``, ``max_D``...);
  both are stored in the fit file (``constant_data``) so a fit can predict after a reload;
- every sampled parameter is O(1) (predictors centered and scaled), so NUTS sees a round posterior.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.runs.schema import RunTable

__all__ = ["Model", "Arrays"]

Arrays = dict[str, np.ndarray]


class Model:
    """Base class: subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    table_kind: ClassVar[str] = "runs"
    required_columns: ClassVar[tuple[str, ...]] = ("N", "D", "loss")
    #: quantities `predict` returns, in order, with units (shown by `summary` and the CLI)
    predicts: ClassVar[dict[str, str]] = {}
    #: target arguments `predict` takes, e.g. ("N", "D")
    targets: ClassVar[tuple[str, ...]] = ("N", "D")
    #: "nuts" for NumPyro models; a model fit otherwise (bootstrap) overrides `fit_draws`
    default_method: ClassVar[str] = "nuts"
    #: the float type NUTS evaluates the potential in (None: as the data, float64). float32 is for models whose
    #: every input and parameter is O(1) (centered logs); the mode and the Laplace curvature stay float64
    potential_dtype: ClassVar[str | None] = None
    #: NUTS's target acceptance probability unless the caller gives one
    target_accept: float = 0.9

    def check(self, runs: RunTable) -> None:
        if runs.kind != self.table_kind:
            raise ModelError(
                f"model {self.name!r} needs a {self.table_kind!r} table, but {runs.source} is {runs.kind!r}")
        missing = [c for c in self.required_columns if c not in runs.df.columns or runs.df[c].isna().all()]
        if missing:
            raise ModelError(f"model {self.name!r} needs column(s) {', '.join(missing)}, "
                             f"which {runs.source} does not have")

    def prepare(self, runs: RunTable) -> tuple[Arrays, dict[str, float]]:
        """Run table -> (data for `model`, scalar constants)."""
        raise NotImplementedError

    def model(self, **data: Any) -> None:
        """The NumPyro model (a plain function of arrays)."""
        raise NotImplementedError

    def model_kwargs(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        """Keyword arguments of `model` (default: the data arrays)."""
        return dict(data)

    def init_values(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any] | None:
        """A rough point estimate (constrained values) to start the MAP search from, or None."""
        return None

    def derived(self, draws: Arrays, constants: dict[str, float]) -> Arrays:
        """Natural-scale scalar parameters from the sampled ones; arrays of shape (n_draws,)."""
        return {}

    def predict(self, draws: Arrays, constants: dict[str, float], **targets: Any) -> Arrays:
        """Posterior draws of each quantity in `predicts` at the targets: arrays of shape
        (n_draws, *broadcast shape of the targets)."""
        raise NotImplementedError

    def extrapolation(self, constants: dict[str, float], **targets: Any) -> dict[str, Any]:
        """How far the targets lie outside the data: target over the largest fitted value."""
        out = {}
        for t in self.targets:
            key = f"max_{t}"
            if key in constants and targets.get(t) is not None:
                out[f"{t}_ratio"] = np.asarray(targets[t], dtype=float) / constants[key]
        return out

    def predict_warnings(self, constants: dict[str, float], **targets: Any) -> list[str]:
        """What a reader of a prediction at these targets must know that the fit's own warnings do not say."""
        return []

    def simulate(self, params: dict[str, float], design: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
        """A run table drawn from the model at known `params` over the `design` rows."""
        raise NotImplementedError

    def default_design(self, seed: int = 0) -> pd.DataFrame:
        """The design (inputs without outcomes) `simulate` uses when none is given."""
        raise NotImplementedError

    def true_params(self) -> dict[str, float]:
        """Plausible parameters for simulation (documentation and tests)."""
        raise NotImplementedError
