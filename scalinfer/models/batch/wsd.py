r"""``batch-wsd``: the batch-size paper's piecewise E(S) at a constant (WSD stable-phase) LR (docs/laws.md section 5).

For unit u (a model size N and a target loss L*), tokens E to reach the target in S steps:

.. math::

    E(S) = \begin{cases}
        B_{-1} / (S - S_{min}) + B_0 & S_{min} < S < S_1 \quad\text{(inverse)} \\
        C (S - S_{opt})^2 + E_{min}   & S_1 \le S \le S_2 \quad\text{(quadratic)} \\
        A_1 S + A_0                   & S > S_2 \quad\text{(linear)}
    \end{cases}

continuous with a continuous slope at both breakpoints (`scalinfer.laws.batch.wsd_piecewise_coefficients`
fixes B_-1, B_0 and A_0; we take S_2 = S_opt + A_1 / (2 C), the C^1 choice). The paper's batch sizes:
B_min = A_1 (the smallest batch that reaches the target at all) and B_opt = E_min / S_opt (the batch that
reaches it with the fewest tokens); ``batch_crit`` is OpenAI's E_min / S_min applied to this curve.

Parameterization. The scales vary by unit, the shape is shared:

.. math::

    \log S_{opt,u} - m_S &= s_0 + s_N x_{N,u} + s_L x_{L,u} + \tau_S z_{S,u} \\
    \log B_{opt,u} - m_B &= b_0 + b_N x_{N,u} + b_L x_{L,u} + \tau_B z_{B,u}

    B_{min} = \rho B_{opt},\quad S_{min} = \mu S_{opt},\quad S_1 = S_{min} + \phi (S_{opt} - S_{min}),\quad
    C = \kappa\, E_{min} / S_{opt}^2,\quad \kappa = \frac{\rho^2}{4 (1 - \rho)} + \kappa_+

so E(S) / E_min as a function of S / S_opt is the same curve for every unit (as under the noise-floor
model, where it depends on alpha alone). The lower bound on kappa makes A_0 > 0, which is exactly the
condition for the batch B(S) = E(S) / S to fall monotonically with S from infinity at S_min to B_min as
S -> infinity; so each batch B > B_min reaches the target in one number of steps, found by solving
E(S) = B S on the stage that holds it (a quadratic on each stage, `steps_wsd_piecewise`). Below B_min
the target is unreachable (S = inf).

The unit deviations are sampled centered, d_u = tau z_u (`sample_unit_scatter`): each unit's batches pin its
S_opt and B_opt, and a non-centered z_u would narrow as tau grows, a funnel where NUTS diverges (measured on
Zhang et al.: benchmarks/README.md, "defaults.py").

Likelihood: the censored normal on log steps of `common` (one entry per cell).

Priors (centered log steps and batch; weakly informative on these scales):

- ``s0, b0 ~ Normal(0, 2)``: S_opt and B_opt at the data's middle within e^{+-4} of the middle steps
  and batch;
- ``s_N, b_N ~ Normal(0, 1)``; ``s_L, b_L ~ Normal(-5, 5)``: as in ``batch-openai`` (the paper: B_min
  and B_opt grow as the target loss falls; near a floor the log-log slope is -L*/(L* - L_inf));
- ``rho, mu, phi ~ Beta(2, 2)``: fractions in (0, 1) with no preferred value (the noise-floor model has
  rho = alpha / (1 + alpha) and mu = (1 + alpha)^(-1/alpha), both 0.4-0.6 for alpha 0.6-1.3);
- ``kappa_plus ~ LogNormal(0, 1)``: dimensionless curvature of E around E_min (1 under the noise-floor
  model with alpha = 1);
- ``tau_S, tau_B ~ LogNormal(log 0.1, 0.7)``, ``sigma ~ HalfNormal(0.3)``: as in ``batch-openai`` (version 1 had
  tau ~ HalfNormal(0.5)); ``d_S ~ Normal(0, tau_S)``, ``d_B ~ Normal(0, tau_B)`` per unit (version 2 sampled
  z = d / tau ~ Normal(0, 1): the same prior).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.laws.batch import wsd_piecewise_coefficients
from scalinfer.models.base import LossCurve
from scalinfer.models.batch.common import (BatchTableModel, CensoredNormal, sample_power_law, sample_unit_scatter,
                                           target_key, unit_effect)
from scalinfer.models.distributions import Beta
from scalinfer.runtime import float64

__all__ = ["BatchWSD", "WSD", "steps_wsd_piecewise", "wsd_shape"]


def wsd_shape(S_opt, B_opt, rho, mu, phi, kappa_plus):
    """The piecewise E(S)'s free parameters from the model's (`wsd_piecewise_coefficients` order).

    Returns ``(S_min, S_1, S_opt, S_2, E_min, C, A_1)`` in the units of S_opt (steps) and B_opt (tokens).
    """
    E_min = B_opt * S_opt
    S_min = mu * S_opt
    S_1 = S_min + phi * (S_opt - S_min)
    kappa = jnp.square(rho) / (4.0 * (1.0 - rho)) + kappa_plus
    C = kappa * B_opt / S_opt
    A_1 = rho * B_opt
    S_2 = S_opt + A_1 / (2.0 * C)
    return S_min, S_1, S_opt, S_2, E_min, C, A_1


def steps_wsd_piecewise(batch_tokens, S_min, S_1, S_opt, S_2, E_min, C, A_1):
    """Steps to reach the target at batch B under the piecewise E(S): the root of E(S) = B S.

    Valid when B(S) = E(S) / S falls monotonically (A_0 > 0, as `wsd_shape` guarantees). The batch at
    the breakpoints, B(S_1) > B(S_2) > B_min = A_1, picks the stage; on each the equation is a quadratic:

    - inverse (B >= B(S_1)): B S^2 - (B S_min + B_0) S + (B_0 S_min - B_-1) = 0, larger root;
    - quadratic (B(S_2) <= B < B(S_1)): C S^2 - (2 C S_opt + B) S + C S_opt^2 + E_min = 0, smaller root;
    - linear (A_1 < B < B(S_2)): S = A_0 / (B - A_1);
    - B <= A_1: unreachable, ``inf``.

    Each stage is evaluated on a batch clipped into its own range, so gradients stay finite.

    Returns
    -------
    (steps, reachable) : (jax.Array, jax.Array of bool)
    """
    B = jnp.asarray(batch_tokens)
    B_m1, B_0, A_0, _, _ = wsd_piecewise_coefficients(S_min, S_1, S_opt, S_2, E_min, C, A_1)
    E_1 = C * jnp.square(S_1 - S_opt) + E_min
    E_2 = C * jnp.square(S_2 - S_opt) + E_min
    B_1, B_2 = E_1 / S_1, E_2 / S_2
    # inverse stage
    b = jnp.maximum(B, B_1)
    p = b * S_min + B_0
    S_inv = (p + jnp.sqrt(jnp.square(b * S_min - B_0) + 4.0 * b * B_m1)) / (2.0 * b)
    # quadratic stage (stable form of the smaller root)
    b = jnp.clip(B, B_2, B_1)
    q = 2.0 * C * S_opt + b
    disc = jnp.maximum(jnp.square(b) + 4.0 * C * S_opt * b - 4.0 * C * E_min, 0.0)
    S_quad = 2.0 * (C * jnp.square(S_opt) + E_min) / (q + jnp.sqrt(disc))
    # linear stage
    reachable = B > A_1
    b = jnp.where(reachable, jnp.minimum(B, B_2), B_2)
    S_lin = A_0 / (b - A_1)
    S = jnp.where(B >= B_1, S_inv, jnp.where(B >= B_2, S_quad, S_lin))
    return jnp.where(reachable, S, jnp.inf), reachable


@dataclasses.dataclass(frozen=True)
class BatchWSD(BatchTableModel, LossCurve):
    name = "batch-wsd"
    version = "3"
    predicts = {"batch_min": "tokens/step", "batch_opt": "tokens/step", "batch_crit": "tokens/step",
                "steps_to_target": "steps", "tokens_to_target": "tokens"}
    dims = {"d_S": ["unit"], "d_B": ["unit"], "z_S": ["unit"], "z_B": ["unit"]}

    def model(self, x_N, x_L, unit, log_b, censored, log_steps=None):
        s0, s_N, s_L = sample_power_law("s")
        b0, b_N, b_L = sample_power_law("b")
        rho = numpyro.sample("rho", Beta(2.0, 2.0))
        mu = numpyro.sample("mu", Beta(2.0, 2.0))
        phi = numpyro.sample("phi", Beta(2.0, 2.0))
        kappa_plus = numpyro.sample("kappa_plus", dist.LogNormal(0.0, 1.0))
        tau_S, tau_B, sigma, z_S, z_B = sample_unit_scatter(x_N.shape[0], centered=True)
        # centered units: S / e^{m_S}, B / e^{m_B}
        S_opt = jnp.exp(s0 + s_N * x_N + s_L * x_L + tau_S * z_S)[unit]
        B_opt = jnp.exp(b0 + b_N * x_N + b_L * x_L + tau_B * z_B)[unit]
        S, reachable = steps_wsd_piecewise(jnp.exp(log_b), *wsd_shape(S_opt, B_opt, rho, mu, phi, kappa_plus))
        mu_log = jnp.log(jnp.where(reachable, S, 1.0))
        with numpyro.plate("cells", log_b.shape[0]):
            numpyro.sample("obs", CensoredNormal(mu_log, sigma, censored, reachable), obs=log_steps)

    def init_values(self, data, constants):
        # B_opt at the smallest batch and rho = 0.5 keep B_min below every batch: all cells reachable
        n = len(data["x_N"])
        return {"s0": float(np.max(data["log_steps"])), "s_N": 0.0, "s_L": -3.0,
                "b0": float(np.log(constants["min_batch"]) - constants["m_B"]), "b_N": 0.3, "b_L": -3.0,
                "rho": 0.5, "mu": 0.5, "phi": 0.5, "kappa_plus": 1.0, "tau_S": 0.2, "tau_B": 0.2,
                "sigma": 0.2, "d_S": np.zeros(n), "d_B": np.zeros(n)}

    def derived(self, draws, constants):
        """S_opt, B_opt, B_min and B_crit at the data's middle (steps, tokens per step)."""
        B_opt = np.exp(draws["b0"] + constants["m_B"])
        return {"S_opt_mid": np.exp(draws["s0"] + constants["m_S"]), "B_opt_mid": B_opt,
                "B_min_mid": draws["rho"] * B_opt, "B_crit_mid": B_opt / draws["mu"]}

    def unit_laws(self, draws, constants, N, target_loss):
        """Draws of (log S_opt, log B_opt) in natural units (log steps, log tokens), shape (n_draws, *T)."""
        return self._unit_power_laws(draws, constants, N, target_loss, batch_prefix="b")

    @float64  # the laws in float64, as the fit
    def predict(self, draws, constants, N=None, target_loss=None, batch=None):
        """B_min (smallest batch that reaches L*), B_opt (fewest tokens), B_crit (OpenAI's E_min / S_min) at
        (N, L*); with ``batch``, steps and tokens to the target (``inf`` at or below B_min).

        Shapes as in ``batch-openai``: (n_draws, *T) and (n_draws, *T, n_batch).
        """
        log_S_opt, log_B_opt = self.unit_laws(draws, constants, N, target_loss)
        g = lambda k: np.asarray(draws[k]).reshape(-1, *([1] * (log_S_opt.ndim - 1)))  # noqa: E731
        B_opt = np.exp(log_B_opt)
        out = {"batch_min": g("rho") * B_opt, "batch_opt": B_opt, "batch_crit": B_opt / g("mu")}
        if batch is not None:
            B = np.asarray(batch, float)
            e = lambda v: np.asarray(v)[..., None]  # noqa: E731
            shape = wsd_shape(e(np.exp(log_S_opt)), e(B_opt), e(g("rho")), e(g("mu")), e(g("phi")),
                              e(g("kappa_plus")))
            S, _ = steps_wsd_piecewise(B.reshape(-1), *shape)
            S = np.asarray(S).reshape(S.shape[:-1] + B.shape)
            out["steps_to_target"] = S
            out["tokens_to_target"] = S * B
        return out

    @float64
    def loss_at_tokens(self, draws, constants, N, tokens):
        """Target loss whose fewest tokens E_min(N, L*) equal `tokens` (nats/token), (n_draws, *T).

        log E_min is linear in log L* here (the sum of the S_opt and B_opt power laws), so this inverts
        in closed form; a new unit's deviations enter as at any unfitted (N, L*).
        """
        N, T = np.broadcast_arrays(np.asarray(N, float), np.asarray(tokens, float))
        x_N = np.log(N) - constants["m_N"]
        g = lambda k: np.asarray(draws[k]).reshape(-1, *([1] * x_N.ndim))  # noqa: E731
        # a new unit at this size and an unknown target: keyed on N alone
        new, key = np.full(x_N.shape, -1), target_key(np.log(N))
        dev = g("tau_S") * unit_effect(draws["z_S"], new, key, 0) + g("tau_B") * unit_effect(draws["z_B"], new, key, 1)
        slope = g("s_L") + g("b_L")
        if np.any(slope >= 0):
            frac = float(np.mean(slope >= 0))
            if frac > 0.5:
                raise ModelError("the fitted fewest-tokens law does not fall with the target loss in most draws "
                                 f"({frac:.0%}): it cannot say which loss a run reaches after given tokens")
        x_L = (np.log(T) - constants["m_S"] - constants["m_B"] - g("s0") - g("b0")
               - (g("s_N") + g("b_N")) * x_N - dev) / slope
        return np.exp(x_L + constants["m_L"])

    # ---- simulation -------------------------------------------------------------------------------------
    def true_params(self):
        """Natural-scale truth: S_opt and B_opt at N_ref = 3e8, L_ref = 3.1, and the shared shape."""
        return {"S_opt": 6000.0, "S_opt_N": -0.1, "S_opt_L": -6.0, "B_opt": 3e5, "B_opt_N": 0.3,
                "B_opt_L": -4.0, "rho": 0.45, "mu": 0.45, "phi": 0.5, "kappa_plus": 0.8, "N_ref": 3e8,
                "L_ref": 3.1, "sigma": 0.05}

    def default_design(self, seed: int = 0) -> pd.DataFrame:
        """3 sizes (1e8-1e9) x 2 targets each x 7 batch sizes 2^16-2^22 tokens (42 cells)."""
        rows = []
        for N in (1e8, 3e8, 1e9):
            base = 3.1 * (N / 3e8) ** -0.05
            for L in (base * 1.03, base):
                for B in 2.0 ** np.arange(16, 23):
                    rows.append({"N": N, "target_loss": L, "batch_tokens": B})
        return pd.DataFrame(rows)

    def simulate(self, params, design, seed: int = 0):
        """Steps to target at the design's cells (log-normal noise of sd ``sigma``); cells at or below B_min
        are censored at ``steps`` = 4 S_opt (``steps_to_target`` NaN)."""
        rng = np.random.default_rng(seed)
        N, L, B = (design[c].to_numpy(float) for c in ("N", "target_loss", "batch_tokens"))
        rN, rL = N / params["N_ref"], L / params["L_ref"]
        S_opt = params["S_opt"] * rN ** params["S_opt_N"] * rL ** params["S_opt_L"]
        B_opt = params["B_opt"] * rN ** params["B_opt_N"] * rL ** params["B_opt_L"]
        shape = wsd_shape(S_opt, B_opt, params["rho"], params["mu"], params["phi"], params["kappa_plus"])
        S, ok = (np.asarray(v) for v in steps_wsd_piecewise(B, *shape))
        S = np.where(ok, S * np.exp(rng.normal(0, params["sigma"], len(B))), np.nan)
        return design.assign(steps_to_target=S, tokens_to_target=S * B, steps=np.maximum(4 * S_opt, np.nan_to_num(S)))


WSD = BatchWSD()
