r"""Size scatter: each model size sits off the laws by a level of its own.

The settings of one model size (a distinct N: one architecture) share its deviation from the laws. For the
sizes m = 1..M at scaled log N n_m, the law of log eta* is

.. math::

    x^*_s = A_{m(s)} + a_D \tilde d_s + \tau_\eta \epsilon^\eta_s, \qquad
    A_m = a_0 + a_N n_m + \tau^{size}_\eta e_m, \qquad e_m \sim \mathcal N(0, 1)

(likewise z*_s with b and tau_b_size, and the loss levels' mean with g and tau_loss_size). With M sizes, the
M - 2 directions of their levels off their least-squares line are what the data say about tau_size; with one
or two sizes it is its prior's.

Parameterization. The law (a0, a_N) is integrated out, and tau out of the levels' residuals about their
least-squares line; both are then drawn from their exact conditionals. With X = [1, n] = Q R (Q_perp an
orthonormal basis of the rest, `size_basis`) and P the law's prior covariance diag(s0^2, sN^2):

.. math::

    A = Q \gamma + Q_\perp r, \qquad r \sim t_{2\alpha}\big(0, (\beta/\alpha) I_{M-2}\big), \qquad
    \gamma \mid \tau \sim \mathcal N(0, \tau^2 I + R P R^T)

which is A = X beta + tau e with beta ~ N(0, P), since r = Q_perp^T A ~ N(0, tau^2 I) under
tau^2 ~ InverseGamma(alpha, beta) is the multivariate t (`IsotropicStudentT`). Then

.. math::

    \tau^2 = (\beta + |r|^2 / 2) / u, \qquad u \sim \mathrm{Gamma}(\alpha + (M - 2)/2, 1)

is tau's conditional given r, and the law (a0, a_N) ~ N(G^-1 X^T A, tau^2 G^-1) with G = X^T X + tau^2 P^-1
(`law_given_levels`) is its conditional given the levels (the data see the levels only). gamma's covariance
is `size_line_scale`'s factor, its density `SmallNormal`'s.

The two distributions are written out (no triangular solve) and skip NumPyro's trace-time argument
validation (the model builds their arguments valid); both keep the potential in its float type.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from scalinfer.models.surface.priors import LAW_N, NEW_SETTING

__all__ = ["size_basis", "size_line_scale", "law_given_levels", "size_offsets", "SmallNormal", "IsotropicStudentT"]

_LOG_2PI = math.log(2 * math.pi)


class SmallNormal(dist.Distribution):
    """A multivariate normal of a few (static) dimensions, given its location and lower Cholesky factor.

    NumPyro's ``MultivariateNormal(loc, scale_tril=...)`` with its log density by forward substitution,
    elementwise (no triangular solve, a LAPACK call on CPU), and its arguments not validated
    (``validate_args=False``: NumPyro validates at trace time, one JAX operation at a time, each compiled on its
    own, in every fit)."""

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
    """Each setting's model size's level off the law (log eta*, log B*, log L*), shape (..., S): A_m(s) - (law's
    intercept + N slope n_s). `size_s`: each setting's size index (the data's ``size_s``); None (a fit without size
    scatter): 0."""
    if size_s is None:
        return {k: 0.0 for k in NEW_SETTING}
    return {k: p[f"{v}_size"][..., size_s] - (p[LAW_N[v][0]] + p[LAW_N[v][1]] * n_s) for k, v in NEW_SETTING.items()}
