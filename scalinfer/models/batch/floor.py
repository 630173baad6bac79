r"""``batch-floor``: the noise-floor loss surface L(S; B) = L_inf + a S^-alpha + c / B (docs/laws.md section 5).

Our mechanistic reconstruction of the batch-size paper's three stages: at a constant LR (the stable
phase of WSD) the batch B (tokens per step) sets a noise floor c / B that no number of steps S gets below.
For model size g (one per distinct N):

.. math::

    L(S; B) = L_{\infty,g} + a_g S^{-\alpha} + c_g / B

and, for a target loss L*, in closed form (`scalinfer.laws.batch`):

.. math::

    B_{min} = \frac{c}{L^* - L_\infty}, \quad S_{min} = \left(\frac{a}{L^* - L_\infty}\right)^{1/\alpha},\quad
    B_{opt} = (1 + 1/\alpha) B_{min}, \quad S_{opt} = S_{min} (1 + \alpha)^{1/\alpha},

    S(B) = S_{min} (1 - B_{min} / B)^{-1/\alpha}, \qquad E_{min} = B_{opt} S_{opt}.

So B_min and B_opt are power laws in the gap L* - L_inf (exponent -1) and in N through c_g and L_inf,g.
Which batch each is: ``batch_min`` the smallest batch that reaches L* at all, ``batch_opt`` the one that
reaches it with the fewest tokens (the paper's), ``batch_crit`` OpenAI's E_min / S_min applied to this curve.
Along the token-efficient path the loss after E tokens is L_inf + (K / E)^(alpha / (1 + alpha)) with
K = (1 + 1/alpha) (1 + alpha)^(1/alpha) c a^(1/alpha) (`loss_at_tokens`): the loss-vs-tokens law the
batch-size scheduler follows.

Parameterization. In reference units S' = S / e^{m_S}, B' = B / e^{m_B} (the middles of the data's log
steps and log batch), with power laws in N and a deviation per size (partial pooling):

.. math::

    \log L_{\infty,g} &\sim \mathrm{Normal}(l_0 + l_N x_{N,g},\ \tau_l) \\
    \log \tilde a_g &\sim \mathrm{Normal}(a_0 + a_N x_{N,g},\ \tau_a) \qquad (\tilde a = a\, e^{-\alpha m_S}:
        \text{the step term at the middle steps, nats}) \\
    \log \tilde c_g &\sim \mathrm{Normal}(c_0 + c_N x_{N,g},\ \tau_c) \qquad (\tilde c = c\, e^{-m_B}:
        \text{the floor at the middle batch, nats})

sampled non-centered (``LocScaleReparam``: standardized deviations ``*_decentered``). A size not in the
data gets a new draw from these normals at prediction time.

Sampling on a table (version 2; the model and its priors are as above, only NUTS's coordinates differ). A
table fixes each size's S_min and B_min, that is log a - log gap and log c - log gap (gap = L* - L_inf),
and the hierarchy ties a and c to L_inf through the gap: a curved ridge along which a, c and L_inf move
together, steepest where the gap closes. Two exact changes of variables straighten it:

- ``a0, a_N, c0, c_N`` are sampled as ``*_gap`` offsets from the log gap's value and slope in x_N at the
  middle (`_log_gap`, the targets' trend against the floor's law): translations by a function of l0 and
  l_N, so the density is unchanged (unit Jacobian); ``a0``, ``a_N``, ``c0``, ``c_N`` remain as deterministic sites;
- ``log c_g`` is sampled as ``c_logit`` = logit(c_g / W_g), W_g = min over the size's reached cells of
  B_i (L*_i - L_inf,g): past c_g = W_g some reached cell is unreachable (likelihood 0), so the support is
  unchanged and the wall, near which the posterior of a fit like Zhang et al.'s sits (the data's perfect
  scaling at small batch is what the form cannot give but near B_min), moves to infinity (`_BelowWall`
  carries the Jacobian). ``log_c`` remains a deterministic site.

On Zhang et al. this took the divergent transitions from 5.45% to 0.25-0.85% (seeds 0-3, ``target_accept``
0.95); at the model's default ``target_accept`` 0.99 they are 0.1-0.2% (benchmarks/README.md, section
defaults.py).

Two likelihoods, one model:

- loss curves (table kind ``curves``): log loss ~ Normal(log L(S_i; B_i), sigma_loss), one entry per record;
- steps-to-target tables: the censored normal on log steps of `common`, with log S_i from
  `scalinfer.laws.steps_to_target_floor` (unreachable where B_i <= B_min: a reached cell then has
  likelihood 0, a censored one 1). On a table LOO compares it with ``batch-openai`` and ``batch-wsd``.

With one target per size (as in Zhang et al.) a table fixes only S_min and B_min per size, not L_inf,g
and a_g separately; the power laws in N and the priors carry the rest, and the intervals show it.

A limit of the form: S_opt / S_min = (1 + alpha)^(1/alpha) is at most e, so between the fewest steps and
the token-optimal point lies less than a factor e in steps, and E(B) is near its minimum only over a
narrow range of batches. Data with a wide range of perfect scaling (E flat over a factor 8 in batch
while S falls 20-fold, as in Zhang et al.'s runs with weight averaging) are out of its reach: there it
fits with a large sigma and LOO ranks it last (`benchmarks/zhang_batch.py`).

Priors (L_ref: the smallest loss in the data, observed or target; weakly informative on these scales):

- ``l0 ~ Normal(log(0.8 L_ref), 0.25)``: the floor of an infinitely long, infinitely large-batch run
  sits below every loss seen, typically 60-95% of the best (sd 0.25 spans 0.6-1.0 L_ref at 1 sd);
- ``l_N ~ Normal(-0.05, 0.1)``: it falls slowly with N (Chinchilla: d log L / d log N ~ -0.05 to -0.1);
- ``a0 ~ Normal(log(0.1 L_ref), 1.5)``: the reducible step term at the middle steps, a few percent to
  half of the loss;
- ``c0 ~ Normal(log(0.03 L_ref), 1.5)``: the noise floor at the middle batch, well under a tenth of the
  loss but allowed an order of magnitude either way;
- ``a_N, c_N ~ Normal(0, 1)``: exponents of N of order one;
- ``alpha ~ LogNormal(log 0.7, 0.5)``: loss-vs-steps exponents at constant LR, 90% in 0.3-1.6 (docs/laws.md
  section 5.3: 0.6-1.33 brackets the published B_opt-vs-data exponents);
- ``tau_l ~ HalfNormal(0.05)``, ``tau_a ~ HalfNormal(0.3)``, ``tau_c ~ LogNormal(log 0.1, 0.7)``: size-to-size
  scatter around the power laws, a few percent of the floor, tens of percent of the other terms. tau_c is
  kept off 0 (90% in 0.03-0.32; version 1: HalfNormal(0.3)) because on a table log c is sampled centered
  (``c_logit``), where a half-normal would let the posterior mode collapse to tau_c = 0;
- ``sigma ~ HalfNormal(0.02)`` on log loss (curves: eval noise is about 1%), ``HalfNormal(0.3)`` on log
  steps (tables, as in the other batch models).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd
from numpyro.distributions import constraints
from numpyro.infer.reparam import LocScaleReparam

from scalinfer.errors import ModelError
from scalinfer.laws.batch import (batch_min_floor, batch_opt_floor, loss_noise_floor, steps_min_floor,
                                  steps_to_target_floor, tokens_min_floor)
from scalinfer.models.base import Arrays, LossCurve
from scalinfer.models.batch.common import BatchTableModel, CensoredNormal, pooled, table_arrays, target_key
from scalinfer.runs.schema import RunTable
from scalinfer.runtime import float64

__all__ = ["BatchFloor", "FLOOR"]

_SIZE_TOL = 1e-6
_SIZE_SITES = ("log_L_inf", "log_a", "log_c")


def _log_gap(log_L_mid, log_L_slope, l0, l_N):
    """The log gap between the target loss and the floor along N, log(L_t(x) - e^{l0 + l_N x}) with
    log L_t(x) = log_L_mid + log_L_slope x the targets' trend over x = log N - m_N: its value and its slope
    in x at the middle (x = 0). The gap at the middle is smoothed where it closes (k log(1 + e^{gap / k}),
    k = L_t / 20), so both stay finite everywhere."""
    L_t = jnp.exp(log_L_mid)
    k = 0.05 * L_t
    gap = k * jnp.logaddexp(0.0, (L_t - jnp.exp(l0)) / k)
    return jnp.log(gap), (log_L_slope * L_t - l_N * jnp.exp(l0)) / gap


def _shifted(name: str, prior: dist.Normal, shift):
    """Sample ``name ~ prior``, as ``{name}_gap = name - shift`` when `shift` (other parameters' function)
    is given: a translation, so the density is the same and ``name`` is a deterministic site."""
    if shift is None:
        return numpyro.sample(name, prior)
    gap = numpyro.sample(f"{name}_gap", dist.Normal(prior.loc - shift, prior.scale))
    return numpyro.deterministic(name, gap + shift)


class _BelowWall(dist.Distribution):
    """The prior log c ~ Normal(loc, scale) on the coordinate u = logit(c / W) of a size with a wall W > 0.

    ``log c = log W + log sigmoid(u)``, so ``log_prob(u) = Normal(loc, scale).log_prob(log c) + log
    sigmoid(-u)`` (the Jacobian d log c / du = sigmoid(-u)): the model's density, in coordinates where the
    wall c = W (past which a reached cell is unreachable: likelihood 0) lies at u = +inf. A size with no
    reached cell (``wall`` = inf) has no wall: there ``log c = loc + scale u``, u ~ Normal(0, 1)
    (non-centered, as on curves). A wall W <= 0 (the floor at or above a reached target: likelihood 0
    whatever c) is taken as 1, to keep the density finite where the likelihood rules it out.
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real

    def __init__(self, loc, scale, wall, *, validate_args=None):
        self.loc, self.scale, wall = dist.util.promote_shapes(loc, scale, wall)
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(loc), jnp.shape(scale), jnp.shape(wall))
        self.walled = jnp.broadcast_to(wall < jnp.inf, batch_shape)
        self.log_wall = jnp.broadcast_to(jnp.log(jnp.where(self.walled & (wall > 0), wall, 1.0)), batch_shape)
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    def log_c(self, u):
        return jnp.where(self.walled, self.log_wall + jax.nn.log_sigmoid(u), self.loc + self.scale * u)

    def sample(self, key, sample_shape=()):
        """u of a prior draw of log c, a draw past the wall put just below it."""
        log_c = self.loc + self.scale * jax.random.normal(key, sample_shape + self.batch_shape)
        walled = jax.scipy.special.logit(jnp.exp(jnp.minimum(log_c - self.log_wall, -1e-6)))
        return jnp.where(self.walled, walled, (log_c - self.loc) / self.scale)

    def log_prob(self, u):
        walled = dist.Normal(self.loc, self.scale).log_prob(self.log_c(u)) + jax.nn.log_sigmoid(-u)
        return jnp.where(self.walled, walled, dist.Normal(0.0, 1.0).log_prob(u))


