r"""The population prior: the surface model's width-setting hyperparameters learned across published sweeps.

How far a prediction may wander 10-100x beyond the data is set by a few hyperparameters that one sweep
barely informs: the scatter of model sizes about the laws (tau_lr_size, tau_b_size, tau_loss_size; four sizes
leave two degrees of freedom), the laws' exponents in N and D for eta* and B*, and the valleys' shape (log
curvature at the data's middle c_lr0, c_b0, asymmetry delta, far-field exponent p, the ridge's slope kappa1).
How much they vary *from one setup to another* is what every published family of LR sweeps says together.
This module holds what they said (`FAMILIES`), the empirical-Bayes fit that pools them (`fit_population`,
`population_priors`) and its result as the surface model's default prior (`POPULATION`; the option
``prior="population"`` of `scalinfer.models.surface.Surface`, ``prior="default"`` for `PRIORS` alone).

Each hyperparameter theta is pooled on an unbounded scale (`SCALES`): log tau for a scatter, logit p_unit for a
valley exponent, the value itself otherwise.

1. **Each family once.** Each family f is fitted with the broad default prior (`PRIORS`), and its posterior of
   theta summarized by a mean m_f and sd s_f (`FAMILIES`). The default prior on that scale, N(m_0, s_0^2) by
   moment matching (exact for a Normal; for tau^2 ~ InverseGamma(alpha, beta), log tau has mean
   (log beta - psi(alpha)) / 2 and variance psi'(alpha) / 4; for p_unit ~ Beta(a, b), logit p_unit has mean
   psi(a) - psi(b) and variance psi'(a) + psi'(b)), is divided out, leaving the family's likelihood as a
   Gaussian (`family_likelihood`):

   .. math::

       v_f^{-1} = s_f^{-2} - s_0^{-2}, \qquad y_f = v_f\,(m_f / s_f^2 - m_0 / s_0^2).

   A family whose posterior is less than 1.25x as precise as the prior (v_f^-1 < s_0^-2 / 4) says nothing
   about theta that the division could recover and is left out for it (``None`` in `likelihoods`).
2. **Normal-normal random effects across families** (`fit_population`): theta_f ~ N(mu, sigma^2),
   y_f | theta_f ~ N(theta_f, v_f), with hyperpriors that shrink toward the broad default:
   mu ~ N(m_0, h^2), sigma ~ HalfNormal(h), h = s_0 / sqrt 2, so that with no family the predictive below
   has the default's mean and variance (h^2 + E sigma^2 = s_0^2). Given sigma, mu is conjugate (precision
   P = h^-2 + sum_f 1/(sigma^2 + v_f), mean M = (m_0 h^-2 + sum_f y_f/(sigma^2 + v_f)) / P) and
   p(y | sigma) is exact; sigma is integrated on a grid of 2,000 points in (0, 5 h].
3. **A new family's theta** is the posterior predictive, the mixture over sigma of N(M, 1/P + sigma^2),
   moment-matched back to the model's form (`to_prior`): a Normal's (mean, sd); an InverseGamma(alpha, beta)
   on tau^2 with psi'(alpha) = 4 Var(log tau) and beta = exp(2 E(log tau) + psi(alpha)); a Beta(a, b) with
   logit moments psi(a) - psi(b) and psi'(a) + psi'(b) equal to the predictive's.

How few families that is. Four families were fitted (Step Law dense, Step Law MoE by active N, (Mis)Fitting,
this project's calibration sweep) and three are pooled: (Mis)Fitting's fit did not converge (`LEFT_OUT`; it
has one batch, so it would inform only the LR valley and the sizes' scatter, its LR law being at its batch, not
at B*). Three families are three draws of sigma: its posterior stays close to the HalfNormal(h) hyperprior
unless the families agree far more tightly than the default prior allows, so the predictive is narrower than
the default mainly where the families agree and are each informative. Other published tables cannot inform
these hyperparameters: Gemstones has two LRs per shape (no valley to locate), Gadre et al. one LR, Zhang et
al. steps-to-target only, and Porian et al.'s raw sweep is not among the shared datasets.

Regenerate (fits each family niced, once, into ``--fits``, reusing fits already there; prints the
`FAMILIES` and `POPULATION` literals to paste here):

    .venv/bin/python benchmarks/population_prior.py [--fits /tmp/popfit]
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from scalinfer.models.surface.priors import PRIORS, Priors

__all__ = ["SCALES", "FAMILIES", "LEFT_OUT", "POPULATION", "PRIOR_SETS", "default_on_scale", "family_likelihood",
           "likelihoods", "fit_population", "to_prior", "population_priors"]

#: hyperparameter (a posterior site or `Surface.derived` name) -> (its `Priors` field, the pooling scale)
SCALES = {
    "tau_lr_size": ("lr_size", "log_tau"), "tau_b_size": ("b_size", "log_tau"),
    "tau_loss_size": ("loss_size", "log_tau"),
    "lr_opt_exp_N": ("lr_exp_N", "identity"), "lr_opt_exp_D": ("lr_exp_D", "identity"),
    "batch_opt_exp_N": ("batch_exp_N", "identity"), "batch_opt_exp_D": ("batch_exp_D", "identity"),
    "c_lr0": ("c_lr0", "identity"), "c_b0": ("c_b0", "identity"),
    "delta_lr": ("delta_lr", "identity"), "delta_b": ("delta_b", "identity"),
    "p_lr_unit": ("p_lr_beta", "logit"), "p_b_unit": ("p_b_beta", "logit"),
    "kappa1": ("kappa1", "identity"),
}

#: a family's likelihood must be at least this share of the default prior's precision to count (step 1)
MIN_PRECISION_SHARE = 0.25

#: each family's posterior (mean, sd) of each hyperparameter on its pooling scale, under the default prior
#: (2 chains x (300 + 300) NUTS draws, seed 0; written by benchmarks/population_prior.py)
FAMILIES: dict[str, dict[str, tuple[float, float]]] = {
    "steplaw-dense": {"tau_lr_size": (-2.9198, 0.3597), "tau_b_size": (-2.9429, 0.345), "tau_loss_size": (-5.1073,
        0.3882), "lr_opt_exp_N": (-0.6141, 0.055), "lr_opt_exp_D": (0.2123, 0.0104), "batch_opt_exp_N": (-0.1059,
        0.0548), "batch_opt_exp_D": (0.5608, 0.0136), "c_lr0": (-4.8308, 0.0261), "c_b0": (-5.2676, 0.0323),
        "delta_lr": (0.626, 0.0193), "delta_b": (0.1126, 0.0234), "p_lr_unit": (-0.1284, 0.0649), "p_b_unit":
        (0.0047, 0.0679), "kappa1": (0.3373, 0.0061)},
    "steplaw-moe": {"tau_lr_size": (-2.6212, 0.418), "tau_b_size": (-2.7847, 0.4044), "tau_loss_size": (-4.883,
        0.4442), "lr_opt_exp_N": (-0.0286, 0.056), "lr_opt_exp_D": (0.1762, 0.0132), "batch_opt_exp_N": (-0.2134,
        0.0554), "batch_opt_exp_D": (0.4631, 0.0225), "c_lr0": (-4.5627, 0.0423), "c_b0": (-5.4736, 0.0646),
        "delta_lr": (-0.3908, 0.0475), "delta_b": (-0.0389, 0.0799), "p_lr_unit": (-0.2256, 0.1692), "p_b_unit":
        (0.8502, 0.196), "kappa1": (0.3457, 0.0129)},
    "misfitting": {"tau_lr_size": (-2.9466, 0.2792), "tau_loss_size": (-4.8706, 0.4427), "c_lr0": (-3.6332, 0.1401),
        "delta_lr": (-0.3743, 0.2503), "p_lr_unit": (-0.4521, 0.5525)},
    "calibration": {"tau_lr_size": (-2.5607, 0.4391), "tau_b_size": (-2.4843, 0.4769), "tau_loss_size": (-4.9285,
        0.4424), "lr_opt_exp_N": (-0.6039, 0.1002), "lr_opt_exp_D": (-0.3236, 0.0833), "batch_opt_exp_N": (-0.0472,
        0.136), "batch_opt_exp_D": (-0.0915, 0.1347), "c_lr0": (-3.7427, 0.0655), "c_b0": (-4.7363, 0.9318),
        "delta_lr": (0.0923, 0.0588), "delta_b": (-0.2828, 0.8963), "p_lr_unit": (0.1397, 0.1572), "p_b_unit":
        (0.1904, 0.3999), "kappa1": (0.6843, 0.0635)},
}

#: families summarized but left out of the population, and why (decided from their fits' convergence alone,
#: before any backtest figure)
LEFT_OUT = {"misfitting": "its fit did not converge (R-hat 2.02 on a0, 26 parameters above 1.01): two chains "
                          "that disagree give a mixture, not a posterior, to summarize"}


def default_on_scale(name: str, priors: Priors = PRIORS) -> tuple[float, float]:
    """(mean, sd) of hyperparameter `name`'s prior in `priors`, on its pooling scale (moment-matched)."""
    from scipy import special

    field, scale = SCALES[name]
    v = getattr(priors, field)
    if scale == "log_tau":
        alpha, beta = v
        return (0.5 * (math.log(beta) - float(special.digamma(alpha))),
                0.5 * math.sqrt(float(special.polygamma(1, alpha))))
    if scale == "logit":
        a, b = v
        return (float(special.digamma(a) - special.digamma(b)),
                math.sqrt(float(special.polygamma(1, a) + special.polygamma(1, b))))
    return float(v[0]), float(v[1])


