"""NUTS with the data as arguments of one compiled program per chain set.

NumPyro's ``MCMC(...).run(rng, **data)`` maps over chains a function that closes over the data, so the data
are constants of the compiled program: every table, even of the same shapes, compiles again, and the
persistent compilation cache never hits across datasets. Here the program is a function of
``(rng_key, init_params, data)``:

- the potential is `numpyro.infer.util.potential_energy(model, (), data, z)`, given to NumPyro's functional
  NUTS (`numpyro.infer.hmc.hmc(potential_fn_gen=..., algo="NUTS")`), whose kernels take the data as
  ``model_kwargs``;
- warmup (NumPyro's window adaptation: dual-averaging step size, then a dense or diagonal mass matrix in
  doubling windows; a dense one estimated from fewer than 2d draws has its correlations shrunk, see
  `_window_shrinkage`) and sampling run in `lax.scan` loops, collecting the unconstrained draws, ``diverging``,
  ``num_steps``, ``accept_prob`` and ``energy``; the draws are then mapped to the constrained space
  (deterministic sites included) with `numpyro.infer.util.constrain_fn`, the data again an argument;
- chains are mapped over devices, one chain per device, when JAX has a device per chain: `jax.pmap` with the
  data broadcast (``in_axes=(0, 0, None)``), written as the `jit` of a `shard_map` that `jax.pmap` is in this
  JAX; else they run one after another through the same compiled single-chain program.

The compiled program depends only on the model, the data's shapes and dtypes, and the settings (warmup,
samples, mass matrix, target acceptance, tree depths, chain count). The random streams are NumPyro's; the
chain runs on coordinates scaled around the mode (see `run_nuts`), so the draws are those of
``MCMC(NUTS(model, ...))`` on a reparameterized model, not the same numbers.

The potential can run in float32 while the rest stays float64 (``potential_dtype``): on CPU a float32
gradient of Step Law's surface takes 0.08 ms against 0.14 ms.

Warmup builds its trees under a lower depth cap than sampling (``warmup_tree_depth``): before the mass
matrix is adapted NUTS builds its longest trees, and on Step Law's surface those early iterations took most
of a fit's gradients (see `scalinfer.inference.fit.WARMUP_TREE_DEPTH`).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.flatten_util import ravel_pytree
from numpyro.infer.hmc import hmc
from numpyro.infer.hmc_util import build_adaptation_schedule, welford_covariance
from numpyro.infer.util import constrain_fn, potential_energy

from scalinfer.inference.compiled import join_kwargs, program, split_kwargs

__all__ = ["run_nuts", "STAT_FIELDS"]

#: the per-draw statistics collected, as NumPyro's `MCMC.get_extra_fields` names them
STAT_FIELDS = ("diverging", "num_steps", "accept_prob", "energy")
_RESERVED = ("_mean", "_scale", "_z_like")
#: mass-matrix adaptation during warmup, on the scaled coordinates w
ADAPT = ("dense", "diag", "none")


def _to_z(mean, scale, z_like):
    """w -> z, a dict like `z_like`: the flat unconstrained vector is mean + scale * w (see `run_nuts`)."""
    _, unravel = ravel_pytree(z_like)
    return lambda w: unravel(mean + scale * w)


def _cast(tree, dtype):
    """Floating-point leaves of `tree` as `dtype` (None: unchanged)."""
    if dtype is None:
        return tree
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x, tree)


def _potential_fn_gen(model_fn, static: tuple, dtype):
    def gen(*args, _mean, _scale, _z_like, **dyn):
        kwargs = join_kwargs(dyn, static)
        to_z = _to_z(_mean, _scale, _z_like)
        return lambda w: potential_energy(model_fn, args, kwargs, _cast(to_z(w), dtype))
    return gen


def _chain_fn(model_fn, static, warmup: int, samples: int, adapt: str, target_accept: float,
              max_tree_depth: tuple[int, int], potential_dtype: str | None):
    """One chain: (rng_key, init w, data) -> (constrained draws (samples, ...), stats (samples,))."""
    dtype = None if potential_dtype is None else jnp.dtype(potential_dtype)
    init_kernel, sample_kernel = hmc(potential_fn_gen=_potential_fn_gen(model_fn, static, dtype), algo="NUTS")

    def scalinfer_nuts(rng_key, init_w, dyn_full):
        # the potential's data in its own precision, cast once (the draws are constrained with the data as given)
        dyn = {**_cast({k: v for k, v in dyn_full.items() if k not in _RESERVED}, dtype),
               **{k: dyn_full[k] for k in _RESERVED}}
        # as numpyro.infer.HMC.init: one split for the (unused here) model initialisation
        rng_key, _ = jax.random.split(rng_key)
        state = init_kernel(
            init_w, num_warmup=warmup, step_size=1.0, inverse_mass_matrix=None, adapt_step_size=True,
            adapt_mass_matrix=adapt != "none", dense_mass=adapt == "dense",
            target_accept_prob=target_accept, num_steps=None, trajectory_length=None,
            max_tree_depth=max_tree_depth, find_heuristic_step_size=False, forward_mode_differentiation=False,
            regularize_mass_matrix=True, model_kwargs=dyn, rng_key=rng_key)

        # one loop over warmup + sampling, writing draw i - warmup (warmup iterations write slot 0, which the
        # first draw overwrites): one copy of the NUTS kernel in the program; a loop for each phase has two,
        # and compiled 30% slower (chinchilla: 6.7 s against 5.1 s of CPU)
        def collect(s):
            return s.z, {f: getattr(s, f) for f in STAT_FIELDS}

        buffers = jax.tree.map(lambda x: jnp.zeros((samples,) + jnp.shape(x), jnp.result_type(x)), collect(state))
        # warmup's tree sizes and step sizes, per iteration (what warmup cost, and how it adapted)
        # (one slot at least: JAX refuses even a dropped write into an empty array; sliced off below)
        warm = {"num_steps": jnp.zeros(max(warmup, 1), jnp.result_type(state.num_steps)),
                "step_size": jnp.zeros(max(warmup, 1), jnp.result_type(float))}

        # dense adaptation: short windows' mass matrices from `shrunk_covariance` (see `_window_shrinkage`)
        shrinkage = _window_shrinkage(warmup, jnp.size(init_w)) if adapt == "dense" else None
        shrink = None
        if shrinkage is not None:
            rows, shrink = shrinkage
            warm["w"] = jnp.zeros((rows, jnp.size(init_w)), jnp.result_type(state.z))

        def step(i, carry):
            s, bufs, warm = carry
            s = sample_kernel(s, model_kwargs=dyn)
            if shrink is not None:
                warm = {**warm, "w": warm["w"].at[i].set(s.z, mode="drop")}
                s = s._replace(adapt_state=shrink(i, warm["w"], s.adapt_state))
            j = jnp.maximum(i - warmup, 0)
            bufs = jax.tree.map(lambda b, x: lax.dynamic_update_index_in_dim(b, x, j, 0), bufs, collect(s))
            # index i is past the buffer after warmup: mode="drop" skips those writes
            warm = {**warm, "num_steps": warm["num_steps"].at[i].set(s.num_steps, mode="drop"),
                    "step_size": warm["step_size"].at[i].set(s.adapt_state.step_size, mode="drop")}
            return s, bufs, warm

        _, (w, stats), warm = lax.fori_loop(0, warmup + samples, step, (state, buffers, warm))
        data = {k: v for k, v in dyn_full.items() if k not in _RESERVED}
        kwargs = join_kwargs(data, static)
        to_z = _to_z(dyn["_mean"], dyn["_scale"], dyn["_z_like"])
        draws = jax.vmap(lambda v: constrain_fn(model_fn, (), kwargs, to_z(v), return_deterministic=True))(w)
        return draws, {**stats, **{f"warmup_{k}": warm[k][:warmup] for k in ("num_steps", "step_size")}}

    return scalinfer_nuts


def shrunk_covariance(x, mask):
    """(covariance, n) of the rows of `x` (T, d) where `mask` (T,), its correlations shrunk toward zero.

    Schafer and Strimmer's (2005) target "D": the sample variances are kept and every correlation r_ij is
    multiplied by 1 - lambda, with lambda = sum_{i != j} Var(r_ij) / sum_{i != j} r_ij^2 clipped to [0, 1],
    Var(r_ij) estimated from the n products of the standardized rows. The result is positive definite for
    any n >= 2 (lambda > 0 when n <= d), where the sample covariance is singular, unless a coordinate did not
    move: its variance is 0, as in NumPyro's estimate, and NumPyro's regularization makes it positive."""
    m = mask[:, None].astype(x.dtype)
    n = m.sum()
    xc = (x - (x * m).sum(0) / n) * m
    sd = jnp.sqrt((xc ** 2).sum(0) / (n - 1))
    u = xc / jnp.where(sd > 0, sd, 1.0)  # a coordinate that never moved (a stuck chain) has variance 0
    prod = u.T @ u  # (n - 1) * correlations
    var_r = n / (n - 1) ** 3 * ((u ** 2).T @ (u ** 2) - prod ** 2 / n)
    off = 1.0 - jnp.eye(x.shape[1], dtype=x.dtype)
    r = prod / (n - 1) * off
    # (no correlation at all: r = 0, and lambda does not matter)
    lam = jnp.clip(jnp.sum(var_r * off) / jnp.maximum(jnp.sum(r ** 2), jnp.finfo(x.dtype).tiny), 0.0, 1.0)
    corr = (1.0 - lam) * r + jnp.eye(x.shape[1], dtype=x.dtype)
    return sd[:, None] * corr * sd[None, :], n


#: a window of fewer than SHRINK_BELOW * d draws gets `shrunk_covariance` instead of the sample covariance
SHRINK_BELOW = 2


def _window_shrinkage(warmup: int, dim: int):
    """None, or (rows, update): the warmup positions kept (the first `rows` iterations) and
    update(i, positions (rows, dim), adapt state) -> adapt state, which replaces the dense mass matrix that
    NumPyro's window adaptation has just set at the end of each middle window of fewer than
    `SHRINK_BELOW` * dim draws by `shrunk_covariance` of that window's draws.

    Why: NumPyro (as Stan) regularizes a window's sample covariance S as n/(n+5) S + 1e-3 * 5/(n+5) I. With
    n < d draws S is singular, and on the Laplace-scaled coordinates (variances ~1) its null directions get
    variances ~1e-4: a 10^4-fold error that forces tiny steps at the depth cap; for d <= n < 2d the smallest
    eigenvalues of S are still (1 - sqrt(d/n))^2 of the truth or less. On Step Law's surface (d = 78, 1,000
    warmup: windows of 25, 50, 100, 200 and 500 draws) the iterations after the 25-, 50- and 100-draw windows
    ran at the depth cap (63 leapfrog steps), shrunk they took 30-50. Windows of 2d draws or more keep
    NumPyro's estimate: shrinking correlations toward zero breaks strong ones, and on the bundled MoE runs
    (d = 87), shrinking the 200-draw window doubled the steps per draw."""
    sched = build_adaptation_schedule(warmup)
    small = [w for w in sched[1:-1] if w.end - w.start + 1 < SHRINK_BELOW * dim]
    if not small:
        return None
    starts = jnp.asarray([w.start for w in small])
    ends = jnp.asarray([w.end for w in small])
    _, _, welford_final = welford_covariance(diagonal=False)

    def update(i, ws, state):
        hit = ends == i

        def replace(_):
            k = jnp.argmax(hit)
            idx = jnp.arange(ws.shape[0])
            cov, n = shrunk_covariance(ws, (idx >= starts[k]) & (idx <= ends[k]))
            # NumPyro's own final step (the regularization above, then the Cholesky factors it keeps)
            inv, sqrt, sqrt_inv = welford_final((jnp.zeros(dim, ws.dtype), cov * (n - 1), n), regularize=True)
            return state._replace(inverse_mass_matrix=inv, mass_matrix_sqrt=sqrt, mass_matrix_sqrt_inv=sqrt_inv)

        return lax.cond(hit.any(), replace, lambda _: state, None)

    return small[-1].end + 1, update


@program
def _nuts_program(model_fn, static, warmup, samples, adapt, target_accept, max_tree_depth, potential_dtype, chains,
                  parallel):
    """The compiled program: one chain (`jax.jit`), or `chains` chains on as many devices; `max_tree_depth` is
    (in warmup, after warmup), as NumPyro's `hmc` takes it. The parallel form is what
    `jax.pmap(chain, in_axes=(0, 0, None))` is in this JAX (a `jit` of a `shard_map` over a mesh of the
    devices), written out so that the program keeps its name in JAX's compile logs and cache."""
    fn = _chain_fn(model_fn, static, warmup, samples, adapt, target_accept, max_tree_depth, potential_dtype)
    if not parallel:
        return jax.jit(fn)
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(jax.local_devices()[:chains]), ("chain",))

    def one_chain_per_device(keys, init_w, dyn):
        out = fn(keys[0], init_w[0], dyn)
        return jax.tree.map(lambda x: x[None], out)

    def scalinfer_nuts_chains(keys, init_w, dyn):
        chain, everywhere = PartitionSpec("chain"), PartitionSpec()
        return jax.shard_map(one_chain_per_device, mesh=mesh, in_specs=(chain, chain, everywhere),
                             out_specs=chain, check_vma=False)(keys, init_w, dyn)

    return jax.jit(scalinfer_nuts_chains)


