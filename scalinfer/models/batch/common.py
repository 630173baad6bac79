r"""What the three batch models share: the steps-to-target data, the censored likelihood, the hierarchy.

Data. A steps-to-target table has one row per cell i = (model size N, batch B, target loss L*): the
optimizer steps S_i a run needed to first reach L*, or, for a run that never reached it, the steps it
ran (a right-censored cell: S_i > steps). A *unit* u is one (N, L*) pair: all the batch sizes tried
for one model size and one target. Predictors are centered so that every sampled parameter is O(1):

    x_N = log N - m_N,  x_L = log L* - m_L,  b_i = log B_i - m_B,  y_i = log S_i - m_S

with m the midpoints of the data's ranges (natural logs).

Likelihood (all three models, so that LOO compares them on the same numbers): the log steps,

    y_i ~ Normal(mu_i, sigma)            reached cells
    y_i > bound_i, Pr = 1 - Phi((bound_i - mu_i) / sigma)     censored cells

one observed site ``"obs"`` with one entry per cell, so PSIS-LOO covers censored cells too. Where a
model says the target is unreachable at B_i (S = inf), a reached cell has likelihood 0 and a censored
cell likelihood 1. Since B_i is fixed by design, log E_i = log B_i + log S_i has the same density:
this is equally a likelihood of the tokens to target.

Hierarchy. Each model gives the unit-level quantities (S_min, B_crit, B_opt...) as power laws in N
and L* around the data's middle, plus a non-centered unit deviation tau * z_u, z_u ~ Normal(0, 1):
partial pooling across model sizes and target losses. A prediction at a fitted unit uses its own
z_u; at any other (N, L*) a new z ~ Normal(0, 1) per posterior draw, the same for every target loss at
one model size (drawn with a seed fixed by N, so a prediction is reproducible), which is how the
unit-to-unit scatter enters a prediction's interval.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import log_ndtr
from numpyro.distributions import constraints

from scalinfer.errors import ModelError
from scalinfer.models.base import Arrays, Model, tried_ranges
from scalinfer.runs.schema import RunTable

__all__ = ["CensoredNormal", "BatchTableModel", "unit_effect", "pooled", "target_key", "match_units", "table_arrays",
           "sample_power_law", "sample_unit_scatter", "unit_scatter_prior", "PREDICT_SEED"]

#: seed of the new-unit deviations drawn at prediction time (fixed: the same fit gives the same answer)
PREDICT_SEED = 20240917
#: two units are the same when their log N and log L* agree to this
_MATCH_TOL = 1e-6


class CensoredNormal(dist.Distribution):
    """Normal on the log steps, right-censored where ``censored`` and impossible where not ``reachable``.

    ``log_prob(y)`` is the normal log density for a reached cell and the log survival function
    ``log(1 - Phi((y - loc) / scale))`` for a censored one (y is then the bound). Where ``reachable``
    is false (the model says S = inf), a reached cell gets ``-inf`` and a censored one ``0``. ``loc``
    must be finite everywhere (models pass a safe value where unreachable, so gradients stay finite).
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    reparametrized_params = ["loc", "scale"]

    def __init__(self, loc, scale, censored, reachable=True, *, validate_args=None):
        self.loc, self.scale = dist.util.promote_shapes(loc, scale)
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(loc), jnp.shape(scale), jnp.shape(censored),
                                               jnp.shape(reachable))
        self.censored = jnp.broadcast_to(jnp.asarray(censored, bool), batch_shape)
        self.reachable = jnp.broadcast_to(jnp.asarray(reachable, bool), batch_shape)
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, sample_shape + self.batch_shape)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        z = (value - self.loc) / self.scale
        logpdf = -0.5 * jnp.square(z) - jnp.log(self.scale) - 0.5 * jnp.log(2 * jnp.pi)
        logsf = log_ndtr(-z)
        ll = jnp.where(self.censored, logsf, logpdf)
        return jnp.where(self.reachable, ll, jnp.where(self.censored, 0.0, -jnp.inf))


