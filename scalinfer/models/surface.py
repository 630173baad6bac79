r"""``surface``: one posterior over the loss surface in (N, D, LR, batch) (MATH.md sections 3, 4 and 7).

Every run enters the likelihood, optimal or not, converged or diverged. Runs are grouped in *settings*
s = (N, D[, group]); each setting has a joint optimum (eta*_s, B*_s) and a loss there, L*_s.

The surface
-----------
With x = log eta (peak learning rate), z = log B (batch in tokens) and y = log loss (nats/token):

.. math::

    y = \ell_s + V_\eta(u) + V_B(v), \qquad v = z - z^*_s, \qquad
    u = x - \big(x^*_s + \kappa_1 v + \tfrac12 \kappa_2 v^2\big)

- the batch valley :math:`V_B(v) = C^B_\pm \tfrac{2}{p_B}\big((1 + v^2)^{p_B/2} - 1\big)` around the
  loss-optimal batch :math:`z^*_s`: :math:`C v^2` near the optimum (MATH.md's quadratic, eq:loss-n-d), a
  power :math:`|v|^{p}` far from it, and smooth everywhere (a bare :math:`|v|^p` with p < 2 has unbounded
  curvature at the optimum, which forces NUTS into tiny steps);
- the LR valley :math:`V_\eta(u)`, of the same form, around the optimal LR *at that batch*: the ridge
  :math:`x^*_s(z) = x^*_s + \kappa_1 v + \kappa_2 v^2/2` lets eta* move with B (kappa_1 about 1/2 is the
  square-root rule of Adam; kappa_2 lets the ridge bend, e.g. flatten beyond B*). At z = z*_s the ridge passes
  through x*_s, so (x*_s, z*_s) is the joint optimum of the setting and :math:`\ell_s` the log loss there;
- each valley has its own curvature below (:math:`C_-`) and above (:math:`C_+`) the optimum,
  :math:`\log C_\pm = c_0 + c_N \tilde n + c_D \tilde d \mp \delta` (the data decide the asymmetry delta;
  delta = 0 is symmetric), and its own far-field exponent p in (0.5, 4) (p = 2: quadratic throughout;
  real valleys are flatter far from the optimum, p < 2). The curvatures, delta, p and the ridge
  (kappa_1, kappa_2) are shared by all settings, the curvatures moving with N and D by the laws above.

The laws (MATH.md section 4), with :math:`\tilde n = (\log N - m_N)/h_N`, :math:`\tilde d = (\log D - m_D)/h_D`
(m the middle and h the half-range of the data's log N and log D, so both lie in [-1, 1]):

.. math::

    x^*_s &= m_\eta + a_0 + a_N \tilde n_s + a_D \tilde d_s + \tau_\eta\, \epsilon^\eta_s \\
    z^*_s &= m_B + b_0 + b_N \tilde n_s + b_D \tilde d_s + \tau_B\, \epsilon^B_s \\
    \ell_s &\sim \mathcal N(m_y + g_0 + g_N \tilde n_s + g_D \tilde d_s,\; \tau_L),
    \qquad \epsilon_s \sim \mathcal N(0, 1)

i.e. eta*(N, D) = c N^alpha D^beta, B*(N, D) = c_B N^alpha_B D^beta_B and L*(N, D) = c_L N^alpha_L D^beta_L
with partial pooling: each setting's optimum sits off the law by a non-centered offset tau * epsilon_s, and
its loss level off the loss law by a centered one (each setting's runs pin its loss level to ~1e-4, far
tighter than the scatter tau_L, which is when centering samples better). The natural
exponents are the scaled slopes over h (``lr_opt_exp_N = a_N / h_N``...), reported by `derived`. The loss
law is local (a power law in N and D without Chinchilla's floor): with per-setting offsets it only needs to
carry L* to the target, and it says so through tau_L. m_eta, m_B are the middles of the swept log LRs and log
batches and m_y the median of the settings' best log losses, so every sampled parameter is O(1).

Size scatter (on with two or more model sizes; ``size_scatter=False`` turns it off)
------------------------------------------------------------------------------------
The settings of one model size (a distinct N: one architecture, as in Step Law's grids) share its deviation
from the laws: with ``size_scatter`` each law is, for the sizes m = 1..M at scaled log N n_m,

.. math::

    x^*_s = A_{m(s)} + a_D \tilde d_s + \tau_\eta \epsilon^\eta_s, \qquad
    A_m = a_0 + a_N n_m + \tau^{size}_\eta e_m, \qquad e_m \sim \mathcal N(0, 1)

(likewise z*_s with b and tau_b_size, and the loss levels' mean with g and tau_loss_size). Without it, a size
that sits off the power law pins the N slope as if the settings' scatter were all the noise there is: on
Step Law, fitting N < N_k and predicting every setting of the next size N_k, the 90% intervals of lr_opt held
the grid's best LR in 8 of 13 held-out settings (2 of 4 when two sizes 1.25x apart were fit) and the best
batch in 9; with size scatter 12 and 12 of 13 (benchmarks/steplaw_lr.py, "held out by size"). On 100 data sets
simulated with size scatter and every scatter drawn from its prior, its 90% intervals at a new size 2x
the largest held the truth 94% (lr_opt) and 89% (batch_opt) of the time, its 50% intervals 61% and 50%
(benchmarks/calibration_lr.py --tau-prior; binomial se 3% and 5%; an earlier run of the same
study, before the potential ran in float32, gave 95%, 92%, 59% and 52%).

With M sizes, the M - 2 directions of their levels off their least-squares line are what the data say about
tau_size; with one or two sizes it is its prior's.

Geometry: with tau sampled, its funnel dominates. Sampling A_m = a0 + a_N n_m + tau e_m non-centered put
(a0, a_N) on a ridge with e whose direction turns with tau (4 x (500 + 1,000) on Step Law: 113-133 leapfrog
steps per draw, 48-208 divergences); centered, the joint mode sat at tau = 0; with the law integrated out and
the levels non-centered, 75-87 steps per draw at target acceptance 0.95. So the law is integrated out and
tau is integrated out of the levels' residuals about their least-squares line; both are drawn afterwards from
their exact conditionals. With X = [1, n] = Q R (Q_perp an orthonormal basis of the rest):

.. math::

    A = Q \gamma + Q_\perp r, \qquad r \sim t_{2\alpha}\big(0, (\beta/\alpha) I_{M-2}\big), \qquad
    \gamma \mid \tau \sim \mathcal N(0, \tau^2 I + R P R^T)

(P the law's prior covariance): A = X beta + tau e with beta ~ N(0, P) is that, since r = Q_perp^T A ~ N(0,
tau^2 I) under tau^2 ~ InverseGamma(alpha, beta) is the multivariate t. Then tau^2 = (beta + |r|^2 / 2) / u with
u ~ Gamma(alpha + (M - 2)/2, 1), tau's conditional given r, and the law (a0, a_N) ~ N(G^-1 X^T A, tau^2 G^-1)
with G = X^T X + tau^2 P^-1 (`law_given_levels`), its conditional given the levels (the data see the levels
only). The data pin r and gamma; tau reaches the density only through gamma's covariance, where R P R^T
outweighs tau^2 unless the sizes span little of log N. Tried and dropped: gamma ~ N(0, R P R^T), free of tau
(so the law's prior becomes P + tau^2 (X^T X)^-1: harmless on Step Law's dense grid, but with Step Law's MoE
sizes 0.3% apart in total N the law's N exponent was known to +-50 instead of the prior's +-1); the law
sampled and all M sizes' deviations from it t-distributed (46-48 steps per draw against 41); the settings'
optima centered, delta_s ~ N(0, tau_eta), which the data pin better than eps_s (Step Law, 4 x (1,000 + 1,000):
NUTS at its maximum tree depth, 1,020 steps per draw, R-hat 1.96, against 26 steps non-centered).
``tau_*_size^2 ~ InverseGamma(1, 0.005)`` (loss: ``InverseGamma(1, 5e-5)``): tau's median 8.5% (loss 0.85%),
90% of the mass within 4-31% (0.4-3.1%), and a tail of t with 2 degrees of freedom for a size far off. It is
conservative at the low end (P(tau < 3%) = 0.4%): with a handful of sizes the data cannot tell a 1% scatter
from a 5% one, and the prior takes the wider. Cost, 4 x (500 + 1,000) on Step Law with compiled programs
cached: 42 leapfrog steps per draw against 32 without, no divergences, 34 s against 23 s on the 1,746 runs with
N <= 6e8 (benchmarks/steplaw_lr.py); with issue #8's 4 x (1,000 + 1,000) on all 1,911, 26 steps per draw
against 16 and 38 per warmup iteration against 32, a warm fit 28.6 s against 16.4 s, cold 42.4 s against 26.5 s
(benchmarks/fit_speed.py). Each gradient costs ~1.1x the plain model's (in float32, as the plain model's: see
`SmallNormal`). Most of the extra steps after warmup are step-size adaptation, not geometry: the posterior
sits near a tree-depth boundary (trees of 15 leapfrog steps at step size ~0.23 and above, 31 below), and the
dual averaging of the 50-iteration end buffer leaves each chain's step size anywhere in 0.17-0.29, so about half
the chains run at twice the steps (seen with every chain's own mass matrix conditioned alike, and with all four
given the exact posterior covariance). It is on by default all the same: the plain model's intervals at a new N
are too narrow (8 of 13 held-out sizes, above), and honest extrapolation in N is what the model is for. With a
single size it stays off: the N exponents are then the prior's, which dwarfs a size's scatter at any other N,
and the fit diverges less (48 of 4,000 transitions against 185 on Step Law's smallest size). Issue #8's speed
targets are measured on the plain model (``benchmarks/fit_speed.py``, whose PyMC twin is that model).

A prediction at a target (N, D) is for a *new* setting: it draws its own offsets epsilon ~ N(0, 1), so its
intervals include the scatter of settings around the laws, not only the uncertainty of the laws. With size
scatter it is also of a new size, which draws its own level, unless the target N is within 0.5% of a fitted
size's: then it sits around that size's fitted level (a longer run of a model that was trained).
``batch_opt`` is the loss-optimal batch at fixed (N, D) (Step Law's and DeepSeek's definition; MATH.md
section 5 lists the others, which this model does not estimate), in tokens; ``lr_opt`` is the optimal peak
LR at that batch; ``loss_opt`` the loss at the joint optimum.

Likelihood
----------
Converged runs: :math:`y_i \sim t_\nu(\mu_i, \sigma_i)` with :math:`\sigma_i = \sigma_0 + \sigma_1
(V_\eta + V_B)`: a noise floor plus a misfit that grows with distance from the optimum (the valleys' shape is
least exact far from it; Step Law's losses are Gaussian-smoothed, so their noise floor is tiny and the misfit
dominates). The Student-t keeps the odd loss spike from bending the valleys.

Diverged runs (marked ``diverged``, non-finite loss, or a finite loss above ``divergence_ratio`` times the
best converged loss of their setting: Step Law's table holds blown-up runs at losses of 4-7 nats, unmarked)
are *censored*: their loss had the run converged is only known to exceed a level c_i, the loss of the
highest-LR converged run below it at the same setting and batch (divergence happens on the high-LR side of
the valley, where loss rises with LR), or the setting's best converged loss when there is none. Each adds
:math:`\log P(y_i > \log c_i) = \log \Phi((\mu_i - \log c_i)/\sigma_i)` as the observed site
``obs_censored`` (`Exceeds`: "it diverged" is 1 with that probability). The tail is Gaussian rather than
Student-t because JAX cannot differentiate the t CDF in nu.

Priors (weakly informative on the scales involved; x, z, y in natural-log units)
---------------------------------------------------------------------------------
- ``a0, b0 ~ Normal(0, 1.5)``: the optimum at the data's middle lies within the swept range (sweeps are
  centred on a guess; the Step Law sweeps span +-2.6 in log LR and +-2.4 in log B), sd 1.5 allows it
  anywhere in it and somewhat beyond.
- ``a_N, a_D, b_N, b_D ~ Normal(0, h)``: the *natural* exponents of eta* and B* in N and D are N(0, 1); the
  published ones (Step Law -0.71, 0.31, 0.57; the LR paper -0.22, -0.35; Bjorck -0.32) lie well inside.
- ``kappa1 ~ Normal(0.5, 0.5)``: d log eta*/d log B at the optimum; 1/2 (Adam's square-root rule) and 1
  (linear scaling, SGD) are both within one sd. ``kappa2 ~ Normal(0, 0.5)``: the ridge bends by less than
  +-1 in log LR over +-2 in log B.
- ``g0 ~ Normal(0, 0.2)``, ``g_N, g_D ~ Normal(0, 0.3 h)``: loss exponents of a few hundredths to a few
  tenths (Chinchilla's local slopes d log L/d log N are -0.05 to -0.15).
- ``c0 ~ Normal(-4, 1.5)`` for both valleys: log loss rises by e^-4 ~ 2% per squared log unit away from the
  optimum (Step Law: 0.5-5%); sd 1.5 spans 0.1%-40%. ``c_N, c_D ~ Normal(0, h)``: natural slopes N(0, 1).
  ``delta ~ Normal(0, 1)``: curvature ratio above/below e^{2 delta}, 90% prior within 1/27-27.
- ``p ~ 0.5 + 3.5 Beta(3, 3)``: valley exponents in (0.5, 4), mean 2.25, sd 0.66 (the quadratic is 2).
- ``tau_eta, tau_B ~ HalfNormal(0.3)``: settings scatter around the LR and batch laws by tens of percent
  (Step Law's grid step is sqrt 2, i.e. 0.35 in log). ``tau_L ~ HalfNormal(0.02)``: around the loss law by
  about a percent.
- ``sigma0 ~ HalfNormal(0.02)``: run-to-run noise of log loss is under a few percent;
  ``sigma1 ~ HalfNormal(0.5)``: the misfit is a fraction of the predicted excess loss;
  ``nu ~ Gamma(2, 0.1)``: the usual weakly informative prior on Student-t degrees of freedom.

Geometry: the fit starts from a per-setting point estimate (`init_values`) refined by saddle-free Newton steps
to the joint mode (`scalinfer.inference.optimize`); NUTS then runs on coordinates scaled by the Laplace
standard deviations (`scalinfer.inference.fit`), so parameters pinned to 1e-4 (the loss levels) and ones known
to 0.5 (the offsets) are all O(1), and a dense mass matrix adapts to the correlation that is left (between the
laws' intercepts and the curvatures). On Step Law's 1,911 runs the plain model samples at ~16 leapfrog steps
per draw after warmup with no divergences (4 x (1,000 + 1,000) in 14 s of NUTS on 2 cores with the potential in
float32, 25 s in float64, `benchmarks/fit_speed.py`). Centering the optima of settings whose runs bracket them
was tried and dropped: no fewer steps per draw, and the joint mode then sits at tau_lr = tau_b = 0 (the
centered funnel's neck), a useless start and scale for NUTS;
per-batch jitter of the ridge and per-setting valley shapes were tried and dropped: they added 100+
parameters and kept NUTS at its maximum tree depth (a 4 x 600-iteration fit did not finish in 13 minutes).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.models.base import Arrays, Model
from scalinfer.runs.schema import RunTable

__all__ = ["Surface", "MODEL", "Exceeds", "SmallNormal", "IsotropicStudentT", "laws", "setting_values",
           "surface_terms", "surface_at", "settings_of", "censor_levels", "sizes_of", "size_basis", "size_line_scale",
           "law_given_levels", "size_offsets"]

#: sampled scalar parameters, in the order the model samples them
SCALARS = ("a0", "a_N", "a_D", "b0", "b_N", "b_D", "kappa1", "kappa2", "g0", "g_N", "g_D",
           "c_lr0", "c_lr_N", "c_lr_D", "delta_lr", "p_lr_unit", "c_b0", "c_b_N", "c_b_D", "delta_b", "p_b_unit",
           "tau_lr", "tau_b", "tau_loss", "sigma0", "sigma1", "nu")
#: per-setting parameters: non-centered offsets of the optimum, centered log loss there
SETTING = ("eps_lr", "eps_b", "ell")
#: per-model-size levels (one per distinct N) of log eta*, log B* and log L* at d = 0 (``size_scatter=True`` only)
SIZE = ("lr_size", "b_size", "loss_size")
#: (intercept, N slope) of each law and the prior sds of both; the law's D slope is sampled as before
LAW_N = {"lr": ("a0", "a_N", 1.5, 1.0), "b": ("b0", "b_N", 1.5, 1.0), "loss": ("g0", "g_N", 0.2, 0.3)}
#: size scatter tau_<law>_size^2 ~ InverseGamma(alpha, beta): (alpha, beta) of each law, see the module docstring
SIZE_PRIOR = {"lr": (1.0, 0.005), "b": (1.0, 0.005), "loss": (1.0, 5e-5)}
#: the largest finite loss, relative to the best converged loss of its setting, still counted as converged
DIVERGENCE_RATIO = 1.3
_P_MIN, _P_SPAN = 0.5, 3.5
_LOG_2PI = math.log(2 * math.pi)


def _valley(offset, log_c, delta, p):
    """Asymmetric smooth valley (2 C_+-/p) ((1 + offset^2)^(p/2) - 1); log C_+- = log_c +- delta above/below.

    Quadratic near the optimum (C offset^2, MATH.md eq:loss-n-d, for any p), a power |offset|^p far from it
    (p < 2: flatter than a parabola; p = 2: exactly C offset^2). Infinitely smooth in the parameters (a bare
    |offset|^p with p < 2 has unbounded curvature at the optimum, which forces NUTS into tiny steps)."""
    log_curv = jnp.where(offset < 0, log_c - delta, log_c + delta)
    return jnp.exp(log_curv) * (2.0 / p) * jnp.expm1(0.5 * p * jnp.log1p(offset * offset))


class Exceeds(dist.Distribution):
    """1 ("the loss exceeded its level") with probability Phi(z), else 0: log_prob is log Phi(+-z).

    A Bernoulli with logits log Phi(z) - log Phi(-z) has the same probabilities, but evaluates two
    `log_ndtr` and a softplus where this evaluates one `log_ndtr` (the censored term was a quarter of the
    gradient's time on Step Law's table, and its code a good part of the compiled program)."""

    arg_constraints = {"z": dist.constraints.real}
    support = dist.constraints.boolean

    def __init__(self, z, *, validate_args=None):
        self.z = z
        super().__init__(batch_shape=jnp.shape(z), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, sample_shape + self.batch_shape)
        return (eps < self.z).astype(jnp.int32)

    def log_prob(self, value):
        return jax.scipy.special.log_ndtr(jnp.where(value == 1, self.z, -self.z))


class SmallNormal(dist.Distribution):
    """A multivariate normal of a few (static) dimensions, given its location and lower Cholesky factor.

    Written out for two reasons. Its log density by forward substitution, elementwise: NumPyro's calls a
    triangular solve, a LAPACK call on CPU (on Step Law's table the size terms' solves, this one's and
    `IsotropicStudentT`'s with their gradients, took ~0.2 ms of a 0.8 ms gradient). And its arguments are not
    validated (``validate_args=False``; the model builds them valid): NumPyro validates by default, at trace
    time, one JAX operation at a time, each compiled on its own, and a program is traced in every fit even when
    its compiled code comes from the persistent cache. With NumPyro's multivariate normal and t, a warm fit with
    size scatter compiled 99 small programs (2.2 s; the plain model's warm fit, 8)."""

    arg_constraints = {"loc": dist.constraints.real_vector, "scale_tril": dist.constraints.lower_cholesky}
    support = dist.constraints.real_vector
    reparametrized_params = ["loc", "scale_tril"]

    def __init__(self, loc, scale_tril, *, validate_args=False):
        self.loc, self.scale_tril = loc, scale_tril
        batch = jax.lax.broadcast_shapes(jnp.shape(loc)[:-1], jnp.shape(scale_tril)[:-2])
        super().__init__(batch_shape=batch, event_shape=jnp.shape(scale_tril)[-1:], validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, sample_shape + self.batch_shape + self.event_shape)
        return self.loc + jnp.squeeze(self.scale_tril @ eps[..., None], -1)

    def log_prob(self, value):
        L, x = self.scale_tril, value - self.loc
        w = []
        for i in range(x.shape[-1]):
            acc = x[..., i]
            for j in range(i):
                acc = acc - L[..., i, j] * w[j]
            w.append(acc / L[..., i, i])
        return sum(-0.5 * wi * wi - jnp.log(L[..., i, i]) - 0.5 * _LOG_2PI for i, wi in enumerate(w))


class IsotropicStudentT(dist.Distribution):
    """The multivariate t in `k` dimensions with `df` degrees of freedom, location 0 and scale c I (`df`, `c` Python
    floats), NumPyro's ``MultivariateStudentT(df, 0, c I)``: its log density from |x|^2 alone, with no triangular
    solve, and no argument validation (see `SmallNormal`)."""

    support = dist.constraints.real_vector

    def __init__(self, df: float, k: int, c: float, *, validate_args=False):
        self._df, self._k, self._c = float(df), int(k), float(c)
        super().__init__(batch_shape=(), event_shape=(int(k),), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        k_z, k_g = jax.random.split(key)
        z = jax.random.normal(k_z, sample_shape + self.event_shape)
        g = jax.random.gamma(k_g, 0.5 * self._df, sample_shape) / (0.5 * self._df)  # chi^2_df / df
        return self._c * z / jnp.sqrt(g)[..., None]

    def log_prob(self, value):
        df, k, c = self._df, self._k, self._c
        norm = math.lgamma(0.5 * (df + k)) - math.lgamma(0.5 * df) - 0.5 * k * math.log(df * math.pi) - k * math.log(c)
        return norm - 0.5 * (df + k) * jnp.log1p(jnp.sum(value * value, -1) / (df * c * c))


def laws(p: dict[str, Any], n, d) -> dict[str, Any]:
    """The population laws at scaled (n, d): log eta* - m_lr, log B* - m_B, log L* - m_y and the valleys' log
    curvatures, before any setting's own deviation."""
    return {
        "x_star": p["a0"] + p["a_N"] * n + p["a_D"] * d,
        "z_star": p["b0"] + p["b_N"] * n + p["b_D"] * d,
        "ell": p["g0"] + p["g_N"] * n + p["g_D"] * d,
        "log_c_lr": p["c_lr0"] + p["c_lr_N"] * n + p["c_lr_D"] * d,
        "log_c_b": p["c_b0"] + p["c_b_N"] * n + p["c_b_D"] * d,
    }


def _chol2(a, b, c):
    """Lower Cholesky factor [[l11, 0], [l21, l22]] of the 2 x 2 matrix [[a, b], [b, c]] (elementwise: no LAPACK
    call per gradient)."""
    l11 = jnp.sqrt(a)
    l21 = b / l11
    return l11, l21, jnp.sqrt(c - l21 * l21)


def size_basis(n) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X = [1, n] = Q R for M model sizes at scaled log N `n`: (Q (M, r), R (r, 2), Q_perp (M, M - r)), r = min(M,
    2); Q spans the levels' least-squares line, Q_perp their residuals about it. `n` is data (numpy): computed
    once, outside the traced program."""
    n = np.asarray(n, float)
    Qf, R = np.linalg.qr(np.stack([np.ones_like(n), n], axis=-1), mode="complete")
    r = min(len(n), 2)
    return Qf[:, :r], R[:r], Qf[:, r:]


def size_line_scale(R, s0, sN, tau):
    """Lower Cholesky factor of tau^2 I + R P R^T, P = diag(s0^2, sN^2): the covariance of the sizes' levels along
    the law's directions, Q^T A, when A = X beta + tau e with beta ~ N(0, P), e ~ N(0, I)."""
    # Python floats: a NumPy float64 here would turn the whole float32 potential into float64
    B = lambda i, j: float(R[i, 0] * R[j, 0]) * s0 ** 2 + float(R[i, 1] * R[j, 1]) * sN ** 2  # noqa: E731
    t2 = tau * tau
    if R.shape[0] == 1:
        return jnp.sqrt(t2 + B(0, 0)).reshape(1, 1)
    l11, l21, l22 = _chol2(t2 + B(0, 0), B(0, 1), t2 + B(1, 1))
    return jnp.stack([jnp.stack([l11, 0.0 * l11]), jnp.stack([l21, l22])])


def law_given_levels(A, std, n, s0, sN, tau):
    """(intercept, slope) of the law given the levels A: N(b, tau^2 G^-1) with G = X^T X + tau^2 P^-1 and b = G^-1
    X^T A (the ridge regression of A on X), at standard normal `std` (2,). The data see the levels only, so this is
    the law's exact conditional posterior."""
    n = np.asarray(n, float)
    t2 = tau * tau
    g11, g12, g22 = len(n) + t2 / s0 ** 2, float(n.sum()), float(n @ n) + t2 / sN ** 2
    det = g11 * g22 - g12 * g12
    y1, y2 = jnp.sum(A, -1), A @ np.asarray(n, jnp.result_type(A))  # NumPy: no operation of its own to compile
    b1, b2 = (g22 * y1 - g12 * y2) / det, (g11 * y2 - g12 * y1) / det
    l11, l21, l22 = _chol2(g22 / det, -g12 / det, g11 / det)  # chol of G^-1
    return jnp.stack([b1 + tau * l11 * std[0], b2 + tau * (l21 * std[0] + l22 * std[1])], axis=-1)


def size_offsets(p: dict[str, Any], n_s, size_s=None) -> dict[str, Any]:
    """Each setting's model size's level off the law (log eta*, log B*, log L*), shape (..., S); 0 without size
    scatter (no ``lr_size`` in `p`). `size_s`: each setting's size (the data's ``size_s``)."""
    if "lr_size" not in p:
        return {k: 0.0 for k in NEW_SETTING}
    if size_s is None:
        raise ModelError("a fit with size scatter needs each setting's size (the data's 'size_s')")
    return {k: p[f"{v}_size"][..., size_s] - (p[LAW_N[v][0]] + p[LAW_N[v][1]] * n_s) for k, v in NEW_SETTING.items()}


def setting_values(p: dict[str, Any], n_s, d_s, size_s=None) -> dict[str, Any]:
    """Each fitted setting's optimum, loss level and valley shape, shape (..., S)."""
    law = laws(p, n_s, d_s)
    off = size_offsets(p, n_s, size_s)
    return {"x_star": law["x_star"] + off["x_star"] + p["tau_lr"] * p["eps_lr"],
            "z_star": law["z_star"] + off["z_star"] + p["tau_b"] * p["eps_b"],
            "ell": p["ell"], "log_c_lr": law["log_c_lr"], "log_c_b": law["log_c_b"],
            "kappa1": p["kappa1"] + 0.0 * p["ell"]}


def surface_terms(p: dict[str, Any], n_s, d_s, s, x, z, size_s=None):
    """The surface at runs (x, z) of settings ``s``: (mean log loss - m_y, excess over the optimum).

    Parameters
    ----------
    p : parameters: the scalars, and the per-setting ones (`SETTING`) of shape (..., S); scalars may carry
        leading batch dims (e.g. (n_draws, 1)) that broadcast against the inputs.
    n_s, d_s : scaled log N and log D of each setting, shape (S,).
    size_s : each setting's model size (needed with size scatter).
    s : setting index of each run (int array).
    x, z : log LR - m_lr and log batch - m_B of each run.
    """
    v = {name: a[..., s] for name, a in setting_values(p, n_s, d_s, size_s).items()}
    return surface_at(p, v, x, z)


def surface_at(p, v, x, z):
    """(mean log loss - m_y, excess) at (x, z) for per-point setting values `v` (see `setting_values`)."""
    dz = z - v["z_star"]
    u = x - (v["x_star"] + v["kappa1"] * dz + 0.5 * p["kappa2"] * dz * dz)
    excess = (_valley(u, v["log_c_lr"], p["delta_lr"], _P_MIN + _P_SPAN * p["p_lr_unit"])
              + _valley(dz, v["log_c_b"], p["delta_b"], _P_MIN + _P_SPAN * p["p_b_unit"]))
    return v["ell"] + excess, excess


def require_lr_and_batch(df: pd.DataFrame, source: str, who: str) -> None:
    """A `ModelError` naming the first run without a finite ``lr`` or ``batch_tokens``."""
    for col in ("lr", "batch_tokens"):
        bad = np.flatnonzero(~np.isfinite(df[col].to_numpy(float)))
        if len(bad):
            raise ModelError(f"{source}: {who} needs {col!r} on every run; {len(bad)} run(s) lack it "
                             f"(first: run {df['run_id'].iloc[bad[0]]!r})")


def settings_of(df: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Index of each run's setting (N, D and ``group`` when the table has one) and the settings table."""
    keys = ["N", "D"] + (["group"] if "group" in df.columns and df["group"].notna().any() else [])
    key_df = df[keys].copy()
    if "group" in keys:
        key_df["group"] = key_df["group"].astype(str)
    codes = key_df.groupby(keys, sort=True).ngroup().to_numpy()
    settings = key_df.assign(_s=codes).drop_duplicates("_s").sort_values("_s").drop(columns="_s")
    return codes, settings.reset_index(drop=True)


def sizes_of(settings: pd.DataFrame) -> np.ndarray:
    """Index of each setting's model size: its distinct N (one architecture per N, as in Step Law's grids)."""
    return settings.groupby("N", sort=True).ngroup().to_numpy()


@dataclasses.dataclass(frozen=True)
class Surface(Model):
    """The hierarchical loss surface over (N, D, LR, batch); see the module docstring for the math.

    Parameters
    ----------
    divergence_ratio : a finite loss above this multiple of its setting's best converged loss counts as a
        diverged (censored) run; Step Law's blown-up runs sit at 1.7-3x, its converged ones below 1.21x.
    n_kind : ``"total"`` or ``"active"``: for MoE tables with both ``N_total`` and ``N_active``, which one is N
        (None: the table's ``N`` as loaded, see ``load_runs(n_kind=...)``).
    size_scatter : each model size (distinct N) sits off the laws by its own level, so a prediction at a new N
        carries that scatter (module docstring, "Size scatter"). None (default): on when the table has two or
        more sizes; with one, the N exponents are the prior's and the size's scatter would add little to a new
        N's interval, while the fit samples more parameters and diverges more often (on Step Law's smallest
        size, 185 of 4,000 transitions against 48).
    """

    divergence_ratio: float = DIVERGENCE_RATIO
    n_kind: str | None = None
    size_scatter: bool | None = None

    name = "surface"
    version = "1"
    table_kind = "runs"
    required_columns = ("N", "D", "loss", "lr", "batch_tokens")
    #: every input is a centered log and every sampled parameter O(1) (its posterior sd, in NUTS's scaled
    #: coordinates, too), so float32 loses nothing NUTS can see: on Step Law's 1,911 runs (4 x (1,000 +
    #: 1,000)) each scalar's posterior mean moved by at most 0.04 posterior sds against float64 (the Monte
    #: Carlo error at ESS ~1,000 is 0.03), min bulk ESS 946 against 952, and NUTS took 13 s against 25 s
    potential_dtype = "float32"
    predicts = {"lr_opt": "peak learning rate", "batch_opt": "tokens", "loss_opt": "nats/token",
                "lr_opt_at_batch": "peak learning rate", "loss": "nats/token"}
    targets = ("N", "D", "lr", "batch")
    observed = ("log_loss", "diverged_obs")
    dims = {**{k: ["setting"] for k in SETTING}, **{k: ["size"] for k in SIZE},
            **{f"{v}_size_line": ["law_dir"] for v in LAW_N}, **{f"{v}_size_resid": ["size_resid"] for v in LAW_N},
            **{f"{v}_law_std": ["law_coef"] for v in LAW_N}}

    def __post_init__(self):
        if not (np.isfinite(self.divergence_ratio) and self.divergence_ratio > 1):
            raise ModelError(f"divergence_ratio must be a number above 1, got {self.divergence_ratio!r}")
        if self.n_kind not in (None, "total", "active"):
            raise ModelError(f"n_kind must be 'total' or 'active', got {self.n_kind!r}")
        if self.size_scatter is not None and not isinstance(self.size_scatter, bool):
            raise ModelError(f"size_scatter must be True, False or None (on with two or more model sizes), got "
                             f"{self.size_scatter!r}")

    def with_options(self, **options: Any) -> Surface:
        unknown = set(options) - {"divergence_ratio", "n_kind", "size_scatter"}
        if unknown:
            raise ModelError("model 'surface' takes options divergence_ratio, n_kind, size_scatter; not "
                             + ", ".join(sorted(unknown)))
        return dataclasses.replace(self, **options)

    # ---- data -------------------------------------------------------------------------------------------
    def prepare(self, runs: RunTable) -> tuple[Arrays, dict[str, float]]:
        self.check(runs)
        df = runs.df.reset_index(drop=True)
        if self.n_kind is not None:
            col = {"total": "N_total", "active": "N_active"}[self.n_kind]
            if col not in df.columns or df[col].isna().any():
                raise ModelError(f"{runs.source}: n_kind={self.n_kind!r} needs column {col!r} on every run")
            df = df.assign(N=df[col])
        require_lr_and_batch(df, runs.source, "the surface model")
        s_idx, settings = settings_of(df)
        size_s = sizes_of(settings)
        loss = df["loss"].to_numpy(float)
        diverged = self.diverged_mask(df, s_idx)
        if diverged.all():
            raise ModelError(f"{runs.source}: every run diverged; the surface needs converged runs")
        log_lr, log_b = np.log(df["lr"].to_numpy(float)), np.log(df["batch_tokens"].to_numpy(float))
        log_N, log_D = np.log(settings["N"].to_numpy(float)), np.log(settings["D"].to_numpy(float))
        m_N, h_N = _mid_half(log_N)
        m_D, h_D = _mid_half(log_D)
        m_lr, _ = _mid_half(log_lr)
        m_b, _ = _mid_half(log_b)
        level = censor_levels(loss, diverged, s_idx, log_lr, log_b)
        best = _best_per_setting(loss, diverged, s_idx, len(settings))
        m_y = float(np.median(np.log(best[np.isfinite(best)])))
        ok, cens = ~diverged, diverged
        data = {
            "n_s": (log_N - m_N) / h_N, "d_s": (log_D - m_D) / h_D, "size_s": size_s.astype(np.int32),
            "n_size": (np.unique(log_N) - m_N) / h_N,
            "s_obs": s_idx[ok].astype(np.int32),
            "x_obs": log_lr[ok] - m_lr, "z_obs": log_b[ok] - m_b, "log_loss": np.log(loss[ok]) - m_y,
            "s_cens": s_idx[cens].astype(np.int32),
            "x_cens": log_lr[cens] - m_lr, "z_cens": log_b[cens] - m_b,
            "log_level": np.log(level[cens]) - m_y, "diverged_obs": np.ones(int(cens.sum()), dtype=np.int32),
        }
        n_flagged = int((df["diverged"].to_numpy(bool) | ~np.isfinite(loss)).sum())
        constants = {
            "m_N": m_N, "h_N": h_N, "m_D": m_D, "h_D": h_D, "m_lr": m_lr, "m_b": m_b, "m_y": m_y,
            "max_N": float(np.exp(log_N.max())), "max_D": float(np.exp(log_D.max())),
            "min_N": float(np.exp(log_N.min())), "min_D": float(np.exp(log_D.min())),
            "min_lr": float(np.exp(log_lr.min())), "max_lr": float(np.exp(log_lr.max())),
            "min_batch": float(np.exp(log_b.min())), "max_batch": float(np.exp(log_b.max())),
            "n_settings": float(len(settings)), "n_sizes": float(size_s.max() + 1), "n_censored": float(cens.sum()),
            "size_scatter": float(self.size_scatter if self.size_scatter is not None else size_s.max() >= 1),
            **{f"size_N_{m}": float(v) for m, v in enumerate(np.exp(np.unique(log_N)))},
            "n_censored_by_ratio": float(cens.sum() - n_flagged), "divergence_ratio": self.divergence_ratio,
            "n_kind_active": float(self.n_kind == "active"),
        }
        return data, constants

    def diverged_mask(self, df: pd.DataFrame, s_idx: np.ndarray) -> np.ndarray:
        """Runs treated as diverged: flagged, non-finite loss, or loss > divergence_ratio x setting best."""
        loss = df["loss"].to_numpy(float)
        flagged = df["diverged"].to_numpy(bool) | ~np.isfinite(loss)
        best = _best_per_setting(loss, flagged, s_idx, int(s_idx.max()) + 1)
        return flagged | (loss > self.divergence_ratio * best[s_idx])

    def coords(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        out = {"setting": np.arange(len(data["n_s"]))}
        if constants["size_scatter"]:
            M = len(data["n_size"])
            out.update(size=np.arange(M), law_coef=["intercept", "N"], law_dir=np.arange(min(M, 2)),
                       size_resid=np.arange(max(M - 2, 0)))
        return out

    # ---- the NumPyro model ---------------------------------------------------------------------------------
    def model(self, n_s, d_s, size_s, n_size, s_obs, x_obs, z_obs, log_loss=None, s_cens=None, x_cens=None, z_cens=None,
              log_level=None, diverged_obs=None, h_N=1.0, h_D=1.0, size_scatter=False):
        S = n_s.shape[0]
        p: dict[str, Any] = {}
        if not size_scatter:  # the laws' intercepts and N slopes are sampled; with size scatter, generated below
            for k in ("a0", "b0"):
                p[k] = numpyro.sample(k, dist.Normal(0.0, LAW_N["lr"][2]))
        for k, h in (("a_N", h_N), ("a_D", h_D), ("b_N", h_N), ("b_D", h_D)):
            if size_scatter and k in ("a_N", "b_N"):
                continue
            p[k] = numpyro.sample(k, dist.Normal(0.0, h))
        p["kappa1"] = numpyro.sample("kappa1", dist.Normal(0.5, 0.5))
        p["kappa2"] = numpyro.sample("kappa2", dist.Normal(0.0, 0.5))
        if not size_scatter:
            p["g0"] = numpyro.sample("g0", dist.Normal(0.0, LAW_N["loss"][2]))
            p["g_N"] = numpyro.sample("g_N", dist.Normal(0.0, LAW_N["loss"][3] * h_N))
        p["g_D"] = numpyro.sample("g_D", dist.Normal(0.0, 0.3 * h_D))
        for v in ("lr", "b"):
            p[f"c_{v}0"] = numpyro.sample(f"c_{v}0", dist.Normal(-4.0, 1.5))
            p[f"c_{v}_N"] = numpyro.sample(f"c_{v}_N", dist.Normal(0.0, h_N))
            p[f"c_{v}_D"] = numpyro.sample(f"c_{v}_D", dist.Normal(0.0, h_D))
            p[f"delta_{v}"] = numpyro.sample(f"delta_{v}", dist.Normal(0.0, 1.0))
            p[f"p_{v}_unit"] = numpyro.sample(f"p_{v}_unit", dist.Beta(3.0, 3.0))
        p["tau_lr"] = numpyro.sample("tau_lr", dist.HalfNormal(0.3))
        p["tau_b"] = numpyro.sample("tau_b", dist.HalfNormal(0.3))
        tau_loss = numpyro.sample("tau_loss", dist.HalfNormal(0.02))
        if size_scatter:
            Q, R, Q_perp = size_basis(n_size)
            # in the potential's float type: NumPy's float64 would carry every setting's and run's terms with it
            # (cast by NumPy: a JAX cast of a constant is an operation that JAX compiles on its own, every trace)
            ft = jnp.result_type(tau_loss)
            Q, Q_perp = (np.asarray(a, ft) for a in (Q, Q_perp))
            k = Q_perp.shape[1]  # the sizes' residual directions about their least-squares line: M - 2
            for v, (alpha, beta) in SIZE_PRIOR.items():
                k0, kN, s0, sN = LAW_N[v]
                # the residuals, tau integrated out: N(0, tau^2 I) under tau^2 ~ InvGamma(alpha, beta)
                r = numpyro.sample(f"{v}_size_resid", IsotropicStudentT(
                    2.0 * alpha, k, float(np.sqrt(beta / alpha)))) if k else np.zeros(0, ft)
                # tau from its exact conditional given them
                u = numpyro.sample(f"{v}_size_u", dist.Gamma(alpha + 0.5 * k, 1.0))
                tau = p[f"tau_{v}_size"] = numpyro.deterministic(f"tau_{v}_size", jnp.sqrt((beta + 0.5 * r @ r) / u))
                # the levels along the law's directions, centered (the data pin them)
                line = numpyro.sample(f"{v}_size_line", SmallNormal(
                    np.zeros(Q.shape[1], ft), scale_tril=size_line_scale(R, s0, sN * h_N, tau)))
                A = p[f"{v}_size"] = numpyro.deterministic(f"{v}_size", Q @ line + Q_perp @ r)
                law_std = numpyro.sample(f"{v}_law_std", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
                law = law_given_levels(A, law_std, n_size, s0, sN * h_N, tau)
                p[k0] = numpyro.deterministic(k0, law[0])
                p[kN] = numpyro.deterministic(kN, law[1])
        sigma0 = numpyro.sample("sigma0", dist.HalfNormal(0.02))
        sigma1 = numpyro.sample("sigma1", dist.HalfNormal(0.5))
        nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
        loss_law = laws(p, n_s, d_s)["ell"] + size_offsets(p, n_s, size_s)["ell"]
        with numpyro.plate("setting", S):
            # non-centered offsets of the optimum (a setting's runs pin tau * eps, not eps); the loss level is
            # centered: every setting's runs pin it to ~1e-4, far tighter than the law's scatter tau_loss
            p["eps_lr"] = numpyro.sample("eps_lr", dist.Normal(0.0, 1.0))
            p["eps_b"] = numpyro.sample("eps_b", dist.Normal(0.0, 1.0))
            p["ell"] = numpyro.sample("ell", dist.Normal(loss_law, tau_loss))
        mu, excess = surface_terms(p, n_s, d_s, s_obs, x_obs, z_obs, size_s)
        with numpyro.plate("run", x_obs.shape[0]):
            numpyro.sample("obs", dist.StudentT(nu, mu, sigma0 + sigma1 * excess), obs=log_loss)
        if x_cens is not None and x_cens.shape[0] > 0:
            mu_c, excess_c = surface_terms(p, n_s, d_s, s_cens, x_cens, z_cens, size_s)
            z = (mu_c - log_level) / (sigma0 + sigma1 * excess_c)
            with numpyro.plate("diverged_run", x_cens.shape[0]):
                numpyro.sample("obs_censored", Exceeds(z), obs=diverged_obs)

    def model_kwargs(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        # the sizes' scaled log N as a tuple: static, so the law's QR is computed once when the program is built
        return {**data, "h_N": constants["h_N"], "h_D": constants["h_D"],
                "size_scatter": bool(constants["size_scatter"]),
                "n_size": tuple(float(v) for v in data["n_size"])}

    def init_values(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        """Per-setting best runs regressed on (n, d): rough laws for eta*, B*, L*; offsets from the residuals."""
        S = len(data["n_s"])
        s, x, z, y = data["s_obs"], data["x_obs"], data["z_obs"], data["log_loss"]
        best = np.array([np.flatnonzero(s == k)[np.argmin(y[s == k])] if np.any(s == k) else -1 for k in range(S)])
        have = best >= 0
        X = np.column_stack([np.ones(S), data["n_s"], data["d_s"]])[have]
        out: dict[str, Any] = {}
        for target, (c0, cN, cD), tau, eps in ((x, ("a0", "a_N", "a_D"), 0.3, "eps_lr"),
                                               (z, ("b0", "b_N", "b_D"), 0.3, "eps_b"),
                                               (y, ("g0", "g_N", "g_D"), 1.0, "ell")):
            coef, *_ = np.linalg.lstsq(X, target[best[have]], rcond=None)
            coef = np.where(np.isfinite(coef), coef, 0.0)
            out.update({c0: coef[0], cN: coef[1], cD: coef[2]})
            resid = np.zeros(S)
            resid[have] = target[best[have]] - X @ coef
            out[eps] = np.clip(resid / tau, -2.5, 2.5)
        out["ell"] = out["ell"] + np.column_stack([np.ones(S), data["n_s"], data["d_s"]]) @ [
            out["g0"], out["g_N"], out["g_D"]]
        if constants["size_scatter"]:  # each size on the regressed law (no residuals), u at its mean
            Q, _, Q_perp = size_basis(data["n_size"])
            k = Q_perp.shape[1]
            for v, (k0, kN, _, _) in LAW_N.items():
                if k:
                    out[f"{v}_size_resid"] = np.zeros(k)
                out[f"{v}_size_u"] = SIZE_PRIOR[v][0] + 0.5 * k
                out[f"{v}_size_line"] = Q.T @ (out.pop(k0) + out.pop(kN) * data["n_size"])
                out[f"{v}_law_std"] = np.zeros(2)  # the law then at its conditional mean (not a sampled site)
        out.update({"tau_lr": 0.3, "tau_b": 0.3, "tau_loss": 0.01, "kappa1": 0.5, "kappa2": 0.0,
                    "c_lr0": -4.0, "c_lr_N": 0.0, "c_lr_D": 0.0, "delta_lr": 0.5, "p_lr_unit": 0.33,
                    "c_b0": -4.0, "c_b_N": 0.0, "c_b_D": 0.0, "delta_b": 0.0, "p_b_unit": 0.33,
                    "sigma0": 0.003, "sigma1": 0.2, "nu": 5.0})
        return {k: np.asarray(v, dtype=float) for k, v in out.items()}

    # ---- natural-scale parameters ----------------------------------------------------------------------------
    def derived(self, draws: Arrays, c: dict[str, float]) -> Arrays:
        """Natural exponents and prefactors of the three laws: eta* = lr_opt_coef N^lr_opt_exp_N D^lr_opt_exp_D
        (at B*), B* (tokens) and L* (nats/token) likewise; the valley exponents and curvature ratios."""
        out = {}
        for law, (k0, kN, kD), m in (("lr_opt", ("a0", "a_N", "a_D"), c["m_lr"]),
                                     ("batch_opt", ("b0", "b_N", "b_D"), c["m_b"]),
                                     ("loss_opt", ("g0", "g_N", "g_D"), c["m_y"])):
            eN, eD = draws[kN] / c["h_N"], draws[kD] / c["h_D"]
            out[f"{law}_exp_N"], out[f"{law}_exp_D"] = eN, eD
            out[f"{law}_log_coef"] = m + draws[k0] - eN * c["m_N"] - eD * c["m_D"]
        out["p_lr"] = _P_MIN + _P_SPAN * draws["p_lr_unit"]
        out["p_b"] = _P_MIN + _P_SPAN * draws["p_b_unit"]
        out["lr_curvature_ratio"] = np.exp(2 * draws["delta_lr"])
        out["batch_curvature_ratio"] = np.exp(2 * draws["delta_b"])
        return out

    # ---- predictions -----------------------------------------------------------------------------------------
    def predict(self, draws: Arrays, constants: dict[str, float], N=None, D=None, lr=None, batch=None,
                seed: int = 0) -> Arrays:
        """Posterior draws at targets, for a new setting (its own offsets drawn from the population).

        With size scatter, a target N within 0.5% of a fitted model size's N is that size: the new setting sits
        around the size's fitted level (a longer run of a model you trained); any other N is a new size, which
        draws its own level around the laws.

        Parameters
        ----------
        draws : posterior draws (flattened over chains).
        constants : the fit's centering constants.
        N, D : target non-embedding parameters (as fitted: total or active for MoE) and training tokens.
        lr : a proposed peak learning rate: adds ``loss`` there (at ``batch`` if given, else at each draw's B*).
        batch : a batch in tokens: adds ``lr_opt_at_batch`` (the best LR at that batch) and, with ``lr``,
            ``loss``.
        seed : for the new setting's offsets (fixed, so repeated calls agree). With a single draw (a point
            estimate: ``method="map"``) the offsets are 0, so the answer is the laws' value at that point.

        Returns
        -------
        dict with arrays (n_draws, *broadcast target shape): ``lr_opt`` (optimal peak LR at ``batch_opt``),
        ``batch_opt`` (the loss-optimal batch at fixed (N, D), tokens), ``loss_opt`` (nats/token at that joint
        optimum), and as asked ``lr_opt_at_batch``, ``loss``.
        """
        if N is None or D is None:
            raise ModelError("the surface model predicts at a target N and D (both needed)")
        arrays = [np.asarray(v, float) for v in (N, D, lr, batch) if v is not None]
        for v in arrays:
            if not np.all(np.isfinite(v) & (v > 0)):
                raise ModelError("targets N, D, lr and batch must be positive finite numbers")
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        n_draws = len(draws["a0"])
        eps = np.random.default_rng(seed).standard_normal((2, len(NEW_SETTING), n_draws))
        if n_draws == 1:  # a point estimate (method=map): the laws' value there, not one random new setting's
            eps[:] = 0.0
        # big grids (over 4M draw x target values) in float32: relative error ~1e-7, far below any interval's
        # width, and half the memory traffic (a 100 x 100 grid from 4,000 draws: 1.4 s -> 0.8 s on 2 busy cores)
        ft = np.float32 if n_draws * int(np.prod(shape)) > 2**22 else np.float64
        p = {k: np.asarray(draws[k], ft) for k in SCALARS}
        eps = eps.astype(ft)
        c = {k: float(constants[k]) for k in ("m_N", "h_N", "m_D", "h_D", "m_lr", "m_b", "m_y")}
        log = lambda v: None if v is None else np.log(np.broadcast_to(np.asarray(v, float), shape)).astype(ft)  # noqa: E731
        size = None  # without size scatter, `_predict_core` skips the size term
        if "tau_lr_size" in draws:
            size = self._size_terms(draws, constants, np.broadcast_to(np.asarray(N, float), shape), eps[1], ft)
        out = _predict_core(p, eps[0], c, log(N), log(D), log(lr), log(batch), size)
        return {k: np.asarray(v) for k, v in out.items()}

    @staticmethod
    def _size_terms(draws: Arrays, constants: dict[str, float], N: np.ndarray, eps: np.ndarray, ft):
        """The size term of x*, z*, ell at each target: offsets (3, n_draws, M + 1), the M fitted sizes' levels off
        the law and then a new size's tau_size * eps, and each target's column of them (ints of N's shape)."""
        log_Nm = _fitted_log_N(constants)
        M = len(log_Nm)
        # the fitted sizes' levels off the law, as the model computes them for its settings
        q = {k: np.asarray(draws[k], float)[:, None] for v in LAW_N.values() for k in v[:2]}
        q.update({k: np.asarray(draws[k], float) for k in SIZE})
        fitted = size_offsets(q, (log_Nm - constants["m_N"]) / constants["h_N"], np.arange(M))
        off = [np.concatenate([fitted[k], (np.asarray(draws[f"tau_{v}_size"], float) * eps[i])[:, None]], axis=1)
               for i, (k, v) in enumerate(NEW_SETTING.items())]
        return np.stack(off).astype(ft), _fitted_size(log_Nm, N)

    def extrapolation(self, constants: dict[str, float], N=None, D=None, lr=None, batch=None) -> dict[str, Any]:
        """Target N and D over the largest fitted (N_ratio, D_ratio > 1: beyond the data); with size scatter also
        ``fitted_size``: 1 where the target N is a fitted model size's (its level is used), 0 for a new size."""
        out = super().extrapolation(constants, N=N, D=D)
        if constants.get("size_scatter") and N is not None:
            log_Nm = _fitted_log_N(constants)
            out["fitted_size"] = (_fitted_size(log_Nm, np.asarray(N, float)) < len(log_Nm)).astype(float)
        return out

    def predict_warnings(self, constants: dict[str, float], N=None, **targets: Any) -> list[str]:
        """Without size scatter, a target N that is not a fitted size's: its intervals leave out how far a new
        size sits off the law in N (measured on Step Law: 8 of 13 held-out sizes' best LRs inside the 90%
        intervals; 12 of 13 with size scatter, benchmarks/steplaw_lr.py)."""
        if constants.get("size_scatter") or N is None or constants.get("min_N") == constants.get("max_N"):
            return []  # (one fitted N: `fit_warnings` already says that N is the prior's)
        N = np.asarray(N, float)
        log_Nm = _fitted_log_N(constants)
        new = np.unique(N[_fitted_size(log_Nm, N) == len(log_Nm)])
        if not new.size:
            return []
        which = f"N = {new[0]:.3g}" + (f" and {new.size - 1} other N" if new.size > 1 else "")
        return [f"{which}: not a fitted model size. This fit takes every size to sit on the power law in N, so "
                "its intervals there leave out how far a new size sits off it (on Step Law, held-out sizes' best "
                "LR fell inside 8 of 13 such 90% intervals, 12 of 13 with size scatter); refit with "
                "--size-scatter (Python: size_scatter=True) for intervals that carry it"]

    def fit_warnings(self, fit) -> list[str]:
        out = []
        if fit.method == "laplace":
            # measured on Step Law: at the joint mode the Gaussian put tau_lr 19 of its sds from the posterior
            # mean, and its covariance was off by factors 0.003-500 (see scalinfer.inference.fit._preconditioner)
            out.append("method=laplace on this hierarchical model: the Gaussian at the joint mode misplaces the "
                       "settings' scatter (tau_lr, tau_b) and so the width of predictions at a new setting; "
                       "use it for a first look only, and nuts for intervals")
        c = fit.constants
        k = int(c.get("n_censored_by_ratio", 0))
        if k:
            out.append(f"{k} run(s) with a finite loss above {c['divergence_ratio']:g}x their setting's best were "
                       "treated as diverged (censored), not as losses (option divergence_ratio)")
        if c.get("min_N") == c.get("max_N"):
            out.append("every run has the same N: the N exponents are the prior's, predictions at another N are "
                       "not informed by the data")
        if c.get("min_D") == c.get("max_D"):
            out.append("every run has the same D: the D exponents are the prior's, predictions at another D are "
                       "not informed by the data")
        return out

    # ---- simulation -----------------------------------------------------------------------------------------
    def true_params(self) -> dict[str, float]:
        """A Step-Law-like truth (rounded posterior medians of this model on Step Law's dense runs)."""
        return dict(TRUE_PARAMS)

    def default_design(self, seed: int = 0) -> pd.DataFrame:
        """A Step-Law-shaped grid: 4 model sizes x 3 token budgets (12 settings), LRs 2^-12..2^-6 by sqrt 2
        (13) x 7 batch sizes 64K-4M tokens: 1,092 runs."""
        Ns = np.array([2.1e8, 2.7e8, 4.3e8, 5.4e8])
        rows = [(n, n * tpp) for n in Ns for tpp in (20.0, 50.0, 100.0)]
        lrs = 2.0 ** (np.arange(-24, -11) / 2)
        batches = 2.0 ** np.arange(16, 23)
        g = [(n, d, lr, b) for n, d in rows for lr in lrs for b in batches]
        return pd.DataFrame(g, columns=["N", "D", "lr", "batch_tokens"])

    def simulate(self, params: dict[str, float], design: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
        """Losses on the design's (N, D, lr, batch_tokens) from the surface at natural-scale `params`.

        Each setting draws its offsets from the population (``tau_*``); log losses get Student-t noise of scale
        sigma0 + sigma1 * excess; a run whose LR lies more than ``diverge_above`` (log units) above the optimal
        LR at its batch diverges (loss NaN, ``diverged`` true). The drawn optimum of each setting is kept in
        the columns ``true_lr_opt``, ``true_batch_opt``, ``true_loss_opt``.
        """
        rng = np.random.default_rng(seed)
        df = design.reset_index(drop=True).copy()
        s_idx, settings = settings_of(df)
        size_s = sizes_of(settings)
        S = len(settings)
        q = {**TRUE_PARAMS, **params}
        logN, logD = np.log(settings["N"].to_numpy(float)), np.log(settings["D"].to_numpy(float))
        eps = rng.standard_normal((len(NEW_SETTING), S))
        # the sizes' offsets from a stream of their own: without size scatter the draws are the same as before it
        eps_size = np.random.default_rng([seed, 7]).standard_normal((len(NEW_SETTING), int(size_s.max()) + 1))
        eps_size = eps_size[:, size_s]
        law = _natural_laws(q, logN, logD)
        v = {k: law[k] + q[f"tau_{t}"] * eps[i] + q[f"tau_{t}_size"] * eps_size[i]
             for i, (k, t) in enumerate(NEW_SETTING.items())}
        v.update(log_c_lr=law["log_c_lr"], log_c_b=law["log_c_b"], kappa1=np.full(S, q["kappa1"]))
        shape = {"kappa2": q["kappa2"], "delta_lr": q["delta_lr"], "delta_b": q["delta_b"],
                 "p_lr_unit": (q["p_lr"] - _P_MIN) / _P_SPAN, "p_b_unit": (q["p_b"] - _P_MIN) / _P_SPAN}
        x, z = np.log(df["lr"].to_numpy(float)), np.log(df["batch_tokens"].to_numpy(float))
        at = {k: a[s_idx] for k, a in v.items()}
        mu, excess = (np.asarray(a) for a in surface_at(shape, at, x, z))
        scale = q["sigma0"] + q["sigma1"] * excess
        y = mu + scale * rng.standard_t(q["nu"], size=len(df))
        dz = z - v["z_star"][s_idx]
        ridge = at["x_star"] + at["kappa1"] * dz + 0.5 * q["kappa2"] * dz * dz
        diverged = (x - ridge) > q["diverge_above"]
        loss = np.where(diverged, np.nan, np.exp(y))
        return df.assign(loss=loss, diverged=diverged, true_lr_opt=np.exp(v["x_star"])[s_idx],
                         true_batch_opt=np.exp(v["z_star"])[s_idx], true_loss_opt=np.exp(v["ell"])[s_idx])


def _fitted_log_N(constants: dict[str, float]) -> np.ndarray:
    """log N of each fitted model size (none for fits saved before they were kept: every target a new size)."""
    M = int(constants["n_sizes"]) if "size_N_0" in constants else 0
    return np.log([constants[f"size_N_{m}"] for m in range(M)])


def _fitted_size(log_Nm: np.ndarray, N: np.ndarray) -> np.ndarray:
    """Index of the fitted size each target N is (within 0.5%), else len(log_Nm) (a new size); N's shape."""
    M = len(log_Nm)
    if not M:  # every target is a new size: the only column
        return np.full(np.shape(N), M, dtype=np.int32)
    dist_m = np.abs(np.log(N)[..., None] - log_Nm)
    return np.where(np.min(dist_m, -1) < np.log(1.005), np.argmin(dist_m, -1), M).astype(np.int32)


def _mid_half(v: np.ndarray) -> tuple[float, float]:
    """Middle and half-range of `v`; half-range 1 when `v` has no spread (the slope is then the prior's)."""
    lo, hi = float(np.min(v)), float(np.max(v))
    half = 0.5 * (hi - lo)
    return 0.5 * (lo + hi), (half if half > 1e-9 else 1.0)


def _best_per_setting(loss, diverged, s_idx, S) -> np.ndarray:
    best = np.full(S, np.inf)
    ok = ~diverged & np.isfinite(loss)
    np.minimum.at(best, s_idx[ok], loss[ok])
    return best


def censor_levels(loss, diverged, s_idx, log_lr, log_b) -> np.ndarray:
    """Censoring level (nats/token) of each diverged run: the loss of the highest-LR converged run below it at
    the same setting and batch, else the setting's best converged loss, else the best converged loss of all."""
    ok = ~diverged & np.isfinite(loss)
    best = _best_per_setting(loss, diverged, s_idx, int(s_idx.max()) + 1)
    overall = float(np.min(loss[ok]))
    level = np.full(len(loss), np.nan)
    for i in np.flatnonzero(diverged):
        same = ok & (s_idx == s_idx[i]) & np.isclose(log_b, log_b[i]) & (log_lr < log_lr[i])
        if same.any():
            j = np.flatnonzero(same)[np.argmax(log_lr[same])]
            level[i] = loss[j]
        else:
            level[i] = best[s_idx[i]] if np.isfinite(best[s_idx[i]]) else overall
    return level


#: per-setting quantities a new setting draws around the laws: name -> its tau (``tau_<name>``)
NEW_SETTING = {"x_star": "lr", "z_star": "b", "ell": "loss"}


def _natural_laws(q, logN, logD):
    """The population laws on the natural scale at (log N, log D), from `TRUE_PARAMS`-style parameters."""
    dN, dD = logN - q["ref_logN"], logD - q["ref_logD"]
    return {
        "x_star": q["lr_opt_log_coef"] + q["lr_opt_exp_N"] * logN + q["lr_opt_exp_D"] * logD,
        "z_star": q["batch_opt_log_coef"] + q["batch_opt_exp_N"] * logN + q["batch_opt_exp_D"] * logD,
        "ell": q["loss_opt_log_coef"] + q["loss_opt_exp_N"] * logN + q["loss_opt_exp_D"] * logD,
        "log_c_lr": q["log_c_lr"] + q["c_lr_exp_N"] * dN + q["c_lr_exp_D"] * dD,
        "log_c_b": q["log_c_b"] + q["c_b_exp_N"] * dN + q["c_b_exp_D"] * dD,
    }


@jax.jit
def _predict_core(p, eps, c, log_N, log_D, log_lr, log_b, size=None):
    """Every draw x every target point in one fused computation (no Python loop over the grid). `size`: with
    size scatter, (offsets, column) from `Surface._size_terms`."""
    ex = (-1,) + (1,) * log_N.ndim
    q = {k: v.reshape(ex) for k, v in p.items()}
    law = laws(q, (log_N - c["m_N"]) / c["h_N"], (log_D - c["m_D"]) / c["h_D"])
    # a new setting: its own offsets at each level
    v = {k: law[k] + q[f"tau_{t}"] * eps[i].reshape(ex) for i, (k, t) in enumerate(NEW_SETTING.items())}
    if size is not None:  # of a fitted size (its level) or of a new one (its own offset)
        off, idx = size
        v = {k: v[k] + off[i][:, idx] for i, k in enumerate(NEW_SETTING)}
    v.update(log_c_lr=law["log_c_lr"], log_c_b=law["log_c_b"], kappa1=q["kappa1"] + 0.0 * law["x_star"])
    out = {"lr_opt": jnp.exp(c["m_lr"] + v["x_star"]), "batch_opt": jnp.exp(c["m_b"] + v["z_star"]),
           "loss_opt": jnp.exp(c["m_y"] + v["ell"])}
    z = v["z_star"] if log_b is None else log_b - c["m_b"]
    if log_b is not None:
        dz = z - v["z_star"]
        out["lr_opt_at_batch"] = jnp.exp(c["m_lr"] + v["x_star"] + v["kappa1"] * dz + 0.5 * q["kappa2"] * dz * dz)
    if log_lr is not None:
        mu, _ = surface_at(q, v, log_lr - c["m_lr"], z)
        out["loss"] = jnp.exp(c["m_y"] + mu)
    return out


#: natural-scale truth for `simulate`: rounded posterior medians of this model on Step Law's dense runs with
#: N <= 6e8 (benchmarks/steplaw_lr.py); the valleys' log curvatures are at (ref_logN, ref_logD), the middle of
#: those runs, and change with log N, log D by ``c_*_exp_*``. ``diverge_above``: a run whose log LR lies that far
#: above the optimal LR at its batch diverges.
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


MODEL = Surface()
