"""The ``surface`` model (scalinfer/models/surface/) written in PyMC, for the nutpie comparison of
benchmarks/fit_speed.py (issue #8).

It takes the arrays and constants of ``scalinfer.models.surface.MODEL.with_options(size_scatter=False)
.prepare(runs)`` (with ``size_scatter=True``, of the default model's), so both models see the same centred
data, and repeats that NumPyro model term by term:

- the same priors (the `scalinfer.models.surface.Priors` it is given: the fitted model's), under the same names;
  the unconstrained coordinates are the same too (HalfNormal and
  Gamma: log; Beta: log-odds in PyMC, sigmoid in NumPyro), so the two log densities, Jacobians included, are
  equal up to floating point at any point (`check_equivalence` asserts it);
- non-centered offsets and centered loss levels ``ell`` per setting: the offsets sampled as ``w_lr``, ``w_b``,
  scalinfer's sites without pins (then w is eps itself: `scalinfer.models.surface.numpyro_model.pinned_offset`),
  and kept as ``eps_lr``, ``eps_b`` (deterministic);
- the valleys `_valley` (smooth, asymmetric, exponent p = 0.5 + 3.5 p_unit) and the ridge, as in
  `surface_at`;
- converged runs: Student-t(nu, mu, sigma0 + sigma1 * excess) on the log loss;
- with ``size_scatter=True`` (the default fit of a table of several model sizes), the sizes' levels as a PyMC
  user would write them, centered: ``{v}_size ~ N(intercept + slope n_m, tau_{v}_size)`` per size m, with
  ``tau_{v}_size^2 ~ InverseGamma(alpha, beta)`` and the law's intercept and N slope under their priors
  (`Priors.law`, `Priors.size`), for v in lr, b, loss; a setting's law is then its size's level plus the D
  term. This is the joint distribution of `scalinfer.models.surface.size_scatter`, which NumPyro samples in
  another parameterization (the law and tau integrated out, then drawn from their exact conditionals), so
  the log densities differ by the change of variables: the two are compared by their posteriors
  (`posterior_agreement`), not point by point;
- censored (diverged) runs: log Phi((mu - log_level) / scale), a `pm.Potential` with PyMC's stable normal
  log-CDF (`normal_lcdf`: erfcx below z = -1). NumPyro writes the same term as an observed site (`Exceeds`, observed at
  1, whose log probability is log Phi(z)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

def _valley(pt, offset, log_c, delta, p):
    """scalinfer.laws.lr.valley in PyTensor."""
    log_curv = pt.switch(pt.lt(offset, 0.0), log_c - delta, log_c + delta)
    return pt.exp(log_curv) * (2.0 / p) * pt.expm1(0.5 * p * pt.log1p(offset * offset))


def build_model(data: dict[str, np.ndarray], constants: dict[str, float], pr, size_scatter: bool = False):
    """The PyMC model of ``surface`` on `data`, `constants` from ``MODEL.prepare(runs)``, with priors `pr` (a
    `scalinfer.models.surface.priors.Priors`: ``PRIOR_SETS[MODEL.prior]``); with `size_scatter`, the model with
    size scatter (`data` from a model with ``size_scatter=True``)."""
    import pymc as pm
    import pytensor.tensor as pt
    from pymc.distributions.dist_math import normal_lcdf

    h_N, h_D = float(constants["h_N"]), float(constants["h_D"])
    n_s, d_s = np.asarray(data["n_s"], float), np.asarray(data["d_s"], float)
    S = n_s.shape[0]
    coords = {"setting": np.arange(S)}
    if size_scatter:
        n_size = np.asarray(data["n_size"], float)
        size_s = np.asarray(data["size_s"], dtype=np.int64)
        coords["size"] = np.arange(len(n_size))
    with pm.Model(coords=coords) as model:
        law = {}  # each law's (intercept, N slope): the natural ones, or those the sizes' levels scatter about
        for v, (k0, kN) in (("lr", ("a0", "a_N")), ("b", ("b0", "b_N")), ("loss", ("g0", "g_N"))):
            mean0, meanN, s0, sN = pr.law(v)
            law[v] = (pm.Normal(k0, mean0, s0), pm.Normal(kN, meanN * h_N, sN * h_N))
        (a0, a_N), (b0, b_N), (g0, g_N) = law["lr"], law["b"], law["loss"]
        a_D = pm.Normal("a_D", pr.lr_exp_D[0] * h_D, pr.lr_exp_D[1] * h_D)
        b_D = pm.Normal("b_D", pr.batch_exp_D[0] * h_D, pr.batch_exp_D[1] * h_D)
        kappa1 = pm.Normal("kappa1", *pr.kappa1)
        kappa2 = pm.Normal("kappa2", 0.0, pr.kappa2_sd)
        g_D = pm.Normal("g_D", 0.0, pr.loss_exponent_sd * h_D)
        c: dict[str, Any] = {}
        for v in ("lr", "b"):
            c[f"c_{v}0"] = pm.Normal(f"c_{v}0", *getattr(pr, f"c_{v}0"))
            c[f"c_{v}_N"] = pm.Normal(f"c_{v}_N", 0.0, pr.curvature_exponent_sd * h_N)
            c[f"c_{v}_D"] = pm.Normal(f"c_{v}_D", 0.0, pr.curvature_exponent_sd * h_D)
            c[f"delta_{v}"] = pm.Normal(f"delta_{v}", *getattr(pr, f"delta_{v}"))
            c[f"p_{v}_unit"] = pm.Beta(f"p_{v}_unit", *getattr(pr, f"p_{v}_beta"))
        tau_lr = pm.HalfNormal("tau_lr", pr.tau_optimum_sd)
        tau_b = pm.HalfNormal("tau_b", pr.tau_optimum_sd)
        tau_loss = pm.HalfNormal("tau_loss", pr.tau_loss_sd)
        sigma0 = pm.HalfNormal("sigma0", pr.sigma0_sd)
        sigma1 = pm.HalfNormal("sigma1", pr.sigma1_sd)
        nu = pm.Gamma("nu", alpha=pr.nu[0], beta=pr.nu[1])

        # the population laws at each setting (scalinfer.models.surface.laws), or its size's level
        if size_scatter:
            level = {}
            for v, (k0, kN) in law.items():
                alpha, beta = pr.size(v)
                tau2 = pm.InverseGamma(f"tau_{v}_size_sq", alpha, beta)
                pm.Deterministic(f"tau_{v}_size", pt.sqrt(tau2))
                level[v] = pm.Normal(f"{v}_size", k0 + kN * n_size, pt.sqrt(tau2), dims="size")[size_s]
            law_x, law_z, law_ell = level["lr"] + a_D * d_s, level["b"] + b_D * d_s, level["loss"] + g_D * d_s
        else:
            law_x = a0 + a_N * n_s + a_D * d_s
            law_z = b0 + b_N * n_s + b_D * d_s
            law_ell = g0 + g_N * n_s + g_D * d_s
        log_c_lr = c["c_lr0"] + c["c_lr_N"] * n_s + c["c_lr_D"] * d_s
        log_c_b = c["c_b0"] + c["c_b_N"] * n_s + c["c_b_D"] * d_s

        eps_lr = pm.Deterministic("eps_lr", pm.Normal("w_lr", 0.0, 1.0, dims="setting"), dims="setting")
        eps_b = pm.Deterministic("eps_b", pm.Normal("w_b", 0.0, 1.0, dims="setting"), dims="setting")
        ell = pm.Normal("ell", law_ell, tau_loss, dims="setting")
        x_star = law_x + tau_lr * eps_lr
        z_star = law_z + tau_b * eps_b
        p_lr = pr.p(c["p_lr_unit"])
        p_b = pr.p(c["p_b_unit"])

        def surface(s, x, z):
            """(mean log loss - m_y, excess) at runs (x, z) of settings s (scalinfer's surface_terms)."""
            s = pt.as_tensor_variable(np.asarray(s, dtype=np.int64))
            dz = np.asarray(z, float) - z_star[s]
            u = np.asarray(x, float) - (x_star[s] + kappa1 * dz + 0.5 * kappa2 * dz * dz)
            excess = (_valley(pt, u, log_c_lr[s], c["delta_lr"], p_lr)
                      + _valley(pt, dz, log_c_b[s], c["delta_b"], p_b))
            return ell[s] + excess, excess

        mu, excess = surface(data["s_obs"], data["x_obs"], data["z_obs"])
        pm.StudentT("obs", nu=nu, mu=mu, sigma=sigma0 + sigma1 * excess, observed=np.asarray(data["log_loss"], float))
        if data.get("x_cens") is not None and len(data["x_cens"]) > 0:
            mu_c, excess_c = surface(data["s_cens"], data["x_cens"], data["z_cens"])
            zc = (mu_c - np.asarray(data["log_level"], float)) / (sigma0 + sigma1 * excess_c)
            pm.Potential("obs_censored", pt.sum(normal_lcdf(0.0, 1.0, zc)))
    return model


def check_equivalence(pymc_model, numpyro_model, model_kwargs: dict[str, Any], params: dict[str, np.ndarray],
                      n_points: int = 3, jitter: float = 0.05, seed: int = 0, rtol: float = 1e-8) -> dict[str, Any]:
    """Evaluate both log densities (unconstrained space, Jacobians included) and their gradients at `params`
    (constrained values, e.g. scalinfer's MAP) and at `n_points - 1` points jittered around it in the
    unconstrained space; assert that they agree up to one constant (the differences between points agree), and
    that the gradients agree. Returns the figures."""
    import jax
    import jax.numpy as jnp
    from numpyro.infer.util import potential_energy, unconstrain_fn

    z0 = {k: np.asarray(v, float) for k, v in unconstrain_fn(numpyro_model, (), model_kwargs, params).items()}
    names = [rv.name for rv in pymc_model.free_RVs]
    if set(names) != set(z0):
        raise AssertionError(f"different parameters: only PyMC {set(names) - set(z0)}, only NumPyro "
                             f"{set(z0) - set(names)}")
    values = [pymc_model.rvs_to_values[rv] for rv in pymc_model.free_RVs]
    logp = pymc_model.compile_logp(jacobian=True)
    dlogp = pymc_model.compile_dlogp(jacobian=True)  # gradient in the order of pymc_model.value_vars
    order = [v.name for v in pymc_model.value_vars]
    by_value = {pymc_model.rvs_to_values[rv].name: rv.name for rv in pymc_model.free_RVs}

    def np_logp(z):
        return -potential_energy(numpyro_model, (), model_kwargs, z)

    np_logp_jit = jax.jit(np_logp)
    np_grad = jax.jit(jax.grad(np_logp))
    rng = np.random.default_rng(seed)
    points = [z0] + [{k: v + jitter * rng.standard_normal(v.shape) for k, v in z0.items()}
                     for _ in range(n_points - 1)]
    # the unconstrained coordinates are the same transforms in both: check by mapping PyMC's back
    for rv, val in zip(pymc_model.free_RVs, values):
        tr = pymc_model.rvs_to_transforms.get(rv)
        if tr is not None:
            back = np.asarray(tr.backward(pt_const(z0[rv.name]), *rv.owner.inputs).eval())
            if not np.allclose(back, params[rv.name], rtol=1e-10, atol=1e-12):
                raise AssertionError(f"{rv.name}: PyMC's transform {type(tr).__name__} is not NumPyro's")
    lp_pymc, lp_numpyro, gerr, gscale = [], [], [], []
    for z in points:
        pt_point = {val.name: z[rv.name] for rv, val in zip(pymc_model.free_RVs, values)}
        lp_pymc.append(float(logp(pt_point)))
        lp_numpyro.append(float(np_logp_jit({k: jnp.asarray(v) for k, v in z.items()})))
        g_pm = np.asarray(dlogp(pt_point))
        g_np_tree = np_grad({k: jnp.asarray(v) for k, v in z.items()})
        g_np = np.concatenate([np.ravel(np.asarray(g_np_tree[by_value[n]])) for n in order])
        gerr.append(float(np.max(np.abs(g_pm - g_np))))
        gscale.append(float(np.max(np.abs(g_np))))
    # relative to the largest gradient met: at the mode the gradient is ~0 and each side's is the rounding
    # error of sums of terms of size 1/scale^2 (1e6 and more for the loss levels)
    grad_err = max(gerr) / max(1.0, max(gscale))
    lp_pymc, lp_numpyro = np.array(lp_pymc), np.array(lp_numpyro)
    offset = lp_pymc - lp_numpyro
    d_pymc, d_numpyro = lp_pymc[1:] - lp_pymc[0], lp_numpyro[1:] - lp_numpyro[0]
    scale = max(1.0, float(np.max(np.abs(lp_numpyro))))
    diff_err = float(np.max(np.abs(d_pymc - d_numpyro)) / scale) if n_points > 1 else 0.0
    out = {"logp_pymc": lp_pymc.tolist(), "logp_numpyro": lp_numpyro.tolist(),
           "offset": offset.tolist(), "max_rel_err_of_differences": diff_err, "max_rel_grad_err": grad_err,
           "max_abs_grad_err": max(gerr), "max_abs_grad": max(gscale),
           "n_points": n_points, "n_params": int(sum(np.size(v) for v in z0.values()))}
    if not (diff_err < rtol and grad_err < 1e-8):
        raise AssertionError(f"PyMC and NumPyro log densities differ: {out}")
    return out


def pt_const(x):
    import pytensor.tensor as pt

    return pt.as_tensor_variable(np.asarray(x, float))


def twin_start(point: dict[str, np.ndarray], pymc_model) -> dict[str, np.ndarray]:
    """The twin's free variables at scalinfer's posterior mode `point` (constrained values of its sites and
    deterministics, by name): what nutpie starts every chain from. Most are scalinfer's own sites; with size
    scatter, the levels ``<v>_size``, the laws' intercepts and N slopes are scalinfer's deterministic sites of
    those names and ``tau_<v>_size_sq`` is the square of its ``tau_<v>_size``; ``w_lr``, ``w_b`` are the
    non-centered offsets (a mode search samples them unpinned). Not the twin's own mode (its parameterization
    differs), but next to it."""
    out = {}
    for rv in pymc_model.free_RVs:
        name = rv.name
        if name in point:
            out[name] = np.asarray(point[name], float)
        elif name.endswith("_sq") and name[:-3] in point:
            out[name] = np.asarray(point[name[:-3]], float) ** 2
        else:
            raise KeyError(f"scalinfer's mode has no value for the twin's {name!r}")
    return out


def posterior_agreement(a: dict[str, tuple[float, float]], b: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Two samplers' posteriors of the same model compared by their means: `a`, `b` map a scalar's name to (posterior
    mean, Monte Carlo standard error of that mean); z = (mean_a - mean_b) / sqrt(mcse_a^2 + mcse_b^2) per shared
    name. Equal posteriors give |z| of a standard normal (max over 20-30 names ~2.5-3)."""
    z = {k: (a[k][0] - b[k][0]) / float(np.hypot(a[k][1], b[k][1])) for k in sorted(set(a) & set(b))}
    worst = max(z, key=lambda k: abs(z[k]))
    return {"z": z, "max_abs_z": abs(z[worst]), "worst": worst, "n": len(z)}