def unit_scatter_prior() -> dist.Distribution:
    """The prior of the unit-to-unit scatters tau_S and tau_B (log-scale sd around the power laws):
    LogNormal(log 0.1, 0.7), median 0.1, 90% in 0.03-0.32.

    Why not a half-normal (model versions 1): the scatter is not zero (sizes differ in shape, and each unit
    carries its own LR-grid and evaluation noise) and above a few tens of percent a power law would not
    describe the units at all; where the data hold few units (Zhang et al.: 4, one target each) they say
    little about tau, and a HalfNormal(0.5) left a posterior from 0.005 to 0.27. Over that factor 50 the
    non-centered deviations z change scale by as much (z = deviation / tau, the deviations pinned by each
    unit's cells), and no one NUTS step size served both ends: batch-openai on Zhang et al. diverged in 0.9%
    of its transitions, R-hat 1.016 on tau_S. This prior keeps tau off 0 and below ~0.3, where the same fit
    converges (benchmarks/README.md, section defaults.py, has the before and after).
    """
    return dist.LogNormal(float(np.log(0.1)), 0.7)


def sample_power_law(prefix: str):
    """Sample the intercept and exponents of one centered unit-level power law in N and L* (the models'
    priors): ``{prefix}0 ~ Normal(0, 2)``, ``{prefix}_N ~ Normal(0, 1)``, ``{prefix}_L ~ Normal(-5, 5)``.

    Returns the three sampled values, in that order.
    """
    return (numpyro.sample(f"{prefix}0", dist.Normal(0.0, 2.0)),
            numpyro.sample(f"{prefix}_N", dist.Normal(0.0, 1.0)),
            numpyro.sample(f"{prefix}_L", dist.Normal(-5.0, 5.0)))


def sample_unit_scatter(n_units: int, centered: bool = False):
    """Sample the scatter shared by the step and batch laws: ``tau_S, tau_B ~ LogNormal(log 0.1, 0.7)``
    (unit-to-unit, `unit_scatter_prior`), ``sigma ~ HalfNormal(0.3)`` (measurement) and per-unit standardized
    deviations z_S, z_B, Normal(0, 1) a priori.

    Non-centered (default): ``z_S, z_B ~ Normal(0, 1)`` are sampled. Centered: the deviations themselves,
    ``d_S ~ Normal(0, tau_S)``, ``d_B ~ Normal(0, tau_B)``, are sampled and ``z = d / tau`` is recorded as a
    deterministic site: the same prior, other coordinates for NUTS. Where every unit's curve pins its own
    deviation (many batches per unit), the non-centered z has a posterior sd ~ sd(d) / tau, narrow at large
    tau: a funnel the centered form does not have (Betancourt and Girolami 2015).

    Returns ``(tau_S, tau_B, sigma, z_S, z_B)``.
    """
    tau_S = numpyro.sample("tau_S", unit_scatter_prior())
    tau_B = numpyro.sample("tau_B", unit_scatter_prior())
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.3))
    with numpyro.plate("units", n_units):
        if centered:
            z_S = numpyro.deterministic("z_S", numpyro.sample("d_S", dist.Normal(0.0, tau_S)) / tau_S)
            z_B = numpyro.deterministic("z_B", numpyro.sample("d_B", dist.Normal(0.0, tau_B)) / tau_B)
        else:
            z_S = numpyro.sample("z_S", dist.Normal(0.0, 1.0))
            z_B = numpyro.sample("z_B", dist.Normal(0.0, 1.0))
    return tau_S, tau_B, sigma, z_S, z_B


def match_units(log_N, log_L, constants: dict[str, float]) -> np.ndarray:
    """Index of the fitted unit at each (log N, log L*) target, or -1 where none matches."""
    n = int(constants.get("n_units", 0))
    log_N, log_L = np.broadcast_arrays(np.asarray(log_N, float), np.asarray(log_L, float))
    out = np.full(log_N.shape, -1, dtype=int)
    for k in range(n):
        hit = (np.abs(log_N - np.log(constants[f"unit_N_{k}"])) < _MATCH_TOL) & (
            np.abs(log_L - np.log(constants[f"unit_L_{k}"])) < _MATCH_TOL)
        out[hit & (out < 0)] = k
    return out


def target_key(*logs) -> np.ndarray:
    """An integer identifying each target point (e.g. its log N, log L*), for `unit_effect`'s new draws."""
    key = np.zeros(np.broadcast_shapes(*(np.shape(v) for v in logs)), dtype=np.int64)
    for v in logs:
        key = key * 1_000_003 + np.round(np.asarray(v, float) * 1e6).astype(np.int64)
    return key


