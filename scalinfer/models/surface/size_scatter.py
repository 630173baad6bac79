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

This module holds the NumPy functions, which predictions use too: the sizes' basis (`size_basis`) and each
setting's level off the laws (`size_offsets`). The NumPyro sites (`_size_levels`), the JAX functions
`size_line_scale` and `law_given_levels` and the distributions `IsotropicStudentT` and `SmallNormal` are in
`scalinfer.models.surface.numpyro_model`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scalinfer.models.surface.priors import LAW_N, NEW_SETTING

__all__ = ["size_basis", "size_offsets"]


def size_basis(n) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X = [1, n] = Q R for M model sizes at scaled log N `n`: (Q (M, r), R (r, 2), Q_perp (M, M - r)), r = min(M,
    2); Q spans the levels' least-squares line, Q_perp their residuals about it. `n` is data (numpy): computed
    once, outside the traced program."""
    n = np.asarray(n, float)
    Qf, R = np.linalg.qr(np.stack([np.ones_like(n), n], axis=-1), mode="complete")
    r = min(len(n), 2)
    return Qf[:, :r], R[:r], Qf[:, r:]


def size_offsets(p: dict[str, Any], n_s, size_s=None, keys=tuple(NEW_SETTING)) -> dict[str, Any]:
    """Each setting's model size's level off the law (log eta*, log B*, log L*: `keys` of ``NEW_SETTING``), shape
    (..., S): A_m(s) - (law's intercept + N slope n_s). `size_s`: each setting's size index (the data's
    ``size_s``); None (a fit without size scatter): 0."""
    if size_s is None:
        return {k: 0.0 for k in keys}
    return {k: p[f"{v}_size"][..., size_s] - (p[LAW_N[v][0]] + p[LAW_N[v][1]] * n_s)
            for k, v in NEW_SETTING.items() if k in keys}
