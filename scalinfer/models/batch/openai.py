r"""``batch-openai``: steps to a target loss, S = S_min (1 + B_crit / B) (McCandlish et al. 2018; docs/laws.md 5).

For unit u (a model size N and a target loss L*; see `scalinfer.models.batch.common`) and batch B
(tokens per step):

.. math::

    S(B) = S_{min,u} \left(1 + \frac{B_{crit,u}}{B}\right), \qquad E(B) = B\,S(B) = E_{min,u} (1 + B / B_{crit,u})

with power laws in N and L* around the data's middle and a deviation per unit (partial pooling):

.. math::

    \log S_{min,u} - m_S &= s_0 + s_N x_{N,u} + s_L x_{L,u} + \tau_S z_{S,u} \\
    \log B_{crit,u} - m_B &= k_0 + k_N x_{N,u} + k_L x_{L,u} + \tau_B z_{B,u}

Likelihood: the censored normal on log steps of `common` (one entry per cell).

Which batch it reports. ``batch_crit`` is OpenAI's critical batch B_crit = E_min / S_min, the 2x-overhead
point (twice the minimum steps and twice the minimum tokens). This model has no B_min (any batch reaches
the target) and no B_opt (tokens fall monotonically as B -> 0). Zhang et al.'s 20%-overhead critical
batch is 0.2 B_crit under this model (steps 20% above perfect linear scaling E_min / B).

Priors (centered log steps and batch, so each intercept is O(1); weakly informative on these scales):

- ``s0, k0 ~ Normal(0, 2)``: S_min and B_crit at the data's middle within e^{+-4} (55x) of its middle
  steps and middle batch;
- ``s_N, k_N ~ Normal(0, 1)``: exponents of N; published values are O(0.5) (Zhang et al.: B_crit ~
  N^0.47 along Chinchilla-optimal targets);
- ``s_L, k_L ~ Normal(-5, 5)``: exponents of the target loss. Both S_min and the batch grow as the target
  falls; near a floor L_inf, d log B / d log L* = -L* / (L* - L_inf), typically -3 to -20;
- ``tau_S, tau_B ~ LogNormal(log 0.1, 0.7)``: unit-to-unit scatter around the power laws, 3-30% (90%), kept
  off 0 (`scalinfer.models.batch.common.unit_scatter_prior` says why; version 1 had HalfNormal(0.5), whose
  posterior on Zhang et al.'s 4 units spanned a factor 50 and would not converge);
- ``sigma ~ HalfNormal(0.3)``: measurement scatter of log steps (eval interval, seed and LR-grid noise:
  steps to target are known to 5-30%).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import numpyro
import pandas as pd

from scalinfer.laws.batch import steps_openai
from scalinfer.models.batch.common import BatchTableModel, CensoredNormal, sample_power_law, sample_unit_scatter
from scalinfer.runtime import float64

__all__ = ["BatchOpenAI", "OPENAI"]


@dataclasses.dataclass(frozen=True)
class BatchOpenAI(BatchTableModel):
    name = "batch-openai"
    version = "2"
    predicts = {"batch_crit": "tokens/step", "batch_overhead_20": "tokens/step", "steps_to_target": "steps",
                "tokens_to_target": "tokens"}
    dims = {"z_S": ["unit"], "z_B": ["unit"]}

    def model(self, x_N, x_L, unit, log_b, censored, log_steps=None):
        s0, s_N, s_L = sample_power_law("s")
        k0, k_N, k_L = sample_power_law("k")
        tau_S, tau_B, sigma, z_S, z_B = sample_unit_scatter(x_N.shape[0])
        log_S_min = s0 + s_N * x_N + s_L * x_L + tau_S * z_S  # minus m_S
        log_B_crit = k0 + k_N * x_N + k_L * x_L + tau_B * z_B  # minus m_B
        # log S = log S_min + log(1 + B_crit / B), all centered
        mu = log_S_min[unit] + jnp.logaddexp(0.0, log_B_crit[unit] - log_b)
        with numpyro.plate("cells", log_b.shape[0]):
            numpyro.sample("obs", CensoredNormal(mu, sigma, censored), obs=log_steps)

    def init_values(self, data, constants):
        return {"s0": -1.0, "s_N": 0.0, "s_L": -3.0, "k0": 0.0, "k_N": 0.3, "k_L": -3.0,
                "tau_S": 0.2, "tau_B": 0.2, "sigma": 0.2,
                "z_S": np.zeros(len(data["x_N"])), "z_B": np.zeros(len(data["x_N"]))}

    def derived(self, draws, constants):
        """S_min and B_crit at the data's middle (steps, tokens per step)."""
        return {"S_min_mid": np.exp(draws["s0"] + constants["m_S"]),
                "B_crit_mid": np.exp(draws["k0"] + constants["m_B"])}

    def unit_laws(self, draws, constants, N, target_loss):
        """Draws of (log S_min, log B_crit) in natural units (log steps, log tokens), shape (n_draws, *T)."""
        return self._unit_power_laws(draws, constants, N, target_loss, batch_prefix="k")

    @float64  # the laws in float64, as the fit
    def predict(self, draws, constants, N=None, target_loss=None, batch=None):
        """B_crit (OpenAI's 2x-overhead batch) and the 20%-overhead batch at (N, L*); with ``batch``, steps and
        tokens to the target.

        The 20%-overhead batch (Zhang et al.'s critical batch) is where the steps are 20% above perfect scaling,
        S = 1.2 E_min / B: on the hyperbola S = S_min (1 + B_crit / B), with E_min = S_min B_crit, that is
        1 + B_crit / B = 1.2 B_crit / B, i.e. B = 0.2 B_crit.

        ``N``, ``target_loss`` broadcast to a shape T; ``batch`` (tokens per step) is a scalar or a 1-d
        list, appended as a last axis. Returns arrays (n_draws, *T) and (n_draws, *T, n_batch).
        """
        log_S_min, log_B_crit = self.unit_laws(draws, constants, N, target_loss)
        out = {"batch_crit": np.exp(log_B_crit), "batch_overhead_20": 0.2 * np.exp(log_B_crit)}
        if batch is not None:
            B = np.asarray(batch, float)
            S = np.asarray(steps_openai(B, np.exp(log_S_min)[..., None], np.exp(log_B_crit)[..., None]))
            S = S.reshape(S.shape[:-1] + B.shape)
            out["steps_to_target"] = S
            out["tokens_to_target"] = S * B
        return out

    # ---- simulation -------------------------------------------------------------------------------------
    def true_params(self):
        """Natural-scale truth near Zhang et al.'s data: S_min and B_crit at N_ref = 3e8, L_ref = 3.1."""
        return {"S_min": 3000.0, "S_min_N": -0.1, "S_min_L": -6.0, "B_crit": 2e6, "B_crit_N": 0.3,
                "B_crit_L": -4.0, "N_ref": 3e8, "L_ref": 3.1, "sigma": 0.08}

    def default_design(self, seed: int = 0) -> pd.DataFrame:
        """3 sizes (1e8-1e9) x 2 targets each x 7 batch sizes 2^15-2^21 tokens (42 cells)."""
        rows = []
        for N in (1e8, 3e8, 1e9):
            base = 3.1 * (N / 3e8) ** -0.05
            for L in (base * 1.05, base):
                for B in 2.0 ** np.arange(15, 22):
                    rows.append({"N": N, "target_loss": L, "batch_tokens": B})
        return pd.DataFrame(rows)

    def simulate(self, params, design, seed: int = 0):
        """Steps to target at the design's cells, log-normal noise of sd ``sigma``."""
        rng = np.random.default_rng(seed)
        N, L, B = (design[c].to_numpy(float) for c in ("N", "target_loss", "batch_tokens"))
        rN, rL = N / params["N_ref"], L / params["L_ref"]
        S_min = params["S_min"] * rN ** params["S_min_N"] * rL ** params["S_min_L"]
        B_crit = params["B_crit"] * rN ** params["B_crit_N"] * rL ** params["B_crit_L"]
        S = S_min * (1 + B_crit / B) * np.exp(rng.normal(0, params["sigma"], len(B)))
        return design.assign(steps_to_target=S, tokens_to_target=S * B)


OPENAI = BatchOpenAI()