def family_likelihood(m: float, s: float, m0: float, s0: float) -> tuple[float, float] | None:
    """A family's Gaussian likelihood (y, sqrt v) of theta from its posterior N(m, s^2) under the prior
    N(m0, s0^2) (step 1); None when it holds less than `MIN_PRECISION_SHARE` of the prior's precision."""
    prec = 1.0 / s ** 2 - 1.0 / s0 ** 2
    if prec < MIN_PRECISION_SHARE / s0 ** 2:
        return None
    return (m / s ** 2 - m0 / s0 ** 2) / prec, 1.0 / math.sqrt(prec)


def likelihoods(name: str, families: dict = FAMILIES, exclude=()) -> dict[str, tuple[float, float] | None]:
    """Each family's likelihood of `name` (`family_likelihood`), families in `exclude` and those without `name`
    left out."""
    m0, s0 = default_on_scale(name)
    return {f: family_likelihood(*post[name], m0, s0) for f, post in families.items()
            if f not in exclude and name in post}


def fit_population(y, v, m0: float, s0: float, n_grid: int = 2000) -> dict[str, float]:
    """The normal-normal random-effects fit (steps 2-3) of estimates `y` with variances `v` under
    mu ~ N(m0, h^2), sigma ~ HalfNormal(h), h = s0 / sqrt 2. Returns the posterior means of mu and sigma
    (``mu``, ``sigma``), sigma's posterior sd (``sigma_sd``), and the predictive mean and sd of a new family's
    theta (``mean``, ``sd``). With no estimates the predictive has mean m0 and sd s0 (h^2 + E sigma^2 = s0^2)."""
    y, v = np.asarray(y, float), np.asarray(v, float)
    h = s0 / math.sqrt(2.0)
    sig = np.linspace(5.0 * h / n_grid, 5.0 * h, n_grid)[:, None]             # (G, 1)
    w = sig ** 2 + v[None]                                                    # (G, F)
    P = 1.0 / h ** 2 + np.sum(1.0 / w, axis=1)                                # (G,)
    M = (m0 / h ** 2 + np.sum(y[None] / w, axis=1)) / P
    # log p(y | sigma) = sum_f log N(y_f | M, w_f) + log N(M | m0, h^2) - log N(M | M, 1/P)
    log_lik = (np.sum(-0.5 * np.log(2 * np.pi * w) - 0.5 * (y[None] - M[:, None]) ** 2 / w, axis=1)
               - 0.5 * np.log(2 * np.pi * h ** 2) - 0.5 * (M - m0) ** 2 / h ** 2 + 0.5 * np.log(2 * np.pi / P))
    log_post = log_lik - 0.5 * sig[:, 0] ** 2 / h ** 2                        # HalfNormal(h) hyperprior
    p = np.exp(log_post - log_post.max())
    p /= p.sum()
    s = sig[:, 0]
    var_new = 1.0 / P + s ** 2
    mean = float(p @ M)
    sd = float(np.sqrt(p @ (var_new + M ** 2) - mean ** 2))
    sigma = float(p @ s)
    return {"mu": mean, "sigma": sigma, "sigma_sd": float(np.sqrt(p @ s ** 2 - sigma ** 2)), "mean": mean,
            "sd": sd, "n_families": int(len(y))}


