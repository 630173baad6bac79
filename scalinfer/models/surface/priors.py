r"""The surface model's parameters and their priors (weakly informative on the scales involved).

Every parameter lives on the model's centered, scaled coordinates: x = log eta - m_eta, z = log B - m_B,
y = log loss - m_y (natural logs; m the middles of the data), and scaled log sizes
:math:`\tilde n = (\log N - m_N)/h_N`, :math:`\tilde d = (\log D - m_D)/h_D` in [-1, 1]. A slope in
:math:`\tilde n` is the natural exponent times h_N, so its prior sd is the natural exponent's times h_N.

=====================================  =========================================================================
parameter                              prior
=====================================  =========================================================================
``a0, b0`` (eta*, B* at the middle)    Normal(0, 1.5): the optimum at the data's middle lies within the swept
                                       range (sweeps are centred on a guess), or somewhat beyond
``a_N, a_D, b_N, b_D``                 Normal(0, h): the natural exponents of eta* and B* are N(0, 1)
``kappa1``                             Normal(0.5, 0.5): d log eta*/d log B at B*; 1/2 (Adam's square-root rule)
                                       and 1 (linear scaling, SGD) both within one sd
``kappa2``                             Normal(0, 0.5): the ridge bends by less than +-1 in log LR over +-2 in
                                       log B
``g0``; ``g_N, g_D``                   Normal(0, 0.2); Normal(0, 0.3 h): loss exponents of a few hundredths to a
                                       few tenths (local slopes d log L/d log N of -0.05 to -0.15)
``c_lr0, c_b0``                        Normal(-4, 1.5): log loss rises by e^-4 ~ 2% per squared log unit away
                                       from the optimum; the sd spans 0.1%-40%
``c_*_N, c_*_D``                       Normal(0, h): natural slopes of the curvatures N(0, 1)
``delta_lr, delta_b``                  Normal(0, 1): curvature ratio above/below e^{2 delta}, 90% within 1/27-27
``c_lr_B, delta_lr_B``                 Normal(0, 0.3) (option ``lr_valley_by_batch`` only): the LR valley's log
                                       curvature and asymmetry change by this much per log unit of batch off
                                       B*, so over a batch grid of +-2 log units the curvature moves by a factor
                                       e^(+-0.6) at one sd; 0 (the separable valley) is the prior's centre
``p_lr, p_b``                          0.5 + 3.5 Beta(3, 3): valley exponents in (0.5, 4), mean 2.25, sd 0.66
                                       (2: quadratic); sampled as ``p_*_unit`` ~ Beta(3, 3)
``tau_lr, tau_b``                      HalfNormal(0.3): settings scatter around the eta* and B* laws by tens of
                                       percent
``tau_loss``                           HalfNormal(0.02): around the loss law by about a percent
``sigma0``                             HalfNormal(0.02): run-to-run noise of log loss under a few percent
``sigma1``                             HalfNormal(0.5): the misfit is a fraction of the predicted excess loss
``nu``                                 Gamma(2, 0.1): the usual weakly informative prior on Student-t degrees
                                       of freedom
``tau_lr_size^2, tau_b_size^2``        InverseGamma(1, 0.005): a model size's level off the law, tau's median
                                       8.5%, 90% within 4-31%, and a t tail with 2 degrees of freedom
``tau_loss_size^2``                    InverseGamma(1, 5e-5): median 0.85%, 90% within 0.4-3.1%
=====================================  =========================================================================

`PRIORS` is this table, the broad prior (the surface model's ``prior="default"``); its default,
``prior="population"``, is `scalinfer.models.surface.population.POPULATION`: the same with the exponents of
eta* and B*, the valleys' shape (c_*0, delta_*, p_*), kappa1 and the sizes' scatter learned across published
sweeps. `SCALARS`, `SETTING`, `SIZE` name the parameters (`PINNED` the sites the settings' optima are sampled
as, `PINNED_LOSS` the loss levels' where they are pinned); `LAW_N` and `SIZE_PRIOR` hold the broad prior's.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Priors", "PRIORS", "SCALARS", "VALLEY_BY_BATCH", "SETTING", "PINNED", "PINNED_LOSS", "SIZE", "NEW_SETTING",
           "LAW_N", "SIZE_PRIOR"]


@dataclasses.dataclass(frozen=True)
class Priors:
    """Priors of the surface model (see the module's table). Normal priors are (location, sd) or an sd about
    0; slopes in N and D are multiplied by h_N, h_D (the natural exponents' means and sds are the values here);
    ``*_size`` are (alpha, beta) of tau^2 ~ InverseGamma(alpha, beta). `PRIORS` (the defaults) is the broad
    prior of the table; `scalinfer.models.surface.population.POPULATION` is the one learned across published
    sweeps, the surface model's default (its option ``prior``)."""

    optimum_sd: float = 1.5                      #: a0, b0
    #: (mean, sd) of the natural exponents of eta* and B* in N and D (a_N/h_N, a_D/h_D, b_N/h_N, b_D/h_D)
    lr_exp_N: tuple[float, float] = (0.0, 1.0)
    lr_exp_D: tuple[float, float] = (0.0, 1.0)
    batch_exp_N: tuple[float, float] = (0.0, 1.0)
    batch_exp_D: tuple[float, float] = (0.0, 1.0)
    kappa1: tuple[float, float] = (0.5, 0.5)
    kappa2_sd: float = 0.5
    loss_sd: float = 0.2                         #: g0
    loss_exponent_sd: float = 0.3                #: natural exponents of L* (g_N/h_N, g_D/h_D)
    c_lr0: tuple[float, float] = (-4.0, 1.5)     #: log curvature of the LR valley at the data's middle
    c_b0: tuple[float, float] = (-4.0, 1.5)      #: likewise the batch valley
    curvature_exponent_sd: float = 1.0           #: c_*_N/h_N, c_*_D/h_D
    delta_lr: tuple[float, float] = (0.0, 1.0)   #: (mean, sd) of each valley's asymmetry
    delta_b: tuple[float, float] = (0.0, 1.0)
    c_lr_B_sd: float = 0.3                       #: d log C_eta / d v (option lr_valley_by_batch)
    delta_lr_B_sd: float = 0.3                   #: d delta_eta / d v (option lr_valley_by_batch)
    p_lr_beta: tuple[float, float] = (3.0, 3.0)  #: p_lr_unit ~ Beta
    p_b_beta: tuple[float, float] = (3.0, 3.0)   #: p_b_unit ~ Beta
    p_min: float = 0.5                           #: p = p_min + p_span p_unit
    p_span: float = 3.5
    tau_optimum_sd: float = 0.3                  #: tau_lr, tau_b (HalfNormal)
    tau_loss_sd: float = 0.02
    sigma0_sd: float = 0.02
    sigma1_sd: float = 0.5
    nu: tuple[float, float] = (2.0, 0.1)         #: Gamma(concentration, rate)
    lr_size: tuple[float, float] = (1.0, 0.005)  #: tau_lr_size^2 ~ InverseGamma(alpha, beta)
    b_size: tuple[float, float] = (1.0, 0.005)
    loss_size: tuple[float, float] = (1.0, 5e-5)

    def law(self, v: str) -> tuple[float, float, float, float]:
        """Law `v`'s (``"lr"``, ``"b"`` or ``"loss"``) intercept and natural N slope priors: (intercept mean,
        N slope mean, intercept sd, N slope sd); the intercept's mean is 0 (the data's middle)."""
        if v == "loss":
            return 0.0, 0.0, self.loss_sd, self.loss_exponent_sd
        mean, sd = self.lr_exp_N if v == "lr" else self.batch_exp_N
        return 0.0, mean, self.optimum_sd, sd

    def size(self, v: str) -> tuple[float, float]:
        """(alpha, beta) of tau_<v>_size^2 ~ InverseGamma(alpha, beta)."""
        return {"lr": self.lr_size, "b": self.b_size, "loss": self.loss_size}[v]

    def scaled(self, name: str, factor: float) -> Priors:
        """These priors with prior `name`'s scale multiplied by `factor` (a prior-sensitivity study): the sd of a
        Normal or HalfNormal (a (mean, sd) pair's sd), beta of an InverseGamma on tau^2 (the issue's convention:
        x10 moves tau's scale by sqrt 10), the scale 1/rate of nu's Gamma. The Beta of p has no scale."""
        v = getattr(self, name)
        if name in ("lr_size", "b_size", "loss_size"):
            new = (v[0], v[1] * factor)
        elif name == "nu":
            new = (v[0], v[1] / factor)
        elif name.startswith("p_") or name in ("p_min", "p_span"):
            raise ValueError(f"prior {name!r} has no scale")
        elif isinstance(v, tuple):
            new = (v[0], v[1] * factor)
        else:
            new = v * factor
        return dataclasses.replace(self, **{name: new})

    def p(self, p_unit):
        """The valley exponent p in (p_min, p_min + p_span) from its unit-interval coordinate."""
        return self.p_min + self.p_span * p_unit

    def p_unit(self, p):
        """The inverse of `p`."""
        return (p - self.p_min) / self.p_span


PRIORS = Priors()

#: sampled scalar parameters, in the order the model samples them
SCALARS = ("a0", "a_N", "a_D", "b0", "b_N", "b_D", "kappa1", "kappa2", "g0", "g_N", "g_D",
           "c_lr0", "c_lr_N", "c_lr_D", "delta_lr", "p_lr_unit", "c_b0", "c_b_N", "c_b_D", "delta_b", "p_b_unit",
           "tau_lr", "tau_b", "tau_loss", "sigma0", "sigma1", "nu")
#: the LR valley's coupling to the batch, sampled with the option ``lr_valley_by_batch`` only (0 without it)
VALLEY_BY_BATCH = ("c_lr_B", "delta_lr_B")
#: per-setting parameters: offsets of the optimum (in units of tau), log loss there
SETTING = ("eps_lr", "eps_b", "ell")
#: the sampled sites of the optimum's offsets: each setting's optimum through its pin (`numpyro_model.pinned_offset`)
PINNED = ("w_lr", "w_b")
#: the sampled site of each setting's loss level through its pin, only in NUTS's coordinates after a mode search that
#: held tau_loss (`Surface.nuts_kwargs`; elsewhere ``ell`` itself is sampled)
PINNED_LOSS = "w_ell"
#: per-model-size levels (one per distinct N) of log eta*, log B* and log L* at d = 0 (with size scatter only)
SIZE = ("lr_size", "b_size", "loss_size")
#: per-setting quantities a new setting draws around the laws: name -> its tau (``tau_<name>``)
NEW_SETTING = {"x_star": "lr", "z_star": "b", "ell": "loss"}
#: each law's (intercept, N slope) and their prior sds (the slope's natural, to be multiplied by h_N)
LAW_N = {v: (k0, kN, *PRIORS.law(v)[2:]) for v, k0, kN in (("lr", "a0", "a_N"), ("b", "b0", "b_N"),
                                                            ("loss", "g0", "g_N"))}
#: size scatter tau_<law>_size^2 ~ InverseGamma(alpha, beta): (alpha, beta) of each law
SIZE_PRIOR = {"lr": PRIORS.lr_size, "b": PRIORS.b_size, "loss": PRIORS.loss_size}