def run_nuts(model_fn: Callable, model_kwargs: dict[str, Any], init_params: dict[str, Any], *, chains: int,
             warmup: int, samples: int, seed: int = 0, adapt: str = "dense", target_accept: float = 0.8,
             max_tree_depth: int = 10, warmup_tree_depth: int | None = None, chain_method: str = "parallel",
             mean: np.ndarray | None = None, scale: np.ndarray | None = None,
             potential_dtype: str | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run NUTS on `model_fn` with `model_kwargs` as data.

    Parameters
    ----------
    init_params : unconstrained starting values, name -> array with a leading axis of size `chains`.
    mean, scale : NUTS runs on w, where the flat unconstrained vector (in the order of
        `jax.flatten_util.ravel_pytree` of one chain's ``init_params``) is z = mean + scale * w (default 0 and
        1). With the mode and the Laplace standard deviations every coordinate is O(1) in the posterior. That
        matters because NumPyro's (Stan's) mass-matrix adaptation shrinks its estimate toward 1e-3 times the
        identity: for a parameter of posterior sd 1e-4 (a setting's log loss on smoothed curves) that is a
        10^4-fold error in its variance, which forces tiny steps at maximum tree depth. The scaling is an
        argument of the program, like the data.
    adapt : mass-matrix adaptation during warmup (`ADAPT`): ``"dense"``, ``"diag"`` or ``"none"`` (identity
        on w; the step size is always adapted).
    max_tree_depth, warmup_tree_depth : NUTS's tree depth caps after and during warmup (default: the same).
    chain_method : ``"parallel"`` (one device per chain, `jax.pmap`) or ``"sequential"`` (the chains one
        after another through one compiled single-chain program); see `runtime.chain_method_for`.
    potential_dtype : evaluate the potential and its gradient in this float type (e.g. ``"float32"``: the
        data are cast once, the position at each evaluation); the integrator, the adaptation and the
        constrained draws keep the data's type. None: the data's type.

    Returns
    -------
    (draws, stats): constrained draws (sampled and deterministic sites) name -> (chains, samples, ...), and
    `STAT_FIELDS` name -> (chains, samples), as NumPyro's ``get_samples(group_by_chain=True)`` and
    ``get_extra_fields(group_by_chain=True)``, plus ``warmup_num_steps`` and ``warmup_step_size``
    (chains, warmup): each warmup iteration's leapfrog steps and the step size it ran with.
    """
    if adapt not in ADAPT:
        raise ValueError(f"adapt must be one of {ADAPT}, got {adapt!r}")
    dyn, static = split_kwargs(model_kwargs)
    if set(_RESERVED) & set(dyn):
        raise ValueError(f"model arguments named {', '.join(_RESERVED)} are reserved by the NUTS driver")
    ftype = jnp.result_type(float)
    init = jax.tree.map(lambda x: np.asarray(x, dtype=ftype), dict(init_params))
    lead = {np.shape(v)[0] for v in jax.tree_util.tree_leaves(init)}
    if lead != {chains}:
        raise ValueError(f"init_params must have a leading axis of size chains={chains}, got {sorted(lead)}")
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    z_like = jax.tree.map(lambda x: x[0], init)
    flat = np.stack([np.asarray(ravel_pytree(jax.tree.map(lambda x: x[c], init))[0]) for c in range(chains)])
    dim = flat.shape[1]
    mean = np.zeros(dim, ftype) if mean is None else np.asarray(mean, ftype)
    scale = np.ones(dim, ftype) if scale is None else np.asarray(scale, ftype)
    if mean.shape != (dim,) or scale.shape != (dim,):
        raise ValueError(f"mean and scale must have shape ({dim},), got {mean.shape} and {scale.shape}")
    init_w = (flat - mean) / scale
    dyn = {**dyn, "_mean": mean, "_scale": scale, "_z_like": z_like}
    key = jax.random.PRNGKey(seed)
    # as numpyro.infer.MCMC.run: one key per chain when there are several
    keys = jax.random.split(key, chains) if chains > 1 else key[None]
    parallel = chain_method == "parallel" and chains > 1
    depth = (int(warmup_tree_depth if warmup_tree_depth is not None else max_tree_depth), int(max_tree_depth))
    run = _nuts_program(model_fn, static, int(warmup), int(samples), adapt, float(target_accept), depth,
                        potential_dtype, int(chains), parallel)
    if parallel:
        draws, stats = jax.device_get(run(keys, init_w, dyn))
    else:
        outs = [jax.device_get(run(keys[c], init_w[c], dyn)) for c in range(chains)]
        draws, stats = jax.tree.map(lambda *xs: np.stack(xs), *outs)
    return ({k: np.asarray(v) for k, v in draws.items()}, {k: np.asarray(v) for k, v in stats.items()})
