r"""The NumPyro model of the surface: `surface_model`, the joint density of the math in
`scalinfer.models.surface.model`'s docstring (the surface, the laws and their partial pooling) under the priors
of `scalinfer.models.surface.priors` and the likelihood below, with size scatter's sites (`_size_levels`) in the
parameterization of `scalinfer.models.surface.size_scatter`.

This is the one module of the model that imports NumPyro and JAX at the top: `Surface.model` imports it when a
fit traces the model, so reading a fit and predicting (NumPy: `scalinfer.models.surface.predict`) import
neither.

Likelihood
----------
Converged runs: :math:`y_i \sim t_\nu(\mu_i, \sigma_i)` with :math:`\sigma_i = \sigma_0 + \sigma_1
(V_\eta + V_B)`: a noise floor plus a misfit that grows with distance from the optimum (the valleys' shape is
least exact far from it). The Student-t keeps the odd loss spike from bending the valleys.

Diverged runs (`scalinfer.models.surface.data`) are *censored*: their loss had the run converged is only
known to exceed a level c_i. Each adds :math:`\log P(y_i > \log c_i) = \log \Phi((\mu_i - \log c_i)/\sigma_i)`
as the observed site ``obs_censored`` (`Exceeds`: "it diverged" is 1 with that probability). The tail is
Gaussian because JAX cannot differentiate the t CDF in nu.

Settings' optima, pinned
------------------------
A setting's optimum is x*_s = c_s + tau eps_s with c_s its law (and size level) and eps_s ~ N(0, 1) a priori.
Its runs pin x*_s; as seen from the mode, roughly x*_s ~ N(xhat_s, 1/D_s) (a *pin*: location xhat_s,
precision D_s). Given the rest, x*_s is then about normal with precision P_s = 1/tau^2 + D_s about
m_s = (c_s/tau^2 + D_s xhat_s)/P_s, so the site sampled is x*_s in those units, w_s = (x*_s - m_s) sqrt(P_s):
with r_s = D_s tau^2,

.. math::

    w_s \sim \mathcal N\Big(-\frac{r_s}{\sqrt{1 + r_s}} \frac{\hat x_s - c_s}{\tau},\ \sqrt{1 + r_s}\Big),
    \qquad \epsilon_s = \frac{r_s}{1 + r_s} \frac{\hat x_s - c_s}{\tau} + \frac{w_s}{\sqrt{1 + r_s}}

(`pinned_offset`; the same for z*_s with tau_b). This is the prior eps_s ~ N(0, 1) exactly, for any pin: the
map w -> eps is affine for each (tau, c). With D_s = 0 it is the non-centered eps_s itself; where the runs
pin the optimum far tighter than tau (r_s >> 1) it is nearly the centered x*_s. Either alone is a funnel somewhere:
non-centered, tau moves every eps_s with it where the runs pin tau * eps_s; centered, x*_s narrows with tau
where they do not. In w the setting's optimum has about unit scale and no tilt against tau wherever tau is.
`Surface.nuts_kwargs` sets the pins from the posterior mode found with D = 0; the mode search itself runs with
D = 0 (its sites are then the non-centered eps_s).

Size scatter's sites
--------------------
The levels' line gamma ~ N(0, tau^2 I + R P R^T) (`size_line_scale`'s Cholesky factor, `SmallNormal`'s
density), their residuals r ~ t_{2 alpha}(0, (beta/alpha) I) (`IsotropicStudentT`), u ~ Gamma and the law from
its exact conditional given the levels (`law_given_levels`); the math is `scalinfer.models.surface.size_scatter`'s.
The two distributions are written out (no triangular solve) and skip NumPyro's trace-time argument
validation (the model builds their arguments valid); both keep the potential in its float type.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from scalinfer.models.distributions import HALF_LOG_2PI, Beta, Gamma, HalfNormal, Normal, StudentT
from scalinfer.models.surface.design import LEFT_OUT, fill_left_out
from scalinfer.models.surface.loss import laws, surface_terms
from scalinfer.models.surface.population import PRIOR_SETS
from scalinfer.models.surface.priors import LAW_N, PRIORS, Priors
from scalinfer.models.surface.size_scatter import size_basis, size_offsets

__all__ = ["surface_model", "Exceeds", "SmallNormal", "IsotropicStudentT", "size_line_scale",
           "law_given_levels", "pinned_offset"]

# NumPyro's distributions as this model builds them: unvalidated (`scalinfer.models.distributions`, and the
# distributions below). Validation adds a support check to every log density (a select per element) and checks
# arguments at trace time; the model builds every argument valid and its parameters reach their supports through
# NumPyro's transforms, so neither can fail here (the data are checked where they are read). `Beta`, `Gamma`,
# `Normal` and `StudentT` have their log densities written out as well (`Normal`'s ``scale_factor``: the priors'
# scales in units of the data's h_N, h_D share 1/h and log h).


class Exceeds(dist.Distribution):
    """1 ("the loss exceeded its level") with probability Phi(z), else 0: log_prob is log Phi(+-z).

    A Bernoulli with logits log Phi(z) - log Phi(-z) has the same probabilities, but evaluates two `log_ndtr` and a
    softplus where this evaluates one `log_ndtr`."""

    arg_constraints = {"z": dist.constraints.real}
    support = dist.constraints.boolean

    def __init__(self, z, *, validate_args=False):
        self.z = z
        super().__init__(batch_shape=jnp.shape(z), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, sample_shape + self.batch_shape)
        return (eps < self.z).astype(jnp.int32)

    def log_prob(self, value):
        return jax.scipy.special.log_ndtr(jnp.where(value == 1, self.z, -self.z))


class SmallNormal(dist.Distribution):
    """A multivariate normal of a few (static) dimensions, given its location and lower Cholesky factor.

    NumPyro's ``MultivariateNormal(loc, scale_tril=...)`` with its log density by forward substitution,
    elementwise (no triangular solve, a LAPACK call on CPU; each step by a product with 1/L_ii, which XLA:CPU
    compiles inside the kernels that read it, as `scalinfer.models.distributions.Normal`), and its arguments not
    validated (``validate_args=False``: NumPyro validates at trace time, one JAX operation at a time, each compiled
    on its own, in every fit)."""

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
            w.append(acc * (1.0 / L[..., i, i]))
        return sum(-0.5 * wi * wi - jnp.log(L[..., i, i]) - HALF_LOG_2PI for i, wi in enumerate(w))


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


def _chol2(a, b, c):
    """Lower Cholesky factor [[l11, 0], [l21, l22]] of the 2 x 2 matrix [[a, b], [b, c]] (elementwise, so a batch of
    matrices at once: no LAPACK call per gradient)."""
    l11 = jnp.sqrt(a)
    l21 = b / l11
    return l11, l21, jnp.sqrt(c - l21 * l21)


def size_line_scale(R, s0, sN, tau):
    """Lower Cholesky factor of tau^2 I + R P R^T, P = diag(s0^2, sN^2): the covariance of the sizes' levels along
    the law's directions, Q^T A, when A = X beta + tau e with beta ~ N(0, P), e ~ N(0, I). `s0`, `sN`, `tau` may
    carry a batch of laws (shape (L,), broadcast together): the factors are then (L, r, r)."""
    # Python floats: a NumPy float64 here would turn the whole float32 potential into float64
    B = lambda i, j: float(R[i, 0] * R[j, 0]) * s0 ** 2 + float(R[i, 1] * R[j, 1]) * sN ** 2  # noqa: E731
    t2 = tau * tau
    if R.shape[0] == 1:
        return jnp.sqrt(t2 + B(0, 0))[..., None, None]
    l11, l21, l22 = _chol2(t2 + B(0, 0), B(0, 1), t2 + B(1, 1))
    return jnp.stack([jnp.stack([l11, 0.0 * l11], -1), jnp.stack([l21, l22], -1)], -2)


def law_given_levels(A, std, n, s0, sN, tau):
    """(intercept, slope) of the law given the levels A (..., M): N(b, tau^2 G^-1) with G = X^T X + tau^2 P^-1 and
    b = G^-1 X^T A (the ridge regression of A on X), at standard normal `std` (..., 2). The data see the levels
    only, so this is the law's exact conditional posterior. `s0`, `sN`, `tau` may carry a batch of laws (shape
    (L,), with A (L, M) and std (L, 2)): the result is (..., 2)."""
    n = np.asarray(n, float)
    t2 = tau * tau
    g11, g12, g22 = len(n) + t2 / s0 ** 2, float(n.sum()), float(n @ n) + t2 / sN ** 2
    det = g11 * g22 - g12 * g12
    y1, y2 = jnp.sum(A, -1), A @ np.asarray(n, jnp.result_type(A))  # NumPy: no operation of its own to compile
    b1, b2 = (g22 * y1 - g12 * y2) / det, (g11 * y2 - g12 * y1) / det
    l11, l21, l22 = _chol2(g22 / det, -g12 / det, g11 / det)  # chol of G^-1
    return jnp.stack([b1 + tau * l11 * std[..., 0], b2 + tau * (l21 * std[..., 0] + l22 * std[..., 1])], axis=-1)


def pinned_offset(name: str, center, tau, pin):
    """Sample site `name`, the settings' pinned optima w (this module's docstring, "Settings' optima, pinned"),
    and return their offsets eps = (x* - center) / tau, shape (S,). `center`: each setting's law (and size level)
    c_s; `tau`: the settings' scatter; `pin`: (2, S), the pins' locations xhat_s and precisions D_s (D = 0: w is
    the non-centered eps). Call it inside the settings' plate. The settings' loss levels ell_s (about the loss law,
    scatter tau_loss) go through it too where `surface_model` is given ``pin_ell``."""
    xhat, D = pin[0], pin[1]
    r = D * tau * tau
    q = jnp.sqrt(1.0 + r)
    inv_q = 1.0 / q  # the one division by q (`Normal`'s own 1/q is the same operation): products elsewhere
    shift = (r * inv_q * inv_q) * (xhat - center) * (1.0 / tau)  # eps's conditional mean given the rest
    w = numpyro.sample(name, Normal(-q * shift, q))
    return shift + w * inv_q


def _size_levels(p: dict[str, Any], n_size, h_N: float, ft, left_out: str | None = None, pr: Priors = PRIORS) -> None:
    """Size scatter's sites for each law (`scalinfer.models.surface.size_scatter`): the levels A of the M sizes
    and, from its exact conditional given them, the law's intercept and N slope (into `p`). `left_out`: the law
    a reduced design has not (`scalinfer.models.surface.design`). A law whose prior has a mean (k0, kN) is the
    zero-mean one shifted: A = A_0 + k0 + kN n, (a0, a_N) = (a0, a_N)_0 + (k0, kN).

    Each law keeps sites of its own (``<v>_size_resid``, ``<v>_size_u``, ``<v>_size_line``, ``<v>_law_std``: what
    a fit stores and prior sensitivity names), but what they map to (tau, the levels, the law) is computed for
    the laws at once, stacked along a leading axis: one copy of that code in a compiled program, not one per
    law (XLA:CPU compiles each of its kernels on its own)."""
    Q, R, Q_perp = size_basis(n_size)
    # in the potential's float type (cast by NumPy: a JAX cast of a constant is an operation compiled on its own)
    Q, Q_perp = (np.asarray(a, ft) for a in (Q, Q_perp))
    k = Q_perp.shape[1]  # the sizes' residual directions about their least-squares line: M - 2
    laws_ = [v for v in LAW_N if v != left_out]
    alpha, beta = (np.array(a, ft) for a in zip(*(pr.size(v) for v in laws_)))
    mean0, meanN, s0, sN = (np.array(a, ft) for a in zip(*(pr.law(v) for v in laws_)))
    # the residuals, tau integrated out: N(0, tau^2 I) under tau^2 ~ InvGamma(alpha, beta); u for tau's exact
    # conditional given them
    r = jnp.stack([numpyro.sample(f"{v}_size_resid", IsotropicStudentT(2.0 * float(a), k, float(np.sqrt(b / a))))
                   if k else np.zeros(0, ft) for v, a, b in zip(laws_, alpha, beta)])
    u = jnp.stack([numpyro.sample(f"{v}_size_u", Gamma(float(a) + 0.5 * k, 1.0)) for v, a in zip(laws_, alpha)])
    tau = jnp.sqrt((beta + 0.5 * jnp.sum(r * r, -1)) / u)
    sN = sN * h_N
    scale = size_line_scale(R, s0, sN, tau)
    # the levels along the law's directions, centered (the data pin them), and the law's standard normals
    line, law_std = [], []
    for i, v in enumerate(laws_):
        p[f"tau_{v}_size"] = numpyro.deterministic(f"tau_{v}_size", tau[i])
        line.append(numpyro.sample(f"{v}_size_line", SmallNormal(np.zeros(Q.shape[1], ft), scale_tril=scale[i])))
        law_std.append(numpyro.sample(f"{v}_law_std", Normal(0.0, 1.0).expand([2]).to_event(1)))
    A = jnp.stack(line) @ Q.T + r @ Q_perp.T
    law = law_given_levels(A, jnp.stack(law_std), n_size, s0, sN, tau)
    if np.any(mean0) or np.any(meanN):
        A = A + (mean0[:, None] + (meanN * h_N)[:, None] * np.asarray(n_size, ft))  # h_N is traced
        law = law + jnp.stack([jnp.asarray(mean0), meanN * h_N], -1)
    for i, v in enumerate(laws_):
        k0, kN = LAW_N[v][:2]
        p[f"{v}_size"] = numpyro.deterministic(f"{v}_size", A[i])
        p[k0] = numpyro.deterministic(k0, law[i, 0])
        p[kN] = numpyro.deterministic(kN, law[i, 1])


def surface_model(n_s, d_s, size_s, n_size, s_obs, x_obs, z_obs, log_loss=None, s_cens=None, x_cens=None,
                  z_cens=None, log_level=None, diverged_obs=None, h_N=1.0, h_D=1.0, size_scatter=False,
                  design="full", prior="default", obs_mask=None, cens_mask=None, lr_valley_by_batch=False,
                  pin_lr=None, pin_b=None, pin_ell=None):
    """The NumPyro model of the surface (`scalinfer.models.surface.model`'s math, this module's likelihood).
    `design`: a reduced design (``fixed_batch``, ``fixed_lr``) samples no site of the valley its table does not vary
    (`scalinfer.models.surface.design`). `prior`: ``"default"`` (`PRIORS`), ``"population"``
    (`scalinfer.models.surface.population.POPULATION`) or a `Priors`. `obs_mask`, `cens_mask`: boolean arrays
    beside the converged and the diverged runs' arrays; a run where they are False adds nothing to the density
    (padding: a study that fits many tables of one design pads their arrays to one shape, so that one compiled
    program serves them all, as benchmarks/sbc.py does; `Surface` itself never pads). `lr_valley_by_batch`: the
    LR valley's log curvature and asymmetry move with the batch (sites ``c_lr_B``, ``delta_lr_B``;
    `scalinfer.models.surface.loss`), in the full design only. `pin_lr`, `pin_b`: (2, S) arrays, the pins of the
    settings' optima of LR and batch (`pinned_offset`); None: no pin (D = 0), the sites ``w_lr``, ``w_b`` are then
    the non-centered offsets ``eps_lr``, ``eps_b`` (deterministic sites beside them either way). `pin_ell`: (2, S),
    the pins of the settings' loss levels, sampled as ``w_ell`` (``ell`` then deterministic); None (default): ``ell``
    sampled centered."""
    pr = prior if isinstance(prior, Priors) else PRIOR_SETS[prior]
    p: dict[str, Any] = {}
    left_out, left_out_setting, left_out_law = LEFT_OUT[design]

    def site(name, d):
        if name not in left_out:
            p[name] = numpyro.sample(name, d)

    # the laws of eta* and B*; with size scatter their intercepts and N slopes come from the sizes' levels
    if not size_scatter:
        site("a0", Normal(0.0, pr.optimum_sd))
        site("b0", Normal(0.0, pr.optimum_sd))
    for k, h, (mean, sd) in (("a_N", h_N, pr.lr_exp_N), ("a_D", h_D, pr.lr_exp_D), ("b_N", h_N, pr.batch_exp_N),
                             ("b_D", h_D, pr.batch_exp_D)):
        if not (size_scatter and k in ("a_N", "b_N")):
            site(k, Normal(mean * h, sd, scale_factor=h))
    # the LR-batch ridge
    site("kappa1", Normal(*pr.kappa1))
    site("kappa2", Normal(0.0, pr.kappa2_sd))
    # the loss law
    if not size_scatter:
        p["g0"] = numpyro.sample("g0", Normal(0.0, pr.loss_sd))
        p["g_N"] = numpyro.sample("g_N", Normal(0.0, pr.loss_exponent_sd, scale_factor=h_N))
    p["g_D"] = numpyro.sample("g_D", Normal(0.0, pr.loss_exponent_sd, scale_factor=h_D))
    # the valleys: log curvature law, asymmetry, far-field exponent
    for v in ("lr", "b"):
        site(f"c_{v}0", Normal(*getattr(pr, f"c_{v}0")))
        site(f"c_{v}_N", Normal(0.0, pr.curvature_exponent_sd, scale_factor=h_N))
        site(f"c_{v}_D", Normal(0.0, pr.curvature_exponent_sd, scale_factor=h_D))
        site(f"delta_{v}", Normal(*getattr(pr, f"delta_{v}")))
        site(f"p_{v}_unit", Beta(*getattr(pr, f"p_{v}_beta")))
    if lr_valley_by_batch and design == "full":
        p["c_lr_B"] = numpyro.sample("c_lr_B", Normal(0.0, pr.c_lr_B_sd))
        p["delta_lr_B"] = numpyro.sample("delta_lr_B", Normal(0.0, pr.delta_lr_B_sd))
    # the settings' scatter about the laws
    site("tau_lr", HalfNormal(pr.tau_optimum_sd))
    site("tau_b", HalfNormal(pr.tau_optimum_sd))
    tau_loss = numpyro.sample("tau_loss", HalfNormal(pr.tau_loss_sd))
    ft = jnp.result_type(tau_loss)
    if size_scatter:
        _size_levels(p, n_size, h_N, ft, left_out_law, pr)
    sigma0 = numpyro.sample("sigma0", HalfNormal(pr.sigma0_sd))
    sigma1 = numpyro.sample("sigma1", HalfNormal(pr.sigma1_sd))
    site("nu", Gamma(*pr.nu))
    # a reduced design's left-out sites at their values there, in the potential's float type (the sizes' as a JAX
    # array: the data's size index is traced)
    p = fill_left_out(p, design, 0.0, np.zeros(n_s.shape[0], ft), jnp.zeros(len(n_size), ft))
    nu = p["nu"]
    size_s = size_s if size_scatter else None
    law, offset = laws(p, n_s, d_s), size_offsets(p, n_s, size_s)
    with numpyro.plate("setting", n_s.shape[0]):
        # the optima through their pins; the loss level centered (a setting's runs pin it far tighter than tau_L),
        # or through a pin of its own (`pin_ell`: on thin tables, `Surface.nuts_kwargs`)
        for v, k, pin in (("lr", "x_star", pin_lr), ("b", "z_star", pin_b)):
            if f"eps_{v}" not in left_out_setting:
                pin = np.zeros((2, n_s.shape[0]), ft) if pin is None else pin
                p[f"eps_{v}"] = numpyro.deterministic(
                    f"eps_{v}", pinned_offset(f"w_{v}", law[k] + offset[k], p[f"tau_{v}"], pin))
        center = law["ell"] + offset["ell"]
        if pin_ell is None:
            p["ell"] = numpyro.sample("ell", Normal(center, tau_loss))
        else:
            p["ell"] = numpyro.deterministic("ell", center + tau_loss * pinned_offset("w_ell", center, tau_loss,
                                                                                     pin_ell))
    censored = x_cens is not None and x_cens.shape[0] > 0
    if censored:  # the surface at both kinds of run in one pass: one copy of its code in a compiled program, not two
        n_obs = x_obs.shape[0]
        mu, excess = surface_terms(p, n_s, d_s, *(jnp.concatenate([a, b]) for a, b in (
            (s_obs, s_cens), (x_obs, x_cens), (z_obs, z_cens))), size_s)
        mu, excess, mu_c, excess_c = mu[..., :n_obs], excess[..., :n_obs], mu[..., n_obs:], excess[..., n_obs:]
    else:
        mu, excess = surface_terms(p, n_s, d_s, s_obs, x_obs, z_obs, size_s)
    noise = StudentT(nu, mu, sigma0 + sigma1 * excess)
    with numpyro.plate("run", x_obs.shape[0]):
        numpyro.sample("obs", noise if obs_mask is None else noise.mask(obs_mask), obs=log_loss)
    if censored:
        exceeds = Exceeds((mu_c - log_level) / (sigma0 + sigma1 * excess_c))
        with numpyro.plate("diverged_run", x_cens.shape[0]):
            numpyro.sample("obs_censored", exceeds if cens_mask is None else exceeds.mask(cens_mask),
                           obs=diverged_obs)
