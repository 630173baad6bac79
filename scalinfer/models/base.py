"""What every scalinfer model provides: the interface, declared once.

A model is a frozen dataclass around a plain NumPyro model function; its fields are its options (e.g.
``size_scatter``), so two models with equal options are equal and hash equal (compiled programs are keyed
on that, `scalinfer.inference.compiled`). The inference layer never looks inside a model: it asks it to turn
a run table into arrays (`prepare`), samples `model(**model_kwargs(...))`, then asks for natural-scale
parameters (`derived`) and for predictions at targets (`predict`). `simulate` draws run tables from known
parameters; it is how tests check recovery and calibration.

Conventions:

- the observed site of the likelihood is called ``"obs"`` (log-likelihood for LOO is read from it); a model
  with censored runs adds a second observed site ``"obs_censored"``;
- ``data`` holds only arrays (the NumPyro model's keyword arguments, observed values included);
  ``constants`` holds scalars needed to undo centering and to measure extrapolation (``max_N``, ``max_D``...);
  both are stored in the fit file (``constant_data``) so a fit can predict after a reload; the model's
  options are stored beside them (`options`) and the fitted model is rebuilt with them (`with_options`);
- every sampled parameter is O(1) (predictors centered and scaled), so NUTS sees a round posterior.

A model that must give a hook subclasses `Model` and implements its abstract methods (`prepare`, `predict`,
`simulate`, `default_design`, `true_params`; `model` for every model fit by NUTS, MAP or Laplace). The other
hooks have documented defaults. A model whose fit says which loss a run reaches after given tokens also
subclasses `LossCurve` (batch-size schedules and their figures need it).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.runs.schema import RunTable

if TYPE_CHECKING:  # the fit is only passed through (`fit_warnings`); models do not import inference
    from scalinfer.inference.fit import Fit

__all__ = ["Model", "LossCurve", "Arrays", "tried_ranges", "tried_at"]

Arrays = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Model(abc.ABC):
    """Base of every model: a frozen dataclass whose fields are the model's options.

    Subclasses are ``@dataclasses.dataclass(frozen=True)`` classes that set the class attributes below and
    implement the abstract methods; ``__post_init__`` validates the options (a typed one-line `ModelError`).
    """

    #: the registry name (``scalinfer.models.MODEL_NAMES``)
    name: ClassVar[str]
    #: bumped when the parameters or their meaning change: a fit file of another version is refused
    version: ClassVar[str] = "1"
    #: the `RunTable` kind the model fits (``"runs"``, ``"curves"``, ``"steps_to_target"``)
    table_kind: ClassVar[str] = "runs"
    #: columns the table must have (not all missing)
    required_columns: ClassVar[tuple[str, ...]] = ("N", "D", "loss")
    #: quantities `predict` returns, in order, with units (shown by `summary` and the CLI)
    predicts: ClassVar[dict[str, str]] = {}
    #: target arguments `predict` takes, e.g. ("N", "D")
    targets: ClassVar[tuple[str, ...]] = ("N", "D")
    #: the targets without which `predict` has no answer (checked before it is called)
    required_targets: ClassVar[tuple[str, ...]] = ()
    #: ``"nuts"`` for NumPyro models; a model fit otherwise (``"bootstrap"``) implements `fit_draws`
    default_method: ClassVar[str] = "nuts"
    #: the float type NUTS evaluates the potential in (None: as the data, float64). float32 is for models whose
    #: every input and parameter is O(1) (centered logs); the mode and the Laplace curvature stay float64
    potential_dtype: ClassVar[str | None] = None
    #: NUTS's target acceptance probability unless the caller gives one
    target_accept: ClassVar[float] = 0.9
    #: sites held at their `init_values` in further searches for NUTS's start when the posterior-mode search does
    #: not converge: a joint density may have no maximum (a noise scale shrinking to 0 while each setting's
    #: optimum sits on one of its runs) though the posterior is proper; its start is then the mode given the
    #: first of them, else given the first two, and so on (the fewest held that give a mode)
    mode_held: ClassVar[tuple[str, ...]] = ()
    #: keys of `prepare`'s data that are observed values (the fit file's ``observed_data`` group)
    observed: ClassVar[tuple[str, ...]] = ("log_loss",)
    #: dimension names of the sampled sites that are not scalars, e.g. ``{"z_S": ["unit"]}``
    dims: ClassVar[dict[str, list[str]]] = {}

    # ---- options ------------------------------------------------------------------------------------------
    def options(self) -> dict[str, Any]:
        """The model's options: its dataclass fields and their values (saved in the fit file)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def with_options(self, **options: Any) -> Self:
        """The same model with these options changed (validated by the model's ``__post_init__``).

        Raises `ModelError` naming an unknown option and the model's valid ones.
        """
        valid = tuple(self.options())
        unknown = [k for k in options if k not in valid]
        if unknown:
            takes = f"takes options {', '.join(valid)}" if valid else "takes no options"
            raise ModelError(f"model {self.name!r} {takes}; not {', '.join(unknown)}")
        return dataclasses.replace(self, **options)

    # ---- data ---------------------------------------------------------------------------------------------
    def check(self, runs: RunTable) -> None:
        """Raise `ModelError` unless `runs` is of the model's `table_kind` and has its `required_columns`."""
        if runs.kind != self.table_kind:
            raise ModelError(
                f"model {self.name!r} needs a {self.table_kind!r} table, but {runs.source} is {runs.kind!r}")
        missing = [c for c in self.required_columns if c not in runs.df.columns or runs.df[c].isna().all()]
        if missing:
            raise ModelError(f"model {self.name!r} needs column(s) {', '.join(missing)}, "
                             f"which {runs.source} does not have")

    @abc.abstractmethod
    def prepare(self, runs: RunTable) -> tuple[Arrays, dict[str, float]]:
        """Run table -> (data arrays, scalar constants); see the module docstring."""

    # ---- the NumPyro model --------------------------------------------------------------------------------
    def model(self, **kwargs: Any) -> None:
        """The NumPyro model, a plain function of `model_kwargs`. Every model fit by NUTS, MAP or Laplace
        implements it; the default says the model has none (it is fit by its own `fit_draws`)."""
        raise ModelError(f"model {self.name!r} has no NumPyro model: fit it by {self.default_method}")

    def model_kwargs(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        """Keyword arguments of `model` (default: the data arrays)."""
        return dict(data)

    def init_values(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any] | None:
        """A rough point estimate (constrained values) to start the MAP search from, or None (default)."""
        return None

    def nuts_kwargs(self, kwargs: dict[str, Any], point) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Keyword arguments of `model` for NUTS, informed by the posterior mode `point` (a
        `scalinfer.inference.optimize.PointFit`) found with `kwargs`, and the mode's constrained values in the
        coordinates they give (the start of a mode search with them): NUTS's coordinates chosen from the mode.
        None (the default): NUTS runs with `kwargs`. NUTS's program is compiled before the mode is known, with
        `kwargs`' shapes and sites: new arguments and sites of other shapes or names compile it again (seconds),
        beside the mode search in the new coordinates (`scalinfer.inference.compiled.same_programs` tells)."""
        return None

    def fit_draws(self, data: Arrays, constants: dict[str, float], samples: int, seed: int
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
        """Draws of a model fit by its own method (`default_method` other than ``"nuts"``, e.g. ``classic``'s
        bootstrap): ({name: (samples, ...)}, sample stats or None). NumPyro models do not implement it."""
        raise ModelError(f"model {self.name!r} is fit by NUTS, MAP or Laplace, not by draws of its own")

    # ---- the fit file -------------------------------------------------------------------------------------
    def coords(self, data: Arrays, constants: dict[str, float]) -> dict[str, list[Any]]:
        """Coordinate labels of the dimensions in `dims`, e.g. one label per unit (default: none)."""
        return {}

    def derived(self, draws: Arrays, constants: dict[str, float]) -> Arrays:
        """Natural-scale scalar parameters from the sampled ones, arrays (n_draws,) (default: none)."""
        return {}

    def fit_warnings(self, fit: Fit) -> list[str]:
        """What a reader of this model's `fit` must know beyond the sampler's diagnostics (default: nothing)."""
        return []

    def prior_label(self, site: str) -> str:
        """The prior that sampled site `site`'s density carries, in words a user can act on (the prior
        sensitivity's warnings name it). Default: the site's name; a model whose sites are reparameterizations
        (a standard normal standing for a law's prior, say) says which prior they stand for."""
        return site

    # ---- predictions --------------------------------------------------------------------------------------
    @abc.abstractmethod
    def predict(self, draws: Arrays, constants: dict[str, float], **targets: Any) -> Arrays:
        """Posterior draws of each quantity in `predicts` at the targets: arrays of shape
        (n_draws, *broadcast shape of the targets)."""

    def extrapolation(self, constants: dict[str, float], **targets: Any) -> dict[str, Any]:
        """How far the targets lie outside the data: each target over its largest fitted value
        (``constants["max_<target>"]``), as ``<target>_ratio``."""
        out = {}
        for t in self.targets:
            key = f"max_{t}"
            if key in constants and targets.get(t) is not None:
                out[f"{t}_ratio"] = np.asarray(targets[t], dtype=float) / constants[key]
        return out

    def predict_warnings(self, constants: dict[str, float], answer: Arrays | None = None, **targets: Any) -> list[str]:
        """What a reader of a prediction at these targets must know that the fit's own warnings do not say
        (default: nothing). `answer`: the prediction's draws (`predict`'s output), for what only they show."""
        return []

    # ---- simulation ---------------------------------------------------------------------------------------
    @abc.abstractmethod
    def simulate(self, params: dict[str, Any], design: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
        """A run table drawn from the model at known `params` over the `design` rows."""

    @abc.abstractmethod
    def default_design(self, seed: int = 0) -> pd.DataFrame:
        """The design (inputs without outcomes) `simulate` uses when none is given."""

    @abc.abstractmethod
    def true_params(self) -> dict[str, Any]:
        """Plausible parameters for simulation (documentation and tests)."""


class LossCurve(abc.ABC):
    """Mixin of the models whose fit says which loss a run reaches after given tokens, on the token-efficient
    path (every batch its token-optimal B_opt): batch-size schedules and their figures need it."""

    @abc.abstractmethod
    def loss_at_tokens(self, draws: Arrays, constants: dict[str, float], N: Any, tokens: Any) -> np.ndarray:
        """Posterior draws of the loss (nats/token) reached after `tokens` at model size `N`:
        shape (n_draws, *broadcast(N, tokens).shape)."""


# ---- what the runs tried (the answers' warnings compare an optimum with it) --------------------------------------
#: the swept columns whose ranges `tried_ranges` records, under the name used in the constants
_TRIED = {"lr": "lr", "batch": "batch_tokens"}


def tried_ranges(df: pd.DataFrame) -> dict[str, float]:
    """Constants that say what the runs tried (`prepare` adds them; `scalinfer.inference.checks` reads them).

    Per distinct N, index k in increasing N: ``tried_N_k``; for ``lr`` and ``batch`` (``batch_tokens``), where
    the table has them, ``tried_<q>_lo_k`` and ``tried_<q>_hi_k``, the smallest and largest value tried at that
    N (diverged runs included: they were tried), and ``tried_<q>_lo_edge_k``, ``tried_<q>_hi_edge_k``, the
    geometric midpoints between the two smallest and the two largest distinct values: an optimum below
    lo_edge has the smallest value tried as its nearest run, so it sits at the edge of the sweep (one value
    tried: both edges are that value). ``seq_len``: the shortest sequence of any run, in tokens, where the
    table says it.
    """
    out: dict[str, float] = {}
    N = df["N"].to_numpy(float)
    for k, n in enumerate(np.unique(N)):
        at = N == n
        out[f"tried_N_{k}"] = float(n)
        for q, col in _TRIED.items():
            if col not in df.columns:
                continue
            v = np.unique(df.loc[at, col].to_numpy(float))
            v = v[np.isfinite(v) & (v > 0)]
            if not v.size:
                continue
            out[f"tried_{q}_lo_{k}"], out[f"tried_{q}_hi_{k}"] = float(v[0]), float(v[-1])
            out[f"tried_{q}_lo_edge_{k}"] = float(np.sqrt(v[0] * v[min(1, v.size - 1)]))
            out[f"tried_{q}_hi_edge_{k}"] = float(np.sqrt(v[-1] * v[max(v.size - 2, 0)]))
    if "seq_len" in df.columns and df["seq_len"].notna().any():
        out["seq_len"] = float(df["seq_len"].min())
    return out


def tried_at(constants: dict[str, float], N: float) -> dict[str, Any] | None:
    """What `tried_ranges` recorded at the fitted size nearest `N` in log N: ``{"N": n, "lr": (lo, lo_edge,
    hi_edge, hi), "batch": (...)}`` (a quantity absent where it was not swept); None for a fit without them
    (written before they were recorded)."""
    sizes = [(int(key[len("tried_N_"):]), v) for key, v in constants.items() if key.startswith("tried_N_")]
    if not sizes:
        return None
    k, n = min(sizes, key=lambda kv: abs(np.log(kv[1]) - np.log(N)))
    out: dict[str, Any] = {"N": n}
    for q in _TRIED:
        if f"tried_{q}_lo_{k}" in constants:
            out[q] = tuple(constants[f"tried_{q}_{e}_{k}"] for e in ("lo", "lo_edge", "hi_edge", "hi"))
    return out
