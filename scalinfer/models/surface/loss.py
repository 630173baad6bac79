r"""The surface's mean log loss at runs, built from the laws of `scalinfer.laws.lr` and `scalinfer.laws.batch`.

With x = log eta - m_eta, z = log B - m_B and y = log loss - m_y (natural logs, centered), a run of setting s:

.. math::

    y = \ell_s + V_\eta(u) + V_B(v), \qquad v = z - z^*_s, \qquad
    u = x - \big(x^*_s + \kappa_1 v + \tfrac12 \kappa_2 v^2\big)

the LR valley V_eta (`scalinfer.laws.lr.valley`) around the LR-batch ridge
(`scalinfer.laws.lr.log_lr_opt_at_batch`), and the batch valley V_B around B*. Each valley's log curvature
follows its own law, :math:`\log C_\pm = c_0 + c_N \tilde n + c_D \tilde d \pm \delta` (C_+ above the
optimum, C_- below); delta and the exponent p are shared. With the option ``lr_valley_by_batch`` the LR valley
is not separable from the batch: its log curvature and asymmetry move with v, the batch's distance from B*,

.. math::

    \log C^\eta_\pm = c^\eta_0 + c^\eta_N \tilde n + c^\eta_D \tilde d + w v
    \pm (\delta_\eta + a v), \qquad w = c_{\eta B}, \; a = \delta_{\eta B}

(sites ``c_lr_B`` and ``delta_lr_B``). The valley is still 0 on the ridge, so eta*(B), B* and L* keep
their meaning: only how fast the loss rises off the ridge depends on the batch. The laws at scaled (n, d)
(`laws`):

.. math::

    x^* = a_0 + a_N \tilde n + a_D \tilde d, \quad z^* = b_0 + b_N \tilde n + b_D \tilde d, \quad
    \ell = g_0 + g_N \tilde n + g_D \tilde d

and a setting's optimum sits off them by tau * eps_s (and, with size scatter, by its size's level:
`scalinfer.models.surface.size_scatter`); its loss level ell_s is sampled around the loss law. Each setting's
valleys are given by their curvatures C_-+ = exp(log C -+ delta) (`curvatures`), computed once per setting, not
once per run (`scalinfer.laws.lr.valley_at`); with ``lr_valley_by_batch`` a run's LR-valley curvatures are its
setting's times exp(v (c_etaB -+ delta_etaB)).

Parameters come as a dict `p` of arrays; scalars may carry leading batch dims (e.g. (n_draws, 1)) that
broadcast against the per-setting (..., S) and per-run arrays.
"""

from __future__ import annotations

from typing import Any

from scalinfer.laws.batch import log_batch_opt_law
from scalinfer.laws.lr import log_lr_opt_at_batch, log_lr_opt_law, valley_at
from scalinfer.models.surface.priors import PRIORS
from scalinfer.models.surface.size_scatter import size_offsets

__all__ = ["laws", "curvatures", "setting_values", "surface_terms", "surface_at"]


def laws(p: dict[str, Any], n, d) -> dict[str, Any]:
    """The population laws at scaled (n, d): log eta* - m_lr (``x_star``), log B* - m_B (``z_star``), log L* - m_y
    (``ell``) and the valleys' log curvatures (``log_c_lr``, ``log_c_b``), before any setting's own deviation."""
    return {
        "x_star": log_lr_opt_law(n, d, p["a0"], p["a_N"], p["a_D"]),
        "z_star": log_batch_opt_law(n, d, p["b0"], p["b_N"], p["b_D"]),
        "ell": p["g0"] + p["g_N"] * n + p["g_D"] * d,
        "log_c_lr": p["c_lr0"] + p["c_lr_N"] * n + p["c_lr_D"] * d,
        "log_c_b": p["c_b0"] + p["c_b_N"] * n + p["c_b_D"] * d,
    }