def to_prior(name: str, mean: float, sd: float) -> tuple[float, float]:
    """The `Priors` field value of `name` whose moments on the pooling scale are (mean, sd) (step 3)."""
    from scipy import optimize, special

    scale = SCALES[name][1]
    if scale == "identity":
        return float(mean), float(sd)
    if scale == "log_tau":  # psi'(alpha) = 4 sd^2
        target = 4.0 * sd ** 2
        alpha = optimize.brentq(lambda a: float(special.polygamma(1, a)) - target, 1e-3, 1e6)
        return float(alpha), float(math.exp(2.0 * mean + float(special.digamma(alpha))))

    def eqs(la):
        a, b = np.exp(la)
        return [special.digamma(a) - special.digamma(b) - mean, special.polygamma(1, a) + special.polygamma(1, b)
                - sd ** 2]
    a, b = np.exp(optimize.fsolve(eqs, [math.log(3.0), math.log(3.0)]))
    return float(a), float(b)


def population_priors(families: dict = FAMILIES, exclude=tuple(LEFT_OUT)) -> tuple[Priors, dict[str, dict]]:
    """The default priors with every hyperparameter of `SCALES` replaced by its population predictive, fitted
    on `families` less `exclude` (default `LEFT_OUT`; leave-one-family-out validation adds the family scored),
    and each fit's figures by name."""
    fields, report = {}, {}
    for name, (field, _) in SCALES.items():
        lik = {f: L for f, L in likelihoods(name, families, exclude).items() if L is not None}
        m0, s0 = default_on_scale(name)
        r = fit_population([L[0] for L in lik.values()], [L[1] ** 2 for L in lik.values()], m0, s0)
        fields[field] = to_prior(name, r["mean"], r["sd"])
        report[name] = {**r, "families": sorted(lik), "default": (m0, s0)}
    return dataclasses.replace(PRIORS, **fields), report


#: the population prior (`population_priors` of `FAMILIES`; regenerated by benchmarks/population_prior.py)
POPULATION = dataclasses.replace(PRIORS, lr_size=(1.637, 0.004976), b_size=(1.585, 0.004309), loss_size=(1.631,
    5.295e-05), lr_exp_N=(-0.3529, 0.6192), lr_exp_D=(0.02545, 0.5691), batch_exp_N=(-0.1329, 0.2869),
    batch_exp_D=(0.2832, 0.6084), c_lr0=(-4.319, 0.9783), c_b0=(-5.226, 0.7146), delta_lr=(0.08748, 0.7533),
    delta_b=(0.04371, 0.4838), p_lr_beta=(14.86, 16.01), p_b_beta=(5.537, 4.299), kappa1=(0.4566, 0.3238))

#: the option ``prior`` of the surface model -> its priors
PRIOR_SETS = {"default": PRIORS, "population": POPULATION}
