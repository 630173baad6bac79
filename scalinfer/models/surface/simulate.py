r"""Run tables drawn from the surface model at known natural-scale parameters.

Natural-scale parameters (`TRUE_PARAMS`'s keys): the laws

.. math::

    \log \eta^* = \texttt{lr\_opt\_log\_coef} + \texttt{lr\_opt\_exp\_N} \log N + \texttt{lr\_opt\_exp\_D} \log D

and likewise ``batch_opt_*`` (B*, tokens) and ``loss_opt_*`` (L*, nats/token); the valleys' log curvatures
``log_c_lr``, ``log_c_b`` at (``ref_logN``, ``ref_logD``), moving with log N and log D by ``c_*_exp_*``; the
ridge ``kappa1``, ``kappa2``; ``delta_*`` and ``p_*`` of each valley; the settings' scatter ``tau_lr``,
``tau_b``, ``tau_loss`` and the sizes' ``tau_*_size``; the noise ``sigma0``, ``sigma1``, ``nu``; and
``diverge_above``: a run whose log LR lies that far above the optimal LR at its batch diverges.

Departures from the model (`Variant`, for calibration under misspecification: ``benchmarks/sbc.py``): data a
fitted surface cannot represent exactly, each off by default (``variant=None`` simulates the model itself).
With v = z - z*_s the run's log batch off its setting's optimum and :math:`\Delta = \log N - \texttt{ref\_logN}`:

- a *non-separable valley*: the LR valley's log curvature and its asymmetry move with the batch,
  :math:`\log C^\eta \to \log C^\eta + w v` (``lr_width_per_log_batch``) and
  :math:`\delta_\eta \to \delta_\eta + a v` (``lr_asymmetry_per_log_batch``). The valley is still 0 on the
  ridge, so each setting's joint optimum (x*_s, z*_s) is unchanged. This is the surface the model's option
  ``lr_valley_by_batch`` fits (`scalinfer.models.surface.loss.surface_at` computes both);
- *curved laws*: :math:`\log \eta^* \mathrel{+}= q_\eta \Delta^2` (``lr_opt_curv_N``) and
  :math:`\log B^* \mathrel{+}= q_B \Delta^2` (``batch_opt_curv_N``): the exponents in N drift with N
  (`law_optima` gives the laws with these terms: the truth at a target);
- *heteroscedastic noise*: the noise scale is multiplied by :math:`e^{-k \Delta} = (N / e^{\texttt{ref\_logN}})^{-k}`
  (``noise_N_exp`` = k): smaller models are noisier.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.laws.lr import log_lr_opt_at_batch
from scalinfer.models.surface.data import settings_of, sizes_of
from scalinfer.models.surface.loss import curvatures, laws, surface_at
from scalinfer.models.surface.priors import NEW_SETTING, PRIORS

__all__ = ["TRUE_PARAMS", "Variant", "simulate", "law_optima", "default_design"]

#: natural-scale truth: rounded posterior medians of this model on Step Law's dense runs with N <= 6e8
TRUE_PARAMS: dict[str, float] = {
    "lr_opt_log_coef": 1.29, "lr_opt_exp_N": -0.63, "lr_opt_exp_D": 0.22,
    "batch_opt_log_coef": 1.74, "batch_opt_exp_N": -0.11, "batch_opt_exp_D": 0.56,
    "loss_opt_log_coef": 3.13, "loss_opt_exp_N": -0.070, "loss_opt_exp_D": -0.037,
    "ref_logN": 19.64, "ref_logD": 23.72,
    "kappa1": 0.34, "kappa2": -0.25,
    "log_c_lr": -4.78, "c_lr_exp_N": -0.06, "c_lr_exp_D": -0.24, "delta_lr": 0.63, "p_lr": 2.04,
    "log_c_b": -5.21, "c_b_exp_N": 0.11, "c_b_exp_D": -0.16, "delta_b": 0.13, "p_b": 2.09,
    "tau_lr": 0.05, "tau_b": 0.05, "tau_loss": 0.0066, "tau_lr_size": 0.0, "tau_b_size": 0.0,
    "tau_loss_size": 0.0,
    "sigma0": 0.0007, "sigma1": 0.095, "nu": 3.0,
    "diverge_above": 1.5,
}


@dataclasses.dataclass(frozen=True)
class Variant:
    """A departure of the simulated data from the surface model (the module docstring's math); all 0: none."""

    lr_width_per_log_batch: float = 0.0      #: w: d log C_eta / d v (the LR valley narrows or widens with batch)
    lr_asymmetry_per_log_batch: float = 0.0  #: a: d delta_eta / d v (its asymmetry moves with batch)
    lr_opt_curv_N: float = 0.0               #: q_eta: log eta* gains q_eta (log N - ref_logN)^2
    batch_opt_curv_N: float = 0.0            #: q_B: log B* gains q_B (log N - ref_logN)^2
    noise_N_exp: float = 0.0                 #: k: the noise scale goes as (N / e^ref_logN)^-k

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and math.isfinite(v)):
                raise ModelError(f"Variant.{f.name} must be a finite number, got {v!r}")


def default_design(seed: int = 0) -> pd.DataFrame:
    """A Step-Law-shaped grid: 4 model sizes x 3 token budgets (12 settings), LRs 2^-12..2^-6 by sqrt 2
    (13) x 7 batch sizes 64K-4M tokens: 1,092 runs."""
    Ns = np.array([2.1e8, 2.7e8, 4.3e8, 5.4e8])
    rows = [(n, n * tpp) for n in Ns for tpp in (20.0, 50.0, 100.0)]
    lrs = 2.0 ** (np.arange(-24, -11) / 2)
    batches = 2.0 ** np.arange(16, 23)
    g = [(n, d, lr, b) for n, d in rows for lr in lrs for b in batches]
    return pd.DataFrame(g, columns=["N", "D", "lr", "batch_tokens"])