def curvatures(law: dict[str, Any], p: dict[str, Any], xp=None) -> dict[str, Any]:
    """The valleys' curvatures below and above their optima, C_-+ = exp(log C -+ delta), from the laws' log
    curvatures (``log_c_lr``, ``log_c_b`` of `laws`) and `p`'s asymmetries (``delta_lr``, ``delta_b``):
    ``c_lr_below``, ``c_lr_above``, ``c_b_below``, ``c_b_above``. `xp`: the array namespace (None: JAX's)."""
    if xp is None:
        import jax.numpy as xp
    return {f"c_{v}_{side}": xp.exp(law[f"log_c_{v}"] + sign * p[f"delta_{v}"])
            for v in ("lr", "b") for side, sign in (("below", -1.0), ("above", 1.0))}


def setting_values(p: dict[str, Any], n_s, d_s, size_s=None, xp=None) -> dict[str, Any]:
    """Each fitted setting's optimum, loss level and valleys' curvatures (`curvatures`), shape (..., S). `size_s`:
    each setting's model size with size scatter, else None. `xp`: the array namespace (None: JAX's)."""
    law = laws(p, n_s, d_s)
    off = size_offsets(p, n_s, size_s)
    return {"x_star": law["x_star"] + off["x_star"] + p["tau_lr"] * p["eps_lr"],
            "z_star": law["z_star"] + off["z_star"] + p["tau_b"] * p["eps_b"],
            "ell": p["ell"], **curvatures(law, p, xp), "kappa1": p["kappa1"] + 0.0 * p["ell"]}


def surface_terms(p: dict[str, Any], n_s, d_s, s, x, z, size_s=None):
    """The surface at runs (x, z) of settings ``s``: (mean log loss - m_y, excess over the optimum).

    Parameters
    ----------
    p : parameters: the scalars, and the per-setting ones (``eps_lr``, ``eps_b``, ``ell``) of shape (..., S).
    n_s, d_s : scaled log N and log D of each setting, shape (S,).
    s : setting index of each run (int array).
    x, z : log LR - m_lr and log batch - m_B of each run.
    size_s : each setting's model size, with size scatter (else None).
    """
    import jax.numpy as jnp  # here, not at the module's top: a prediction (NumPy on saved draws) imports no JAX
    from jax.lax import optimization_barrier

    values = setting_values(p, n_s, d_s, size_s, xp=jnp)
    # the settings' values gathered to the runs in one gather (..., S, k) -> (..., R, k): its gradient is then one
    # scatter-add of k-wide rows, where k gathers of (..., S) would scatter-add value by value k times. The stacked
    # (..., S, k) behind a barrier: XLA:CPU otherwise fuses the stacking into the gather, which then selects among
    # the k values for every element of (..., R, k) (benchmarks/README.md, "nuts_overhead.py")
    stacked = optimization_barrier(jnp.stack(jnp.broadcast_arrays(*values.values()), axis=-1))[..., s, :]
    return surface_at(p, {name: stacked[..., i] for i, name in enumerate(values)}, x, z)


def surface_at(p, v, x, z, xp=None):
    """(mean log loss - m_y, excess over the optimum) at (x, z) for per-point setting values `v` (see
    `setting_values`). `xp`: the array namespace (None: JAX's).

    Where `p` has ``c_lr_B`` and ``delta_lr_B`` (the option ``lr_valley_by_batch``) the LR valley's log
    curvature and asymmetry move with the batch's distance v from the setting's B* (module docstring): its
    curvatures are the setting's times exp(v (c_lr_B -+ delta_lr_B)); a `p` without them is the separable valley
    (they are 0)."""
    if xp is None:
        import jax.numpy as xp
    ridge = log_lr_opt_at_batch(z, v["x_star"], v["z_star"], v["kappa1"], p["kappa2"])
    off_b = z - v["z_star"]
    below, above = v["c_lr_below"], v["c_lr_above"]
    if "c_lr_B" in p:
        below = below * xp.exp(off_b * (p["c_lr_B"] - p["delta_lr_B"]))
        above = above * xp.exp(off_b * (p["c_lr_B"] + p["delta_lr_B"]))
    excess = (valley_at(x - ridge, below, above, PRIORS.p(p["p_lr_unit"]), xp=xp)
              + valley_at(off_b, v["c_b_below"], v["c_b_above"], PRIORS.p(p["p_b_unit"]), xp=xp))
    return v["ell"] + excess, excess
