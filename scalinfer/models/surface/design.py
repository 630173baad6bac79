r"""The sweep's design: a full (LR x batch) surface, an LR sweep at one batch, or a batch sweep at one LR.

Designs
-------
``full``
    The table varies both the LR and the batch: the whole surface (`scalinfer.models.surface.model`).

``fixed_batch``
    Every run has the same batch :math:`B_0` (the commonest real design: an LR sweep). The data say nothing of
    the batch valley, of B* or of the LR-batch ridge, so the model has none of them. With z = log B - m_B = 0 at
    every run (m_B = log B_0):

    .. math::

        y = \ell_s + V_\eta(x - x^*_s), \qquad
        x^*_s = m_\eta + a_0 + a_N \tilde n_s + a_D \tilde d_s + \tau_\eta \epsilon^\eta_s, \qquad
        \ell_s \sim \mathcal N(m_y + g_0 + g_N \tilde n_s + g_D \tilde d_s,\; \tau_L)

    where x*_s is now the best LR *at B_0* and ell_s the log loss there (not the joint optimum's). It is the
    full model at :math:`z^*_s \equiv 0` (b_0 = b_N = b_D = tau_B = 0): then v = 0 at every run, the batch
    valley V_B(0) = 0 and the ridge passes through x*_s whatever kappa, so the batch sites (b_*, kappa_*,
    c_b*, delta_b, p_b, tau_b, eps_b, and b_size with size scatter) are left out, not sampled. The LR valley's
    far-field exponent and the noise's nu are fixed (below); the other sites keep their priors
    (`scalinfer.models.surface.priors`).

    Answers are at B_0 only: ``lr_opt_at_batch`` (= exp(m_eta + x*) for a new setting), ``loss_opt_at_batch``
    (the loss there) and, with ``lr``, ``loss``. ``lr_opt``, ``batch_opt`` and ``loss_opt`` (the joint
    optimum) are not answered: nothing in the table moves the batch.

``fixed_lr``
    Every run has the same peak LR eta_0 (a batch sweep). Symmetrically, with x = 0 at every run:

    .. math::

        y = \ell_s + V_B(z - z^*_s), \qquad
        z^*_s = m_B + b_0 + b_N \tilde n_s + b_D \tilde d_s + \tau_B \epsilon^B_s

    z*_s is the best batch *at eta_0*, ell_s the log loss there; the full model at x*_s = 0 with kappa = 0
    (u = 0, V_eta(0) = 0), so the LR sites (a_*, kappa_*, c_lr*, delta_lr, p_lr, tau_lr, eps_lr, lr_size) are
    left out. Answers at eta_0: ``batch_opt_at_lr``, ``loss_opt_at_lr`` and, with ``batch``, ``loss``.

What a reduced design fixes
---------------------------
Two of the full model's shape parameters are fixed in a reduced design, not sampled; every other prior is the
full model's (`scalinfer.models.surface.priors`, the population prior by default).

- **The valley is a parabola**: its far-field exponent p is `REDUCED_P` = 2, so
  :math:`V(u) = C_\pm u^2` with its own curvature on each side (``delta`` stays). In the full model the LR
  valley is seen at every batch, around a ridge that moves with the batch, which pins p; at one batch, p
  trades with where each setting's optimum sits and how far the settings scatter off the laws, and the
  sampler finds two modes. Step Law dense cut to one batch (262,144 tokens; 193 runs, about 12 LRs per
  setting), nu fixed, p sampled under the population prior: two chains at p 2.4 and tau_lr 0.14-0.16, one at
  p 0.97 with tau_lr 1.07 and an eta* law with a D exponent of -1.24 (-0.07 to -0.12 in the others; each
  setting 0.3-2.7 log units off it), one in between (R-hat 1.80 on p). With p fixed at 2 the same fit
  converges at the CLI's defaults (the mode search converged; R-hat 1.007, bulk ESS 554, no divergent
  transition, 31 leapfrog steps per draw against 127-255; benchmarks/README.md). 2 is what the full model
  finds where p is identified (Step Law dense, N <= 6e8: p_lr 2.04, p_b 2.09; the population prior's mean for
  p_lr 2.2), and the misfit far from the optimum that a parabola leaves is what the noise term sigma1 V
  carries.
- **nu = `REDUCED_NU` = 3** in the Student-t noise :math:`t_\nu(\mu_i, \sigma_0 + \sigma_1 V)`. A reduced
  table has few runs per setting on one valley (3-4 LRs per setting on (Mis)Fitting, 7 batches on the
  simulated one-LR grid) and each setting's loss level and optimum are free, so a setting's valley can pass
  through two of its runs exactly; a t likelihood with nu near or below 1 and a small scale rewards that (its
  density at a zero residual grows as 1/scale while the other runs, as outliers, cost only a logarithm): a
  second mode. With nu sampled (Gamma(2, 0.1)) and the broad prior, Step Law's one-batch cut had one chain of
  four at nu 0.8 (the others ~12; R-hat 1.96) and the simulated one-LR grid (truth nu = 3) R-hat 1.19 on nu,
  its 5% quantile at 0.82. Where a reduced table did identify it, nu was 2.6-2.8 in every chain ((Mis)Fitting,
  N <= 1.1e8), and the full model finds about 3 on Step Law dense: 3 is that value, a tail heavy enough that
  the odd loss spike does not bend the valley, with a finite variance.

Detection (`detect_design`)
---------------------------
From the distinct batches and LRs of the table, overall and per setting (N, D[, group]):

- one batch in the whole table: ``fixed_batch``; one LR: ``fixed_lr``; both one: a `ModelError` (no valley
  to fit);
- otherwise ``full``, also when some settings have one batch and others several (those with several inform
  the batch valley and the B* law; the others their LR valley on the ridge, through the shared laws), and
  when *no* setting varies its batch but the batches differ between settings (e.g. batch grown with N): then
  the batch valley is confounded with each setting's loss level and is the prior's, which `Surface`'s fit
  warnings say (`unvaried`), advising a cut to one batch (``--where "batch_tokens == ..."``) for the reduced
  design. The same for LRs.

The option ``design`` of `Surface` forces a design: ``"full"`` fits the whole surface to any table; a reduced
design needs its table to have one batch (one LR). The resolved design is the constant ``design``
(`DESIGN_CODE`), so a reloaded fit knows it (fits written before it was kept are ``full``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.models.surface.priors import PRIORS

__all__ = ["DESIGNS", "DESIGN_CODE", "LEFT_OUT", "ANSWERS", "detect_design", "resolve_design", "design_of",
           "unvaried", "fill_left_out", "REDUCED_P", "REDUCED_NU"]

DESIGNS = ("full", "fixed_batch", "fixed_lr")
#: the constant ``design``: a float code of each design
DESIGN_CODE = {d: float(i) for i, d in enumerate(DESIGNS)}

_BATCH_SCALARS = ("b0", "b_N", "b_D", "kappa1", "kappa2", "c_b0", "c_b_N", "c_b_D", "delta_b", "p_b_unit", "tau_b")
_LR_SCALARS = ("a0", "a_N", "a_D", "kappa1", "kappa2", "c_lr0", "c_lr_N", "c_lr_D", "delta_lr", "p_lr_unit",
               "tau_lr")
#: design -> (scalar sites left out, per-setting sites left out, the size-scatter law left out)
LEFT_OUT: dict[str, tuple[tuple[str, ...], tuple[str, ...], str | None]] = {
    "full": ((), (), None),
    "fixed_batch": (_BATCH_SCALARS + ("p_lr_unit", "nu"), ("eps_b",), "b"),
    "fixed_lr": (_LR_SCALARS + ("p_b_unit", "nu"), ("eps_lr",), "lr"),
}
#: a reduced design's fixed values (the module docstring): the valley's far-field exponent p (its valley a
#: parabola) and the Student-t degrees of freedom of the noise
REDUCED_P, REDUCED_NU = 2.0, 3.0
#: design -> the quantities it answers
ANSWERS = {
    "full": ("lr_opt", "batch_opt", "loss_opt", "lr_opt_at_batch", "loss"),
    "fixed_batch": ("lr_opt_at_batch", "loss_opt_at_batch", "loss"),
    "fixed_lr": ("batch_opt_at_lr", "loss_opt_at_lr", "loss"),
}


def _distinct(v: np.ndarray) -> np.ndarray:
    """Distinct values up to 1e-9 relative (a CSV's rounding is not a second batch)."""
    v = np.unique(np.asarray(v, float))
    return v[np.concatenate([[True], np.diff(np.log(v)) > 1e-9])] if v.size else v


def detect_design(df: pd.DataFrame, source: str = "runs") -> str:
    """The design of a run table with ``lr`` and ``batch_tokens`` (positive, finite): see the module docstring."""
    n_b, n_lr = (len(_distinct(df[c].to_numpy(float))) for c in ("batch_tokens", "lr"))
    if n_b == 1 and n_lr == 1:
        raise ModelError(f"{source}: every run has the same LR and batch; the surface needs an LR or a batch "
                         "sweep (several values of one of them)")
    return "fixed_batch" if n_b == 1 else "fixed_lr" if n_lr == 1 else "full"


def resolve_design(df: pd.DataFrame, option: str | None, source: str = "runs") -> str:
    """The design a fit uses: `option` when given (checked against the table), else `detect_design`'s."""
    found = detect_design(df, source)
    if option is None or option == found or option == "full":
        return found if option is None else option
    col, what = ("batch_tokens", "batch") if option == "fixed_batch" else ("lr", "LR")
    n = len(_distinct(df[col].to_numpy(float)))
    raise ModelError(f"{source}: design={option!r} needs one {what} in the whole table, found {n} distinct "
                     f"values of {col!r} (cut the table, e.g. --where \"{col} == ...\", or use design='full')")


def design_of(constants: dict[str, float]) -> str:
    """The design a fit used, from its constants (``full`` for fits written before it was kept)."""
    return DESIGNS[int(constants.get("design", 0.0))]


def unvaried(df: pd.DataFrame, s_idx: np.ndarray) -> list[str]:
    """The swept columns (``batch``, ``lr``) that no setting varies though the table has several values of them."""
    out = []
    for col, name in (("batch_tokens", "batch"), ("lr", "lr")):
        v = df[col].to_numpy(float)
        if len(_distinct(v)) > 1 and all(len(_distinct(v[s_idx == s])) == 1 for s in np.unique(s_idx)):
            out.append(name)
    return out


def fill_left_out(p: dict[str, Any], design: str, scalar: Any, setting: Any = None, size: Any = None
                  ) -> dict[str, Any]:
    """`p` with the sites `design` leaves out set to their reduced-model values: 0 (`scalar`, or `setting`,
    `size` for per-setting and per-size sites: zeros of the caller's shape and float type); p_*_unit at
    `REDUCED_P` (the left-out valley's is evaluated at 0 only, where p does not matter) and nu at `REDUCED_NU`."""
    scalars, per_setting, size_law = LEFT_OUT[design]
    out = dict(p)
    fixed = {"nu": REDUCED_NU, "p_lr_unit": PRIORS.p_unit(REDUCED_P), "p_b_unit": PRIORS.p_unit(REDUCED_P)}
    for k in scalars:  # (a fit written before p and nu were fixed has their draws: kept)
        out.setdefault(k, scalar + fixed.get(k, 0.0))
    if setting is not None:
        out.update({k: setting for k in per_setting})
    if size_law is not None and size is not None:
        out[f"{size_law}_size"] = size
    return out
