r"""``chinchilla``: final loss as a function of model size and data (docs/laws.md section 1).

.. math::

    L(N, D) = E + A N^{-\alpha} + B D^{-\beta}

fit in log space, where every term stays positive by construction:

.. math::

    \log L = \mathrm{LSE}\big(a_c - \alpha\,(\log N - m_N),\; b_c - \beta\,(\log D - m_D),\; e\big)

with :math:`m_N, m_D` the midpoints of log N and log D in the data, so that :math:`a_c = \log A - \alpha m_N`
is the log of the N-term *at the data's middle* (an O(1) number, uncorrelated with alpha), and likewise
:math:`b_c`. The natural-scale parameters are derived: :math:`A = e^{a_c + \alpha m_N}`,
:math:`B = e^{b_c + \beta m_D}`, :math:`E = e^{e}`.

Likelihood: Student-t on log loss, :math:`\log L_i \sim t_\nu(\log L(N_i, D_i), \sigma)`, robust to the odd
point that is off the law (the Chinchilla points were read from a figure's colour scale), in the spirit of
the Huber loss Hoffmann et al. and Epoch AI use; nu is learned.

Priors (weakly informative on the scales involved; every quantity is in nats or log-nats):

- ``e = log E ~ Normal(log(min loss) - 0.3, 1)``: the irreducible loss sits below the smallest observed loss;
  sd 1 in log space spans E from ~0.3x to ~3x of that.
- ``a_c, b_c ~ Normal(log(0.3 * min loss), 1.5)``: each reducible term at the data's middle is a fraction of the
  loss; sd 1.5 spans 0.05x-20x.
- ``alpha, beta ~ LogNormal(log 0.35, 0.75)``: the exponents published for LMs lie in 0.05-1 (90% prior
  interval 0.10-1.2).
- ``sigma ~ HalfNormal(0.05)``: residual scale of log loss, i.e. a few percent of the loss.
- ``nu ~ Gamma(2, 0.1)``: the usual weakly informative prior on Student-t degrees of freedom (mean 20).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd

from scalinfer.laws import compute_optimal, log_loss_chinchilla
from scalinfer.models.base import Arrays, Model
from scalinfer.models.distributions import Gamma, StudentT
from scalinfer.runs.schema import RunTable
from scalinfer.runtime import float64

__all__ = ["Chinchilla", "MODEL"]


@dataclasses.dataclass(frozen=True)
class Chinchilla(Model):
    """L(N, D) = E + A N^-alpha + B D^-beta in log space (see the module docstring); no options."""

    name = "chinchilla"
    version = "1"
    required_columns = ("N", "D", "loss")
    predicts = {"loss": "nats/token"}
    targets = ("N", "D", "C")

    def prepare(self, runs: RunTable) -> tuple[Arrays, dict[str, float]]:
        self.check(runs)
        df = runs.df
        if df["diverged"].any():
            # the L(N, D) law has no notion of divergence; say so rather than drop silently
            from scalinfer.errors import ModelError
            raise ModelError(f"{runs.source}: {int(df['diverged'].sum())} runs are marked diverged; "
                             "the chinchilla model needs finite losses (filter them with --where 'not diverged')")
        log_N, log_D = np.log(df["N"].to_numpy(float)), np.log(df["D"].to_numpy(float))
        m_N = 0.5 * (log_N.min() + log_N.max())
        m_D = 0.5 * (log_D.min() + log_D.max())
        data = {"x_N": log_N - m_N, "x_D": log_D - m_D, "log_loss": np.log(df["loss"].to_numpy(float))}
        constants = {"m_N": m_N, "m_D": m_D, "min_loss": float(df["loss"].min()),
                     "max_N": float(df["N"].max()), "max_D": float(df["D"].max()),
                     "min_N": float(df["N"].min()), "min_D": float(df["D"].min())}
        return data, constants

    def model(self, x_N, x_D, log_loss=None, min_loss=2.0):
        ref = jnp.log(min_loss)
        e = numpyro.sample("e", dist.Normal(ref - 0.3, 1.0))
        a_c = numpyro.sample("a_c", dist.Normal(ref + jnp.log(0.3), 1.5))
        b_c = numpyro.sample("b_c", dist.Normal(ref + jnp.log(0.3), 1.5))
        alpha = numpyro.sample("alpha", dist.LogNormal(jnp.log(0.35), 0.75))
        beta = numpyro.sample("beta", dist.LogNormal(jnp.log(0.35), 0.75))
        sigma = numpyro.sample("sigma", dist.HalfNormal(0.05))
        nu = numpyro.sample("nu", Gamma(2.0, 0.1))
        mu = log_loss_chinchilla(x_N, x_D, a_c, b_c, e, alpha, beta)
        with numpyro.plate("run", x_N.shape[0]):
            numpyro.sample("obs", StudentT(nu, mu, sigma), obs=log_loss)

    def model_kwargs(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        return {**data, "min_loss": constants["min_loss"]}

    def init_values(self, data, constants):
        ref = np.log(constants["min_loss"])
        return {"e": ref - 0.2, "a_c": ref + np.log(0.15), "b_c": ref + np.log(0.15),
                "alpha": 0.35, "beta": 0.35, "sigma": 0.02, "nu": 10.0}

    def derived(self, draws, constants):
        return {
            "E": np.exp(draws["e"]),
            "A": np.exp(draws["a_c"] + draws["alpha"] * constants["m_N"]),
            "B": np.exp(draws["b_c"] + draws["beta"] * constants["m_D"]),
        }

    @float64  # the laws in float64, as the fit
    def predict(self, draws, constants, N=None, D=None, C=None):
        """Loss at (N, D); with ``C`` (FLOPs, C = 6 N D) instead, the compute-optimal N, D and their loss."""
        if not ((C is None and N is not None and D is not None) or (C is not None and N is None and D is None)):
            from scalinfer.errors import ModelError

            raise ModelError("chinchilla predicts at a model size and data (--N and --D) or at a compute budget "
                             "(--C) alone")
        p = self.derived(draws, constants)
        alpha, beta = draws["alpha"], draws["beta"]
        if C is not None:
            C = np.asarray(C, float)
            shape = (-1,) + (1,) * C.ndim
            n_opt, d_opt = compute_optimal(C, p["A"].reshape(shape), p["B"].reshape(shape),
                                           alpha.reshape(shape), beta.reshape(shape))
            n_opt, d_opt = np.asarray(n_opt), np.asarray(d_opt)
            return {"N_opt": n_opt, "D_opt": d_opt, "loss": self._loss(draws, constants, n_opt, d_opt)}
        N, D = np.broadcast_arrays(np.asarray(N, float), np.asarray(D, float))
        return {"loss": self._loss(draws, constants, N[None], D[None])}

    def _loss(self, draws, constants, N, D):
        shape = (-1,) + (1,) * (np.ndim(N) - 1 if np.ndim(N) else 0)
        g = lambda k: np.asarray(draws[k]).reshape(shape)  # noqa: E731
        return np.exp(np.asarray(log_loss_chinchilla(
            np.log(N) - constants["m_N"], np.log(D) - constants["m_D"],
            g("a_c"), g("b_c"), g("e"), g("alpha"), g("beta"))))

    def extrapolation(self, constants, N=None, D=None, C=None):
        """N and D over the largest fitted (``N_ratio``, ``D_ratio``); a budget ``C`` over 6 max_N max_D, the
        compute of a run at the largest fitted N and D, which no fitted run exceeds (``C_ratio``: at least as
        far as the budget lies beyond the data's compute, never more)."""
        if C is not None:
            return {"C_ratio": np.asarray(C, dtype=float) / (6.0 * constants["max_N"] * constants["max_D"])}
        return super().extrapolation(constants, N=N, D=D)

    def true_params(self):
        # Epoch AI's refit of Chinchilla (docs/laws.md section 1), as a realistic truth for simulation
        return {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658, "sigma": 0.01}

    def default_design(self, seed: int = 0) -> pd.DataFrame:
        """8 model sizes from 5e7 to 5e9 parameters x 5, 10, 20, 40, 80 tokens per parameter (40 runs)."""
        N = np.repeat(np.geomspace(5e7, 5e9, 8), 5)
        D = N * np.tile([5.0, 10.0, 20.0, 40.0, 80.0], 8)
        return pd.DataFrame({"N": N, "D": D})

    def simulate(self, params: dict[str, float], design: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
        """Losses at the design's (N, D) with log-normal noise of sd ``params['sigma']``."""
        rng = np.random.default_rng(seed)
        N, D = design["N"].to_numpy(float), design["D"].to_numpy(float)
        loss = params["E"] + params["A"] * N ** -params["alpha"] + params["B"] * D ** -params["beta"]
        loss = loss * np.exp(rng.normal(0.0, params.get("sigma", 0.01), size=loss.shape))
        return design.assign(loss=loss)


MODEL = Chinchilla()