def _natural_laws(q: dict[str, float], logN, logD, variant: Variant | None = None) -> dict[str, np.ndarray]:
    """`laws` at natural (log N, log D): the natural-scale parameters in the model's names, each curvature law
    about its reference point; with `variant`, its curved laws of eta* and B*."""
    p = {"a0": q["lr_opt_log_coef"], "a_N": q["lr_opt_exp_N"], "a_D": q["lr_opt_exp_D"],
         "b0": q["batch_opt_log_coef"], "b_N": q["batch_opt_exp_N"], "b_D": q["batch_opt_exp_D"],
         "g0": q["loss_opt_log_coef"], "g_N": q["loss_opt_exp_N"], "g_D": q["loss_opt_exp_D"],
         "c_lr0": q["log_c_lr"], "c_lr_N": q["c_lr_exp_N"], "c_lr_D": q["c_lr_exp_D"],
         "c_b0": q["log_c_b"], "c_b_N": q["c_b_exp_N"], "c_b_D": q["c_b_exp_D"]}
    optima = laws(p, logN, logD)
    curvatures = laws(p, logN - q["ref_logN"], logD - q["ref_logD"])
    if variant is not None:
        optima = {**optima, "x_star": optima["x_star"] + variant.lr_opt_curv_N * (logN - q["ref_logN"]) ** 2,
                  "z_star": optima["z_star"] + variant.batch_opt_curv_N * (logN - q["ref_logN"]) ** 2}
    return {**{k: optima[k] for k in NEW_SETTING}, "log_c_lr": curvatures["log_c_lr"],
            "log_c_b": curvatures["log_c_b"]}


def law_optima(params: dict[str, float], N, D, variant: Variant | None = None) -> dict[str, np.ndarray]:
    """The laws' log eta* (``lr_opt``), log B* (``batch_opt``, tokens) and log L* (``loss_opt``) at (N, D) from
    natural-scale `params` (missing keys from `TRUE_PARAMS`), with `variant`'s curved laws: a new setting's
    optimum before its own offsets."""
    q = {**TRUE_PARAMS, **params}
    law = _natural_laws(q, np.log(np.asarray(N, float)), np.log(np.asarray(D, float)), variant)
    return {"lr_opt": law["x_star"], "batch_opt": law["z_star"], "loss_opt": law["ell"]}


def simulate(params: dict[str, float], design: pd.DataFrame, seed: int = 0,
             variant: Variant | None = None) -> pd.DataFrame:
    """Losses on the design's (N, D, lr, batch_tokens) from the surface at natural-scale `params` (missing keys
    from `TRUE_PARAMS`); `variant`: a departure from the model (`Variant`; None: the model itself).

    Each setting draws its offsets from the population (``tau_*``) and each model size its level (``tau_*_size``,
    from a random stream of its own); log losses get Student-t noise of scale sigma0 + sigma1 * excess; a run
    whose LR lies more than ``diverge_above`` (log units) above the optimal LR at its batch diverges (loss NaN,
    ``diverged`` true). The drawn optimum of each setting is kept in the columns ``true_lr_opt``,
    ``true_batch_opt``, ``true_loss_opt``.
    """
    rng = np.random.default_rng(seed)
    df = design.reset_index(drop=True).copy()
    s_idx, settings = settings_of(df)
    size_s = sizes_of(settings)
    S = len(settings)
    q = {**TRUE_PARAMS, **params}
    logN, logD = np.log(settings["N"].to_numpy(float)), np.log(settings["D"].to_numpy(float))
    eps = rng.standard_normal((len(NEW_SETTING), S))
    eps_size = np.random.default_rng([seed, 7]).standard_normal((len(NEW_SETTING), int(size_s.max()) + 1))
    eps_size = eps_size[:, size_s]
    law = _natural_laws(q, logN, logD, variant)
    v = {k: law[k] + q[f"tau_{t}"] * eps[i] + q[f"tau_{t}_size"] * eps_size[i]
         for i, (k, t) in enumerate(NEW_SETTING.items())}
    shape = {"kappa2": q["kappa2"], "delta_lr": q["delta_lr"], "delta_b": q["delta_b"],
             "p_lr_unit": PRIORS.p_unit(q["p_lr"]), "p_b_unit": PRIORS.p_unit(q["p_b"])}
    v.update(curvatures(law, shape, np), kappa1=np.full(S, q["kappa1"]))
    x, z = np.log(df["lr"].to_numpy(float)), np.log(df["batch_tokens"].to_numpy(float))
    at = {k: a[s_idx] for k, a in v.items()}
    if variant is not None:  # the LR valley's width and asymmetry move with each run's batch off its setting's B*
        shape.update(c_lr_B=variant.lr_width_per_log_batch, delta_lr_B=variant.lr_asymmetry_per_log_batch)
    mu, excess = (np.asarray(a) for a in surface_at(shape, at, x, z))
    scale = q["sigma0"] + q["sigma1"] * excess
    if variant is not None:
        scale = scale * np.exp(-variant.noise_N_exp * (logN[s_idx] - q["ref_logN"]))
    y = mu + scale * rng.standard_t(q["nu"], size=len(df))
    diverged = (x - log_lr_opt_at_batch(z, at["x_star"], at["z_star"], at["kappa1"], q["kappa2"])) > q["diverge_above"]
    loss = np.where(diverged, np.nan, np.exp(y))
    return df.assign(loss=loss, diverged=diverged, true_lr_opt=np.exp(v["x_star"])[s_idx],
                     true_batch_opt=np.exp(v["z_star"])[s_idx], true_loss_opt=np.exp(v["ell"])[s_idx])
