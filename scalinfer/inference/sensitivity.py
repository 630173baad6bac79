r"""Power-scaling prior and likelihood sensitivity of posterior predictions (Kallioinen et al. 2024).

Raise the prior to a power, :math:`p_\alpha(\theta \mid y) \propto p(\theta)^\alpha\, p(y \mid \theta)`, and ask how
far the posterior of a quantity q moves as alpha leaves 1. With the posterior draws :math:`\theta_i` this needs no
refit: the power-scaled posterior is the same draws with importance weights
:math:`w_i \propto p(\theta_i)^{\alpha - 1}`, Pareto-smoothed (PSIS). The sensitivity is the derivative of the
cumulative Jensen-Shannon distance (CJS) between q's weighted and unweighted distributions, in log2 alpha,
by finite differences from alpha = 0.99 and 1.01:

.. math::

    \text{sens}(q) = \tfrac12 \Big(\frac{\mathrm{CJS}(q_{0.99}, q_1)}{|\log_2 0.99|}
    + \frac{\mathrm{CJS}(q_{1.01}, q_1)}{\log_2 1.01}\Big)

(each CJS the larger of q's and -q's).

A quantity with a draw that is not finite (a target some draws cannot reach: `batch-floor`'s batch sizes where
the floor lies above the target) has no sensitivity: the CJS, an integral over q, cannot place an atom at
infinity, and setting it at the largest finite draw makes the number depend on how far out that draw lies
(benchmarks/README.md, "prior_sensitivity.py"). Its values are NaN, its site None and its diagnosis ``"unknown"``.

Likelihood sensitivity is the same with the likelihood raised to the power. One prior *site* at a time
(`scalinfer.inference.compiled.log_densities`: the fit's ``log_prior`` group holds one variable per latent site)
says which prior moves the answer most; all sites together give the overall prior sensitivity.

Predictions are derived quantities: q_i = f(theta_i, target), one per posterior draw and aligned with them, so
the weights of the fit's draws apply to them unchanged. `prior_sensitivity` gives, for a prediction's draws, what
`arviz_stats.psense` gives on a DataTree holding them as its ``posterior`` beside the fit's ``log_prior`` and
``log_likelihood``: for the joint prior, for the likelihood and for each prior site, all quantities at once.

Reading it (psense's own thresholds, `THRESHOLD` = 0.05): prior sensitivity >= 0.05 with likelihood sensitivity
< 0.05 is a *prior-dominated* answer (a strong prior, data that say little about q: `sensitivity_warnings`
says so and names the prior); both >= 0.05 is a possible prior-data conflict; otherwise the data lead.

Reference: N. Kallioinen, T. Paananen, P.-C. Bürkner, A. Vehtari, *Detecting and diagnosing prior and likelihood
sensitivity with power-scaling*, Stat. Comput. 34, 57 (2024).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from scalinfer.errors import ModelError

__all__ = ["prior_sensitivity", "unavailable", "sensitivity_warnings", "THRESHOLD", "ALPHAS"]

#: psense's threshold for "sensitive" (both for the prior and for the likelihood)
THRESHOLD = 0.05
#: the powers the derivative is taken between (psense's default)
ALPHAS = (0.99, 1.01)


def _fit(fit):
    """A `Fit` (a fit's DataTree, `Fit.tree`, is wrapped in one)."""
    from scalinfer.inference.fit import Fit

    return fit if isinstance(fit, Fit) else Fit(fit)


def unavailable(fit, n_draws: int | None = None) -> str | None:
    """Why power-scaling sensitivity cannot be computed from this fit (a `Fit` or its DataTree; None: it can)."""
    fit = _fit(fit)
    groups = fit.groups
    if "log_prior" not in groups:
        method = fit.attrs.get("method")
        if method == "map":
            return "method=map is a point estimate: there are no draws to reweight"
        if method == "bootstrap":
            return "method=bootstrap has no prior to power-scale"
        return "the fit has no log_prior group (a fit file written before it was stored): refit to get it"
    if "log_likelihood" not in groups:
        return "the fit has no log_likelihood group"
    n = fit.n_draws
    if n < 2:
        return "a single draw: nothing to reweight"
    if n_draws is not None and n_draws != n:
        return f"the prediction has {n_draws} draws, the fit {n}: they are not aligned"
    return None


def prior_sensitivity(fit, draws: dict[str, np.ndarray], alphas: tuple[float, float] = ALPHAS
                      ) -> dict[str, dict[str, Any]]:
    """Power-scaling sensitivity of each predicted quantity (see the module docstring).

    Parameters
    ----------
    fit : the `Fit` (or its DataTree, `Fit.tree`), with ``posterior``, ``log_prior`` and ``log_likelihood``
        groups (`unavailable` says why not, where it lacks them).
    draws : quantity -> array (n_draws, *target shape), the draws aligned with the fit's posterior draws
        flattened over chains (`Fit.draws`, `Model.predict`).
    alphas : the lower and upper powers.

    Returns
    -------
    quantity -> ``{"prior": s_prior, "likelihood": s_lik, "most": site, "most_label": label, "most_prior": s_site,
    "diagnosis": d}``: the sensitivity to the joint prior and to the likelihood, the prior site whose power-scaling
    moves the quantity most (and the prior it stands for, `Model.prior_label`) and its sensitivity, and
    ``"prior-dominated"``, ``"prior-data conflict"``, ``"data"`` (or ``"unknown"``, where a draw is not finite:
    the values are NaN and the site and label None; the module docstring says why). Each value is a float or a
    string (None) for a quantity at one target, an array of the target shape for a grid.

    The numbers are `arviz_stats.psense`'s on a DataTree whose ``posterior`` holds `draws` (chains, draws)
    beside the fit's ``log_prior`` and ``log_likelihood`` (``group_var_names`` = one site for a site's value),
    computed with the same array functions (`arviz_stats.base.array_stats`: ``power_scale_lw``,
    ``power_scale_sense``) without psense's per-call xarray bookkeeping, so that each component's Pareto-smoothed
    weights are computed once for all quantities: about 10x faster, which lets `Fit.predict` report it by
    default.
    """
    from arviz_stats.base import array_stats

    fit = _fit(fit)
    reason = unavailable(fit, len(next(iter(draws.values()))) if draws else None)
    if reason:
        raise ModelError(f"prior sensitivity unavailable: {reason}")
    chains, n = next(iter(fit.arrays("posterior").values())).shape[:2]
    log_prior = {k: np.asarray(v, float) for k, v in fit.arrays("log_prior").items()}
    log_lik = sum(np.asarray(v, float).reshape(chains, n, -1).sum(-1) for v in fit.arrays("log_likelihood").values())
    sites = list(log_prior)
    components = {"prior": sum(log_prior.values()), "likelihood": log_lik,
                  **{("site", k): v for k, v in log_prior.items()}}
    # quantity draws with the sample axes last: (*target shape, chain, draw)
    arrays = {k: np.moveaxis(np.asarray(v, float).reshape(chains, n, *np.shape(v)[1:]), (0, 1), (-2, -1))
              for k, v in draws.items()}
    finite = {k: np.all(np.isfinite(v), axis=(-2, -1)) for k, v in arrays.items()}
    clean = {k: np.where(np.isfinite(v), v, 0.0) for k, v in arrays.items()}  # NaN'd below via `finite`
    values: dict[Any, dict[str, np.ndarray]] = {}
    with warnings.catch_warnings():  # PSIS's warnings on a component whose tail cannot be smoothed
        warnings.simplefilter("ignore")
        for c, log_density in components.items():
            weights = []
            for alpha in alphas:  # as psense: the smoothed log weights of p^(alpha - 1), normalised
                w = np.exp(array_stats.power_scale_lw(log_density, alpha=alpha, axis=(0, 1)))
                weights.append(w / w.sum())
            values[c] = {}
            for k, v in clean.items():
                lo, hi = (np.broadcast_to(w, v.shape) for w in weights)
                sens = array_stats.power_scale_sense(v, lo, hi, lower_alpha=alphas[0], upper_alpha=alphas[1],
                                                     chain_axis=-2, draw_axis=-1)
                values[c][k] = np.where(finite[k], sens, np.nan)
    result = {}
    for k in draws:
        per_site = np.stack([values[("site", s)][k] for s in sites])  # (site, *target shape)
        idx = np.argmax(np.where(np.isnan(per_site), -np.inf, per_site), axis=0)
        most_value = np.take_along_axis(per_site, idx[None], axis=0)[0]
        # no site moves a quantity whose sensitivity is undefined (a non-finite draw): None, not the first site
        most = np.where(finite[k], np.asarray(sites, dtype=object)[idx], None)
        p, l_ = values["prior"][k], values["likelihood"][k]
        diagnosis = np.where(np.isnan(p) | np.isnan(l_), "unknown",
                             np.where(p >= THRESHOLD, np.where(l_ >= THRESHOLD, "prior-data conflict",
                                                               "prior-dominated"), "data"))
        label = np.vectorize(lambda m: None if m is None else fit.model.prior_label(m), otypes=[object])(most)
        entry = {"prior": p, "likelihood": l_, "most": most, "most_label": label, "most_prior": most_value,
                 "diagnosis": diagnosis}
        if np.ndim(p) == 0:
            entry = {key: (float(v) if key in ("prior", "likelihood", "most_prior") else np.asarray(v).item())
                     for key, v in entry.items()}
        result[k] = entry
    return result


def sensitivity_warnings(sensitivity: dict[str, dict[str, Any]] | None) -> list[str]:
    """A warning per quantity whose answer is prior-dominated (prior sensitivity >= `THRESHOLD`, likelihood
    sensitivity < `THRESHOLD`), naming the prior site that moves it most."""
    if not sensitivity:
        return []
    out = []
    for k, s in sensitivity.items():
        dominated = np.asarray(s["diagnosis"]) == "prior-dominated"
        if not dominated.any():
            continue
        if np.ndim(s["prior"]) == 0:
            out.append(f"{k} is prior-dominated: power-scaling sensitivity to the prior {s['prior']:.3f} (>= "
                       f"{THRESHOLD}), to the likelihood {s['likelihood']:.3f} (< {THRESHOLD}); the data say little "
                       f"about it here, and the prior of {s.get('most_label', s['most'])} moves it most")
        else:
            sites, counts = np.unique(np.asarray(s.get("most_label", s["most"]))[dominated].astype(str),
                                      return_counts=True)
            out.append(f"{k} is prior-dominated at {int(dominated.sum())} of {dominated.size} targets (power-scaling "
                       f"sensitivity to the prior >= {THRESHOLD}, to the likelihood < {THRESHOLD}); the prior that "
                       f"moves it most there: {sites[np.argmax(counts)]}")
    return out