def unit_effect(z: np.ndarray, index: np.ndarray, key: np.ndarray, salt: int = 0) -> np.ndarray:
    """Standard-normal unit deviations at targets: the fitted z where `index` >= 0, else new draws.

    A new unit's draws depend only on its `key` (see `target_key`) and `salt`, not on how many targets
    are asked for at once: the same (N, L*) gets the same deviations in every call, so a schedule and a
    prediction at the same new model size agree.

    Parameters
    ----------
    z : numpy.ndarray
        Posterior draws of the fitted units' deviations, shape (n_draws, n_units).
    index : numpy.ndarray
        Fitted unit of each target (-1: a new unit), any shape T.
    key : numpy.ndarray
        Integer identity of each target point, shape T.
    salt : int
        Distinguishes the deviations of different quantities (independent new draws).

    Returns
    -------
    numpy.ndarray
        Shape (n_draws, *T).
    """
    z = np.asarray(z, float)
    index = np.asarray(index)
    key = np.broadcast_to(np.asarray(key, np.int64), index.shape)
    out = np.empty((z.shape[0], *index.shape))
    if z.shape[1]:
        out[:] = z[:, np.clip(index, 0, None)]
    new = index < 0
    for k in np.unique(key[new]):
        rng = np.random.default_rng([PREDICT_SEED, salt, int(k) & 0x7FFFFFFFFFFFFFFF])
        out[:, new & (key == k)] = rng.standard_normal(z.shape[0])[:, None]
    return out


def pooled(fitted: np.ndarray, mean: np.ndarray, tau: np.ndarray, index: np.ndarray, key: np.ndarray,
           salt: int = 0) -> np.ndarray:
    """A partially pooled quantity at targets: the fitted group's draws where `index` >= 0, else
    ``mean + tau * z`` with a new z ~ Normal(0, 1) per draw (as in `unit_effect`).

    Parameters
    ----------
    fitted : numpy.ndarray
        Draws of the fitted groups' values, (n_draws, n_groups).
    mean, tau : numpy.ndarray
        Draws of the population mean at each target (n_draws, *T) and of its scale (n_draws, 1...).
    index, key : numpy.ndarray
        Fitted group of each target (-1 for a new one) and its identity, shape T.
    """
    index = np.asarray(index)
    new = tau * unit_effect(np.zeros((np.shape(mean)[0], 0)), np.full(index.shape, -1), key, salt) + mean
    if np.asarray(fitted).shape[1] == 0:
        return new
    return np.where(index >= 0, np.asarray(fitted)[:, np.clip(index, 0, None)], new)