@dataclasses.dataclass(frozen=True)
class BatchFloor(BatchTableModel, LossCurve):
    name = "batch-floor"
    version = "2"
    #: NUTS's target acceptance: on a table the posterior can sit near the wall (see "Sampling"), where the
    #: curvature grows; at 0.99 Zhang et al.'s fit stays under 0.5% divergent at every seed tried, at 0.95 and
    #: 0.9 it does not (benchmarks/README.md, defaults.py)
    target_accept = 0.99
    table_kind = "curves"
    predicts = {"batch_min": "tokens/step", "batch_opt": "tokens/step", "batch_crit": "tokens/step",
                "steps_to_target": "steps", "tokens_to_target": "tokens"}
    observed = ("log_steps", "log_loss")
    dims = {**{k: ["size"] for site in _SIZE_SITES for k in (site, f"{site}_decentered")}, "c_logit": ["size"]}

    # ---- data ---------------------------------------------------------------------------------------
    def check(self, runs: RunTable) -> None:
        if runs.kind not in ("curves", "steps_to_target"):
            raise ModelError(f"model {self.name!r} fits loss curves or steps-to-target tables, but {runs.source} "
                             f"is a {runs.kind!r} table")
        need = ("run_id", "step", "N", "loss", "batch_tokens") if runs.kind == "curves" else \
            ("N", "batch_tokens", "target_loss", "steps_to_target")
        missing = [c for c in need if c not in runs.df.columns or runs.df[c].isna().all()]
        if missing:
            raise ModelError(f"model {self.name!r} needs column(s) {', '.join(missing)}, which {runs.source} "
                             "does not have")

    def prepare(self, runs: RunTable) -> tuple[Arrays, dict[str, float]]:
        self.check(runs)
        if runs.kind == "steps_to_target":
            data, constants = table_arrays(runs, self.name)
            constants["L_ref"] = constants["min_target_loss"]
            constants["curves"] = 0.0
            return data, constants
        return self._curve_arrays(runs)

    def _curve_arrays(self, runs: RunTable) -> tuple[Arrays, dict[str, float]]:
        df = runs.df
        N, B, S, loss = (df[c].to_numpy(float) for c in ("N", "batch_tokens", "step", "loss"))
        bad = ~np.isfinite(loss)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ModelError(f"{runs.source}: run {df['run_id'].iloc[i]!r} has a non-finite loss at step {S[i]:g} "
                             f"(diverged); the floor surface needs finite losses: leave diverged records out "
                             f"with --where, or fit a steps-to-target table where such runs are censored")
        if np.any(S <= 0):
            i = int(np.flatnonzero(S <= 0)[0])
            raise ModelError(f"{runs.source}: run {df['run_id'].iloc[i]!r} has a record at step {S[i]:g}; "
                             "L(S; B) is defined for S > 0: leave the initial records out (--where 'step > 0')")
        if np.unique(B).size < 2:
            raise ModelError(f"{runs.source}: every curve has the same batch size ({B[0]:g} tokens), so the "
                             f"noise floor c / B cannot be told from L_inf; model {self.name!r} needs curves at "
                             "two or more batch sizes")
        mid = lambda v: 0.5 * (float(np.min(v)) + float(np.max(v)))  # noqa: E731
        m_N, m_B, m_S = mid(np.log(N)), mid(np.log(B)), mid(np.log(S))
        sizes = np.unique(N)
        data = {"size": np.searchsorted(sizes, N).astype(np.int32), "x_N_size": np.log(sizes) - m_N,
                "log_b": np.log(B) - m_B, "log_s": np.log(S) - m_S, "log_loss": np.log(loss)}
        constants = {"m_N": m_N, "m_B": m_B, "m_S": m_S, "m_L": 0.0, "L_ref": float(loss.min()),
                     "max_N": float(N.max()), "min_N": float(N.min()), "max_batch": float(B.max()),
                     "min_batch": float(B.min()), "min_target_loss": float(loss.min()),
                     "max_target_loss": float(loss.max()), "n_units": 0.0, "n_sizes": float(len(sizes)),
                     "curves": 1.0, **{f"size_N_{k}": float(v) for k, v in enumerate(sizes)}}
        return data, constants

    def prior_label(self, site: str) -> str:
        """The prior behind a sampling coordinate (see "Sampling"): ``a0_gap`` carries ``a0``'s prior (a
        translation), ``c_logit`` and ``*_decentered`` a size's deviation from its law (``log_c``: c0, c_N, tau_c)."""
        if site.endswith("_gap"):
            return f"{site[:-len('_gap')]} (sampled as {site})"
        if site == "c_logit":
            return "log_c about its law (c0, c_N, tau_c; sampled as c_logit)"
        if site.endswith("_decentered"):
            name = site[:-len("_decentered")]
            tau = {"log_L_inf": "tau_l", "log_a": "tau_a", "log_c": "tau_c"}.get(name, "its scatter")
            return f"{name} about its law ({tau}; sampled as {site})"
        return site

    def coords(self, data, constants):
        n = int(constants["n_sizes"])
        return {"size": [f"N={constants[f'size_N_{k}']:.4g}" for k in range(n)]}

    def model_kwargs(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        keys = ("size", "x_N_size", "log_b", "log_s", "log_loss") if constants["curves"] else \
            ("size", "x_N_size", "log_b", "target_loss", "censored", "log_steps")
        kwargs = {**{k: data[k] for k in keys}, "L_ref": constants["L_ref"]}
        if constants["curves"]:
            return kwargs
        # the targets' trend in N: through the middle target, with the cells' least-squares slope in x_N
        x = data["x_N_size"][data["size"]]
        slope = float(np.polyfit(x, np.log(data["target_loss"]), 1)[0]) if np.ptp(x) > 0 else 0.0
        return {**kwargs, "log_L_mid": constants["m_L"], "log_L_slope": slope}

    # ---- the NumPyro model --------------------------------------------------------------------------------
    def model(self, size, x_N_size, log_b, L_ref, log_s=None, log_loss=None, target_loss=None, censored=None,
              log_steps=None, log_L_mid=None, log_L_slope=None):
        n_sizes = x_N_size.shape[0]
        ref = jnp.log(L_ref)
        curves = log_s is not None
        l0 = numpyro.sample("l0", dist.Normal(ref + jnp.log(0.8), 0.25))
        l_N = numpyro.sample("l_N", dist.Normal(-0.05, 0.1))
        # tables: the laws of log a and log c sampled as offsets from the log gap's (see "Sampling")
        gap0, gap_N = (None, None) if curves else _log_gap(log_L_mid, log_L_slope, l0, l_N)
        a0 = _shifted("a0", dist.Normal(ref + jnp.log(0.1), 1.5), gap0)
        a_N = _shifted("a_N", dist.Normal(0.0, 1.0), gap_N)
        c0 = _shifted("c0", dist.Normal(ref + jnp.log(0.03), 1.5), gap0)
        c_N = _shifted("c_N", dist.Normal(0.0, 1.0), gap_N)
        alpha = numpyro.sample("alpha", dist.LogNormal(jnp.log(0.7), 0.5))
        tau_l = numpyro.sample("tau_l", dist.HalfNormal(0.05))
        tau_a = numpyro.sample("tau_a", dist.HalfNormal(0.3))
        tau_c = numpyro.sample("tau_c", dist.LogNormal(jnp.log(0.1), 0.7))
        sigma = numpyro.sample("sigma", dist.HalfNormal(0.02 if curves else 0.3))
        # sampled as standardized deviations (non-centered): with few sizes a centered form lets the mode
        # collapse to tau = 0, where its density is unbounded (on a table log c is sampled below its wall
        # instead, centered: its tau_c prior has no mass at 0)
        sites = _SIZE_SITES if curves else _SIZE_SITES[:2]
        with numpyro.handlers.reparam(config={k: LocScaleReparam(0) for k in sites}), \
                numpyro.plate("sizes", n_sizes):
            log_L_inf = numpyro.sample("log_L_inf", dist.Normal(l0 + l_N * x_N_size, tau_l))
            log_a = numpyro.sample("log_a", dist.Normal(a0 + a_N * x_N_size, tau_a))
            if curves:
                log_c = numpyro.sample("log_c", dist.Normal(c0 + c_N * x_N_size, tau_c))
            else:
                # below the wall the reached cells set: B_min < every reached batch (see "Sampling")
                room = jnp.where(censored, jnp.inf, jnp.exp(log_b) * (target_loss - jnp.exp(log_L_inf)[size]))
                below = _BelowWall(c0 + c_N * x_N_size, tau_c, jax.ops.segment_min(room, size, num_segments=n_sizes))
                log_c = numpyro.deterministic("log_c", below.log_c(numpyro.sample("c_logit", below)))
        L_inf, a, c = jnp.exp(log_L_inf)[size], jnp.exp(log_a)[size], jnp.exp(log_c)[size]
        if curves:
            mu = jnp.log(loss_noise_floor(jnp.exp(log_s), jnp.exp(log_b), L_inf, a, alpha, c))
            with numpyro.plate("records", log_s.shape[0]):
                numpyro.sample("obs", dist.Normal(mu, sigma), obs=log_loss)
            return
        S = steps_to_target_floor(jnp.exp(log_b), target_loss, L_inf, a, alpha, c)
        reachable = jnp.isfinite(S)
        mu = jnp.log(jnp.where(reachable, S, 1.0))
        with numpyro.plate("cells", log_b.shape[0]):
            numpyro.sample("obs", CensoredNormal(mu, sigma, censored, reachable), obs=log_steps)

    def init_values(self, data, constants):
        """A feasible start: the floor at 0.8 L_ref, the noise floor small enough that every batch reaches
        every observed target (tables), the step term sized from the shortest steps to target."""
        n = len(data["x_N_size"])
        L_ref = constants["L_ref"]
        start = {"l0": np.log(0.8 * L_ref), "l_N": 0.0, "a_N": 0.0, "c_N": 0.0, "alpha": 0.7,
                 "tau_l": 0.02, "tau_a": 0.1, "tau_c": 0.1, "log_L_inf_decentered": np.zeros(n),
                 "log_a_decentered": np.zeros(n)}
        if constants["curves"]:
            return {**start, "a0": np.log(0.1 * L_ref), "c0": np.log(0.02 * L_ref), "sigma": 0.01,
                    "log_c_decentered": np.zeros(n)}
        gap = float(np.min(data["target_loss"])) - 0.8 * L_ref
        # S = (a / gap)^(1/alpha) at the largest batches ~ the fewest steps seen (centered: min log_steps)
        a0 = np.log(gap) + 0.7 * float(np.min(data["log_steps"]))
        # B_min = c / gap at a third of the smallest batch: every reached cell stays reachable
        c0 = np.log(gap) + np.log(constants["min_batch"] / 3.0) - constants["m_B"]
        kw = self.model_kwargs(data, constants)
        g0, g_N = (float(v) for v in _log_gap(kw["log_L_mid"], kw["log_L_slope"], start["l0"], start["l_N"]))
        # c_logit = -1: each size's c at 27% of its wall, inside the support whatever the start's c0
        return {**{k: v for k, v in start.items() if k not in ("a_N", "c_N")}, "a0_gap": a0 - g0, "c0_gap": c0 - g0,
                "a_N_gap": -g_N, "c_N_gap": -g_N, "sigma": 0.2, "c_logit": np.full(n, -1.0)}

    def derived(self, draws, constants):
        """The surface at the data's middle size in natural units: L_inf (nats), a (nats steps^alpha),
        c (nats tokens)."""
        return {"L_inf_mid": np.exp(draws["l0"]),
                "a_mid": np.exp(draws["a0"] + draws["alpha"] * constants["m_S"]),
                "c_mid": np.exp(draws["c0"] + constants["m_B"])}

    # ---- predictions ------------------------------------------------------------------------------------
    def surface(self, draws, constants, N) -> dict[str, np.ndarray]:
        """Draws of L_inf, a, c (natural units) and alpha at model size(s) N, shape (n_draws, *N.shape).

        A fitted size uses its own deviations, any other size new ones (see `common.unit_effect`).
        """
        N = np.asarray(N, float)
        if np.any(~np.isfinite(N) | (N <= 0)):
            raise ModelError(f"N must be positive finite, got {N}")
        x_N = np.log(N) - constants["m_N"]
        idx = np.full(N.shape, -1)
        for k in range(int(constants["n_sizes"])):
            idx[(np.abs(np.log(N) - np.log(constants[f"size_N_{k}"])) < _SIZE_TOL) & (idx < 0)] = k
        key = target_key(np.log(N))
        g = lambda k: np.asarray(draws[k]).reshape(-1, *([1] * x_N.ndim))  # noqa: E731
        alpha = g("alpha")
        L_inf = np.exp(pooled(draws["log_L_inf"], g("l0") + g("l_N") * x_N, g("tau_l"), idx, key, 10))
        a = np.exp(pooled(draws["log_a"], g("a0") + g("a_N") * x_N, g("tau_a"), idx, key, 11)
                   + alpha * constants["m_S"])
        c = np.exp(pooled(draws["log_c"], g("c0") + g("c_N") * x_N, g("tau_c"), idx, key, 12) + constants["m_B"])
        shape = np.broadcast_shapes(L_inf.shape, alpha.shape)
        return {"L_inf": L_inf, "a": a, "c": c, "alpha": np.broadcast_to(alpha, shape)}

    @float64  # the laws in float64, as the fit
    def predict(self, draws, constants, N=None, target_loss=None, batch=None):
        """B_min, B_opt, B_crit at (N, L*) (tokens per step); with ``batch``, steps and tokens to the target
        (``inf`` at or below B_min). Shapes (n_draws, *T) and (n_draws, *T, n_batch) as in ``batch-openai``.

        Where the posterior is finite: a draw whose floor L_inf(N) is at or above L* reaches the target with no
        batch, so every quantity is ``inf`` in that draw (`out_of_reach`). Medians and intervals count those
        draws as +inf (`scalinfer.predict.interval`), so they stay finite while such draws are fewer than the
        quantile's tail; `predict_warnings` names them, and the ``batch-vs-N`` figure draws the same intervals.
        """
        if N is None or target_loss is None:
            raise ModelError(f"model {self.name!r} predicts at a model size N and a target loss "
                             "(give N= and target_loss=)")
        N, L = np.broadcast_arrays(np.asarray(N, float), np.asarray(target_loss, float))
        if np.any(~np.isfinite(L) | (L <= 0)):
            raise ModelError(f"target_loss must be positive finite (nats/token), got {L}")
        p = self.surface(draws, constants, N)
        L_inf, a, c, alpha = p["L_inf"], p["a"], p["c"], p["alpha"]
        B_min = np.asarray(batch_min_floor(L, L_inf, c))
        S_min = np.asarray(steps_min_floor(L, L_inf, a, alpha))
        E_min = np.asarray(tokens_min_floor(B_min, S_min, alpha))
        out = {"batch_min": B_min, "batch_opt": np.asarray(batch_opt_floor(B_min, alpha)),
               "batch_crit": np.where(np.isfinite(S_min), E_min / np.where(np.isfinite(S_min), S_min, 1.0), np.inf)}
        if batch is not None:
            B = np.asarray(batch, float)
            if np.any(~np.isfinite(B) | (B <= 0)):
                raise ModelError(f"batch sizes must be positive finite numbers of tokens, got {B}")
            e = lambda v: np.asarray(v)[..., None]  # noqa: E731
            S = np.asarray(steps_to_target_floor(B.reshape(-1), e(L), e(L_inf), e(a), e(alpha), e(c)))
            S = S.reshape(S.shape[:-1] + B.shape)
            out["steps_to_target"] = S
            out["tokens_to_target"] = S * B
        return out

    @staticmethod
    def out_of_reach(answer) -> np.ndarray:
        """The draws of an answer (`predict`'s output) in which the target loss lies at or below the floor
        L_inf(N): no batch reaches it, B_min = c / (L* - L_inf) is infinite. Boolean, (n_draws, *T)."""
        return ~np.isfinite(np.asarray(answer["batch_min"], float))

    def predict_warnings(self, constants, answer=None, N=None, target_loss=None, **targets):
        """The targets at which some draws cannot reach the target loss (`out_of_reach`): how many, and what
        they do to the answer. A grid gets one warning, at its first such point, with the count of the others."""
        if answer is None or "batch_min" not in answer:
            return []
        out = self.out_of_reach(answer)
        share = out.reshape(out.shape[0], -1).mean(axis=0)
        hit = np.flatnonzero(share > 0)
        if not hit.size:
            return []
        i, n = int(hit[0]), out.shape[0]
        N_i, L_i = (np.broadcast_to(np.asarray(v, float), out.shape[1:]).ravel()[i] for v in (N, target_loss))
        more = f" (and {hit.size - 1} other target{'s' if hit.size > 2 else ''} of the grid)" if hit.size > 1 else ""
        return [f"target loss {L_i:.4g} at N = {N_i:.3g}{more} is at or below the fitted floor L_inf in "
                f"{int(round(share[i] * n))} of {n} draws ({100 * share[i]:.2g}%): no batch reaches it there, so "
                "those draws of every batch size, steps and tokens are infinite; medians and intervals count them "
                "as +inf (an infinite bound: null in JSON, inf in text)"]

    @float64
    def loss_at_tokens(self, draws, constants, N, tokens):
        """Loss reached after `tokens` on the token-efficient path (every batch its B_opt), nats/token.

        .. math:: L(E) = L_\\infty + (K / E)^{\\alpha / (1 + \\alpha)},\\quad
                  K = (1 + 1/\\alpha) (1 + \\alpha)^{1/\\alpha} c\\, a^{1/\\alpha}

        the inverse of E_min(L*). Shape (n_draws, *broadcast(N, tokens).shape).
        """
        N, T = np.broadcast_arrays(np.asarray(N, float), np.asarray(tokens, float))
        p = self.surface(draws, constants, N)
        alpha = p["alpha"]
        log_K = np.log1p(1 / alpha) + np.log1p(alpha) / alpha + np.log(p["c"]) + np.log(p["a"]) / alpha
        return p["L_inf"] + np.exp(alpha / (1 + alpha) * (log_K - np.log(T)))

    def loss(self, draws, constants, N, steps, batch):
        """Posterior draws of L(S; B) at model size N (nats/token), shape (n_draws, *broadcast shape)."""
        N, S, B = np.broadcast_arrays(np.asarray(N, float), np.asarray(steps, float), np.asarray(batch, float))
        p = self.surface(draws, constants, N)
        return np.asarray(loss_noise_floor(S, B, p["L_inf"], p["a"], p["alpha"], p["c"]))

    def fit_warnings(self, fit):
        if fit.constants.get("curves", 0.0) > 0.5:
            return []
        out = super().fit_warnings(fit)
        return [w for w in out if "cannot tell the N and target-loss" not in w]

    # ---- simulation ---------------------------------------------------------------------------------------
    def true_params(self):
        """Natural-scale truth at N_ref = 3e8 (loss in nats, steps, tokens) and exponents of N.

        Off the deviations, L(S; B) = 2.5 + 126 S^-0.7 + 5000 / B at N_ref: at L* = 2.615 (reached with
        the fewest tokens after 5e9), B_min = 44k tokens and B_opt = 106k tokens, S_opt about 47k steps.
        """
        return {"L_inf": 2.5, "L_inf_N": -0.04, "a": 126.0, "a_N": -0.1, "c": 5000.0, "c_N": 0.2,
                "alpha": 0.7, "N_ref": 3e8, "sigma": 0.005,
                # each size off the power laws by a few percent (L_inf) to ~10-20% (a, c)
                "dev_L_inf": {1e8: 0.01, 3e8: -0.01, 1e9: 0.005}, "dev_a": {1e8: -0.1, 3e8: 0.1, 1e9: 0.0},
                "dev_c": {1e8: 0.15, 3e8: -0.1, 1e9: -0.05}}

    def default_design(self, seed: int = 0, n_records: int = 10) -> pd.DataFrame:
        """Loss-curve records: 3 sizes (1e8, 3e8, 1e9) x 4 batches (2^15, 2^17, 2^19, 2^21 tokens), each run
        trained on 1e10 (N / 3e8) tokens with `n_records` records log-spaced from 1% of its steps to the end."""
        rows = []
        for N in (1e8, 3e8, 1e9):
            budget = 1e10 * N / 3e8
            for B in 2.0 ** np.array([15, 17, 19, 21]):
                last = budget / B
                for s in np.unique(np.round(np.geomspace(0.01 * last, last, n_records))):
                    rows.append({"run_id": f"N{N:.0e}-B{B:.0f}", "N": N, "batch_tokens": B, "step": s,
                                 "D": s * B})
        return pd.DataFrame(rows)

    def truth(self, params, N):
        """(L_inf, a, c, alpha) of `params` at model size(s) N.

        The power laws around ``N_ref``, times ``exp(dev)`` where ``params`` has per-size log deviations
        ``dev_L_inf``, ``dev_a``, ``dev_c`` (dicts N -> deviation; a size not listed has none).
        """
        N = np.asarray(N, float)
        r = N / params["N_ref"]

        def dev(name):
            table = params.get(name) or {}
            out = np.zeros(N.shape)
            for n, d in table.items():
                out = np.where(np.isclose(N, float(n), rtol=1e-9), d, out)
            return np.exp(out)

        return (params["L_inf"] * r ** params["L_inf_N"] * dev("dev_L_inf"), params["a"] * r ** params["a_N"] * dev("dev_a"),
                params["c"] * r ** params["c_N"] * dev("dev_c"), params["alpha"])

    def simulate(self, params, design, seed: int = 0):
        """Loss curves at the design's records, log-normal noise of sd ``sigma`` (nats/token)."""
        rng = np.random.default_rng(seed)
        L_inf, a, c, alpha = self.truth(params, design["N"].to_numpy(float))
        S, B = design["step"].to_numpy(float), design["batch_tokens"].to_numpy(float)
        loss = np.asarray(loss_noise_floor(S, B, L_inf, a, alpha, c))
        return design.assign(loss=loss * np.exp(rng.normal(0, params["sigma"], len(S))))


FLOOR = BatchFloor()