@dataclasses.dataclass(frozen=True)
class BatchTableModel(Model):
    """Base of the batch models on steps-to-target tables (loss curves are converted first).

    Subclasses implement `model` and the unit-level laws; this class turns the table into arrays,
    accepts curves (converted with `curves_to_table`), and answers the targets ``N``, ``target_loss`` and
    ``batch``.

    Parameters
    ----------
    target_losses : the target losses (nats/token) at which loss curves become steps-to-target cells
        (None: `default_target_losses`).
    interpolate : whether a cell's steps are interpolated between the records around the crossing (else
        the first record at or below the target).
    """

    target_losses: tuple[float, ...] | None = None
    interpolate: bool = True

    table_kind = "steps_to_target"
    required_columns = ("N", "batch_tokens", "target_loss", "steps_to_target")
    targets = ("N", "target_loss", "batch")
    required_targets = ("N", "target_loss")
    observed = ("log_steps",)

    def __post_init__(self):
        if self.target_losses is not None:
            t = np.atleast_1d(np.asarray(self.target_losses, dtype=float))
            if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t) & (t > 0)):
                raise ModelError(f"target_losses must be positive finite losses (nats/token), got "
                                 f"{self.target_losses!r}")
            object.__setattr__(self, "target_losses", tuple(t.tolist()))
        if not isinstance(self.interpolate, (bool, np.bool_)):
            raise ModelError(f"interpolate must be True or False, got {self.interpolate!r}")
        object.__setattr__(self, "interpolate", bool(self.interpolate))

    # ---- data ---------------------------------------------------------------------------------------
    def check(self, runs: RunTable) -> None:
        if runs.kind not in ("steps_to_target", "curves"):
            raise ModelError(f"model {self.name!r} fits steps-to-target tables or loss curves, but {runs.source} "
                             f"is a {runs.kind!r} table (one final loss per run)")
        super().check(runs)

    def table(self, runs: RunTable) -> RunTable:
        """The steps-to-target table the model fits: `runs` itself, or derived from curves."""
        if runs.kind == "curves":
            from scalinfer.models.batch.targets import curves_to_table
            return curves_to_table(runs, self.target_losses, self.interpolate)
        self.check(runs)
        return runs

    def prepare(self, runs: RunTable) -> tuple[Arrays, dict[str, float]]:
        return table_arrays(self.table(runs), self.name)

    def coords(self, data: Arrays, constants: dict[str, float]) -> dict[str, list[str]]:
        n = int(constants["n_units"])
        return {"unit": [f"N={constants[f'unit_N_{k}']:.4g},L={constants[f'unit_L_{k}']:.4g}" for k in range(n)]}

    def model_kwargs(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        return {k: data[k] for k in ("x_N", "x_L", "unit", "log_b", "censored", "log_steps")}

    # ---- predictions ----------------------------------------------------------------------------------
    def _targets(self, constants, N, target_loss, batch):
        """Centered target arrays: x_N, x_L (shape T), log_b (shape of batch or None), unit index (T)."""
        if N is None or target_loss is None:
            raise ModelError(f"model {self.name!r} predicts at a model size N and a target loss "
                             f"(give N= and target_loss=)")
        N = np.asarray(N, float)
        L = np.asarray(target_loss, float)
        if np.any(~np.isfinite(N) | (N <= 0)) or np.any(~np.isfinite(L) | (L <= 0)):
            raise ModelError(f"N and target_loss must be positive finite numbers, got N={N}, target_loss={L}")
        N, L = np.broadcast_arrays(N, L)
        log_b = None
        if batch is not None:
            B = np.asarray(batch, float)
            if np.any(~np.isfinite(B) | (B <= 0)):
                raise ModelError(f"batch sizes must be positive finite numbers of tokens, got {B}")
            log_b = np.log(B) - constants["m_B"]
        idx = match_units(np.log(N), np.log(L), constants)
        # a new unit's deviation is keyed on its model size alone: at one size it is the same for every target
        # loss (a size's offset from the power laws persists), so curves over L* are smooth
        return np.log(N) - constants["m_N"], np.log(L) - constants["m_L"], log_b, idx, target_key(np.log(N))

    def _unit_power_laws(self, draws, constants, N, target_loss, batch_prefix: str):
        """Draws of the two unit-level laws at targets (N, L*) in natural units, each (n_draws, *T):
        ``s0 + s_N x_N + s_L x_L + tau_S z_S + m_S`` (log steps) and the same with the ``batch_prefix``
        parameters, ``tau_B``, ``z_B`` and ``m_B`` (log tokens); z is a fitted unit's deviation or a new
        draw (`unit_effect`, salts 0 and 1)."""
        x_N, x_L, _, idx, key = self._targets(constants, N, target_loss, None)
        g = lambda k: np.asarray(draws[k]).reshape(-1, *([1] * x_N.ndim))  # noqa: E731
        b = batch_prefix
        log_S = (g("s0") + g("s_N") * x_N + g("s_L") * x_L + g("tau_S") * unit_effect(draws["z_S"], idx, key, 0)
                 + constants["m_S"])
        log_B = (g(f"{b}0") + g(f"{b}_N") * x_N + g(f"{b}_L") * x_L
                 + g("tau_B") * unit_effect(draws["z_B"], idx, key, 1) + constants["m_B"])
        return log_S, log_B

    def extrapolation(self, constants, N=None, target_loss=None, batch=None, **_):
        out = {}
        if N is not None:
            out["N_ratio"] = np.asarray(N, float) / constants["max_N"]
        if target_loss is not None:
            out["target_loss_ratio"] = np.asarray(target_loss, float) / constants["min_target_loss"]
        if batch is not None:
            out["batch_ratio"] = np.asarray(batch, float) / constants["max_batch"]
        return out

    def fit_warnings(self, fit) -> list[str]:
        c = fit.constants
        out = []
        if c.get("confounded_N_L", 0.0) > 0.5:
            out.append("each model size has a single target loss, so the data cannot tell the N and target-loss "
                       "dependences apart: predictions at a (N, target loss) off the data's relation between the "
                       "two rest on the prior")
        if c.get("n_censored", 0.0) > 0:
            out.append(f"{int(c['n_censored'])} censored cells (target never reached) enter as lower bounds")
        out.extend(self._below_data_warnings(fit))
        return out

    def _below_data_warnings(self, fit) -> list[str]:
        """B_min / B_opt of the fitted units below the smallest batch tried: the data bound them from above
        only, so their values rest on the model's shape and priors."""
        c = fit.constants
        n = int(c.get("n_units", 0))
        qs = [q for q in ("batch_opt", "batch_min") if q in self.predicts]
        if not n or not qs:
            return []
        N = np.array([c[f"unit_N_{k}"] for k in range(n)])
        L = np.array([c[f"unit_L_{k}"] for k in range(n)])
        import warnings as _w

        with _w.catch_warnings():
            _w.simplefilter("ignore", RuntimeWarning)
            pred = self.predict(fit.draws(), c, N=N, target_loss=L)
        out = []
        for q in qs:
            below = int(np.sum(np.median(pred[q], axis=0) < c["min_batch"]))
            if below:
                out.append(f"{q} lies below the smallest batch tried ({c['min_batch']:.4g} tokens) in {below} of {n} "
                           f"(N, target loss) units: the data bound it from above only, and its value there rests "
                           f"on the model's shape and priors")
        return out


def table_arrays(table: RunTable, model_name: str) -> tuple[Arrays, dict[str, float]]:
    """Arrays and constants of a steps-to-target table (see the module docstring for the centering)."""
    df = table.df
    N = df["N"].to_numpy(float)
    B = df["batch_tokens"].to_numpy(float)
    L = df["target_loss"].to_numpy(float)
    S = df["steps_to_target"].to_numpy(float)
    censored = ~np.isfinite(S)
    if censored.any():
        bound = df["steps"].to_numpy(float) if "steps" in df.columns else np.full(len(df), np.nan)
        bad = censored & ~(np.isfinite(bound) & (bound > 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ModelError(
                f"{table.source}: run {df['run_id'].iloc[i]!r} never reached its target (steps_to_target is "
                f"missing) and has no 'steps' (how long it ran), so it cannot enter as a censored cell; "
                f"give its steps or leave it out with --where")
        S = np.where(censored, bound, S)
    zero = ~censored & (S <= 0)
    if zero.any():
        i = int(np.flatnonzero(zero)[0])
        raise ModelError(f"{table.source}: run {df['run_id'].iloc[i]!r} reached its target in {S[i]:g} steps; "
                         "steps to target must be positive")
    if np.unique(B).size < 2:
        raise ModelError(f"{table.source}: every cell has the same batch size ({B[0]:g} tokens); model "
                         f"{model_name!r} needs runs at two or more batch sizes")
    if (~censored).sum() < 2:
        raise ModelError(f"{table.source}: fewer than two cells reached their target; nothing to fit")
    keys = np.stack([np.log(N), np.log(L)], axis=1)
    uniq, unit = np.unique(np.round(keys, 9), axis=0, return_inverse=True)
    unit = unit.ravel()
    unit_N = np.array([N[unit == k][0] for k in range(len(uniq))])
    unit_L = np.array([L[unit == k][0] for k in range(len(uniq))])
    mid = lambda v: 0.5 * (float(np.min(v)) + float(np.max(v)))  # noqa: E731
    m_N, m_L, m_B, m_S = mid(np.log(N)), mid(np.log(L)), mid(np.log(B)), mid(np.log(S))
    sizes = np.unique(unit_N)
    per_size_targets = [np.unique(unit_L[unit_N == n]).size for n in sizes]
    data = {
        "x_N": np.log(unit_N) - m_N, "x_L": np.log(unit_L) - m_L, "unit": unit.astype(np.int32),
        "log_b": np.log(B) - m_B, "censored": censored, "log_steps": np.log(S) - m_S,
        "target_loss": L, "size": np.searchsorted(sizes, N).astype(np.int32),
        "x_N_size": np.log(sizes) - m_N,
    }
    constants = {
        "m_N": m_N, "m_L": m_L, "m_B": m_B, "m_S": m_S,
        "max_N": float(N.max()), "min_N": float(N.min()), "max_batch": float(B.max()),
        "min_batch": float(B.min()), "min_target_loss": float(L.min()), "max_target_loss": float(L.max()),
        "n_units": float(len(uniq)), "n_sizes": float(len(sizes)), "n_censored": float(censored.sum()),
        # N and L* move together (one target per size, several sizes): their slopes are not separable
        "confounded_N_L": float(len(sizes) > 1 and max(per_size_targets) == 1),
        **{f"unit_N_{k}": float(v) for k, v in enumerate(unit_N)},
        **{f"unit_L_{k}": float(v) for k, v in enumerate(unit_L)},
        **{f"size_N_{k}": float(v) for k, v in enumerate(sizes)},
        **tried_ranges(df),  # the batches tried at each size, for the answers' warnings
    }
    return data, constants
