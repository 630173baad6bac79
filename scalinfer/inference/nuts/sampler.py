"""NUTS chains as one compiled program per model, data shapes and settings, with the data as arguments.

NumPyro's ``MCMC(...).run(rng, **data)`` maps over chains a function that closes over the data, so the data
are constants of the compiled program: every table, even of the same shapes, compiles again, and the
persistent compilation cache never hits across datasets. Here the program is a function of
``(rng_key, first, preconditioner, target_accept, data)``:

- the chain runs on coordinates w, z = mean + scale * w (`Preconditioner`), where z is the model's flat
  unconstrained vector; the potential is `numpyro.infer.util.potential_energy(model, (), data, z)`; the
  potential and its gradient at the chain's start come in with it (`ChainStart`), evaluated before the
  program by the posterior-mode search's batched program, so that the gradient is compiled once, not twice;
- each transition is NUTS (Hoffman and Gelman 2014, multinomial sampling of the trajectory as Betancourt
  2017): a momentum r = S eps drawn from the mass matrix's square root, then NumPyro's public tree builder
  `numpyro.infer.hmc_util.build_tree` over its `velocity_verlet` integrator with the step size and inverse
  mass matrix this loop holds (a dense one's transitions in coordinates whitened by it, where the metric is the
  identity: `nuts_kernel`). NumPyro's kernel (`numpyro.infer.hmc.hmc`) keeps its step size and mass
  matrix in its own adaptation state, set at initialisation, so an adaptation of ours would have to write
  into that state; building the tree here keeps the kernel stateless (`nuts_kernel`);
- warmup (`scalinfer.inference.nuts.adaptation.window_adaptation`, its step size adapted toward the mean
  acceptance `target_accept`, an argument so that a run at another target compiles nothing) and sampling run in
  one `lax.fori_loop`, collecting the draws of w and the `NutsStats`; the draws are then mapped to the
  constrained space (deterministic sites included) by a program of their own
  (`scalinfer.inference.compiled.constrain`, the data again an argument);
- chains are mapped over devices, one chain per device, when JAX has a device per chain: `jax.pmap` with
  the data broadcast, written as the `jit` of a `shard_map`; else they are vectorized (`jax.vmap`) on one
  device. Either way the chains share a named axis, ``"chain"``, along which warmup pools their draws: one
  mass matrix and one step size for every chain, estimated from all of them (`window_adaptation`).

The random keys split as NumPyro's ``MCMC.run`` and HMC kernel split them: where the adaptation's estimates
are NumPyro's (one chain, and every window but the short dense ones of `adaptation.shrunk_windows`), its draws
are those of NumPyro's NUTS on the same coordinates, number for number up to rounding: of the start's
potential (evaluated in the data's float type, and batched), and with a dense metric of the whitened
transitions' products (the same trajectories in exact arithmetic). With more chains the pooled warmup is not
NumPyro's, which adapts each chain alone.

The potential can run in float32 while the integrator, the adaptation and the constrained draws stay in the
data's type (`NutsConfig.potential_dtype`). Warmup builds its trees under a lower depth cap than sampling
(`NutsConfig.warmup_tree_depth`): before the mass matrix is adapted NUTS builds its longest trees, whose only
use is to feed the adaptation.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import export, lax
from numpyro.infer.hmc_util import IntegratorState, build_tree, euclidean_kinetic_energy, velocity_verlet
from numpyro.infer.util import potential_energy
from tqdm import tqdm

from scalinfer.errors import ModelError
from scalinfer.inference.compiled import (LoweredProgram, constrain, join_kwargs, program, split_kwargs,
                                         tree_unraveler)
from scalinfer.inference.nuts.adaptation import ADAPT, NutsConfig, NutsParameters, terminal_window, window_adaptation
from scalinfer.inference.optimize import Objective

__all__ = ["run_nuts", "lower_nuts", "chain_keys", "CHAIN_METHODS", "nuts_kernel", "Preconditioner", "ChainState",
           "NutsStats", "STAT_FIELDS", "MAX_DELTA_ENERGY", "PROGRESS_CHUNKS"]

#: a transition whose energy rises by more than this along the trajectory is divergent (NumPyro's and Stan's)
MAX_DELTA_ENERGY = 1000.0


class NutsStats(NamedTuple):
    """Per-transition statistics, as NumPyro's ``MCMC.get_extra_fields`` names them.

    Attributes
    ----------
    diverging : whether the trajectory's energy error exceeded `MAX_DELTA_ENERGY` (the integrator left the
        typical set: the region near that point may be under-sampled).
    num_steps : leapfrog steps (gradient evaluations) in the trajectory, at most 2^depth - 1.
    accept_prob : the mean over the trajectory's states of min(1, exp(H_0 - H)), what the step size is
        adapted on.
    energy : the Hamiltonian H = potential + r' M^-1 r / 2 at the chosen state (for E-BFMI).
    """

    diverging: jax.Array
    num_steps: jax.Array
    accept_prob: jax.Array
    energy: jax.Array


#: how `run_nuts` maps its chains: one per device, or batched on one device
CHAIN_METHODS = ("parallel", "vectorized")

#: the per-draw statistics `run_nuts` returns
STAT_FIELDS = NutsStats._fields


class ChainState(NamedTuple):
    """A chain: its position w (d,), the potential energy and its gradient there, and the random key of its
    next transition."""

    position: jax.Array
    potential_energy: jax.Array
    potential_grad: jax.Array
    rng_key: jax.Array


def nuts_kernel(potential_fn: Callable, max_tree_depth: int, max_delta_energy: float = MAX_DELTA_ENERGY,
                product_dtype=None):
    r"""(init, step) of NUTS on the flat position's `potential_fn` (the negative log density).

    ``init(position, rng_key) -> ChainState``. ``step(state, parameters, tree_depth) -> (ChainState,
    NutsStats)``: one transition with the step size and mass matrix of `parameters` (`NutsParameters`),
    the tree at most `tree_depth` (traced; at most `max_tree_depth`) doublings deep. The state's key splits
    in three as in NumPyro's HMC kernel: the next transition's, the momentum's and the tree's.

    With a dense mass matrix the transition runs in whitened coordinates u about its start w_0,

    .. math:: w = w_0 + A u, \qquad A A' = M^{-1}, \qquad A = S^{-T}:

    there the metric is the identity, the momentum r = S eps becomes A' r = eps, the potential's gradient is
    A' times w's, and the tree, its energies and its U-turn checks are those of the dense metric in w (the same
    trajectory in exact arithmetic); the proposal maps back as w_0 + A u, its gradient as S times u's. NumPyro's
    tree builder multiplies by a dense M^-1 five to six times a leapfrog step; here the one product A u sits
    in the potential, evaluated in `product_dtype` (the potential's float type; None: the position's).
    """
    vv_init, vv_update = velocity_verlet(potential_fn, euclidean_kinetic_energy)

    def init(position, rng_key) -> ChainState:
        s = vv_init(position, None)
        return ChainState(s.z, s.potential_energy, s.z_grad, rng_key)

    def step(state: ChainState, parameters: NutsParameters, tree_depth) -> tuple[ChainState, NutsStats]:
        rng_key, momentum_key, tree_key = jax.random.split(state.rng_key, 3)
        eps = jax.random.normal(momentum_key, jnp.shape(state.position), jnp.result_type(state.position))
        sqrt = parameters.mass_matrix_sqrt
        settings = dict(max_delta_energy=max_delta_energy, max_tree_depth=(tree_depth, max_tree_depth))
        if sqrt.ndim == 1:
            start = IntegratorState(state.position, sqrt * eps, state.potential_energy, state.potential_grad)
            tree = build_tree(vv_update, euclidean_kinetic_energy, start, parameters.inverse_mass_matrix,
                              parameters.step_size, tree_key, **settings)
            new = ChainState(tree.z_proposal, tree.z_proposal_pe, tree.z_proposal_grad, rng_key)
        else:
            w0, factor = state.position, parameters.position_factor
            ptype = w0.dtype if product_dtype is None else product_dtype
            factor_p = factor.astype(ptype)

            def position(u):
                return w0 + (factor_p @ u.astype(ptype)).astype(w0.dtype)

            _, update = velocity_verlet(lambda u: potential_fn(position(u)), euclidean_kinetic_energy)
            start = IntegratorState(jnp.zeros_like(w0), eps, state.potential_energy, factor.T @ state.potential_grad)
            tree = build_tree(update, euclidean_kinetic_energy, start, jnp.ones_like(w0), parameters.step_size,
                              tree_key, **settings)
            new = ChainState(position(tree.z_proposal), tree.z_proposal_pe, sqrt @ tree.z_proposal_grad, rng_key)
        stats = NutsStats(tree.diverging, tree.num_proposals, tree.sum_accept_probs / tree.num_proposals,
                          tree.z_proposal_energy)
        return new, stats

    return init, step


@functools.partial(jax.tree_util.register_dataclass, data_fields=("mean", "scale", "metric"), meta_fields=("sites",))
@dataclasses.dataclass(frozen=True)
class Preconditioner:
    """The chain's coordinates: the model's unconstrained point z, flat, is mean + scale * w.

    A pytree whose leaves (`mean`, `scale`, `metric`) are arguments of the compiled program, like the data, and
    whose structure (`sites`) is part of the program's identity.

    Attributes
    ----------
    mean : (d,) the flat point w = 0 stands for (the posterior mode, in a fit).
    scale : (d,) per-coordinate scales (the Laplace standard deviations at the mode, in a fit). With both,
        every coordinate of w is O(1) in the posterior, which is what the mass-matrix adaptation's
        regularization toward 1e-3 I assumes (see `adaptation.regularized_mass_matrix`).
    sites : ((name, shape), ...) of the unconstrained sites, in name order: z's flat layout, as
        `jax.flatten_util.ravel_pytree` lays out a dict.
    metric : (d, d) the covariance of w that warmup starts from (its first inverse mass matrix): the identity,
        or an estimate of the posterior's (in a fit, the Laplace correlations in coordinates fitted to the mode).
        One other than the identity is kept until a window of `adaptation.WINDOW_DRAWS` d draws replaces it
        (`adaptation.window_adaptation`).
    """

    mean: Any
    scale: Any
    sites: tuple[tuple[str, tuple[int, ...]], ...]
    metric: Any = None

    @classmethod
    def around(cls, center: dict[str, Any], scale: Any = None, metric: Any = None) -> Preconditioner:
        """w = (z - `center`) / `scale`, `center` a dict of the sites' unconstrained values (`scale`
        default 1), warmup starting from `metric` (default the identity): a symmetric positive definite
        (d, d)."""
        sites = tuple((k, tuple(np.shape(center[k]))) for k in sorted(center))
        mean = np.concatenate([np.ravel(np.asarray(center[k], float)) for k, _ in sites]) if sites else \
            np.zeros(0)
        scale = np.ones_like(mean) if scale is None else np.asarray(scale, float)
        if scale.shape != mean.shape:
            raise ModelError(f"scale must have shape {mean.shape} (the flat unconstrained point), got {scale.shape}")
        d = mean.shape[0]
        metric = np.identity(d) if metric is None else np.asarray(metric, float)
        if metric.shape != (d, d):
            raise ModelError(f"metric must have shape {(d, d)} (the flat unconstrained point's), got {metric.shape}")
        return cls(mean, scale, sites, metric)

    @property
    def dim(self) -> int:
        return sum(int(np.prod(shape)) for _, shape in self.sites)

    def to_z(self, w) -> dict[str, jax.Array]:
        """The sites' unconstrained values at flat coordinates `w` (d,). Differentiable in reverse mode only
        (`_split`'s gradient is written out)."""
        z = self.mean + self.scale * w
        return dict(zip([name for name, _ in self.sites], _split(z, tuple(shape for _, shape in self.sites))))

    def to_w(self, z: dict[str, Any]) -> np.ndarray:
        """Flat coordinates w of the sites' unconstrained values `z` (NumPy)."""
        flat = np.concatenate([np.ravel(np.asarray(z[k], float)) for k, _ in self.sites])
        return (flat - np.asarray(self.mean)) / np.asarray(self.scale)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _split(z, shapes: tuple[tuple[int, ...], ...]) -> tuple[jax.Array, ...]:
    """Flat `z` cut into consecutive pieces of `shapes`. Its gradient is one concatenation of the pieces'
    (`_split_bwd`): JAX's transpose of each slice is a pad to z's length, which XLA:CPU sums element by element
    over every piece."""
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(z[start:start + size].reshape(shape))
        start += size
    return tuple(out)


def _split_fwd(z, shapes):
    return _split(z, shapes), None


def _split_bwd(shapes, _, cotangents):
    return (jnp.concatenate([jnp.ravel(c) for c in cotangents]),)


_split.defvjp(_split_fwd, _split_bwd)


@functools.partial(jax.jit, static_argnums=1)
def _chain_keys(key, chains: int):
    """(chains, 2) the chains' first keys, split from `key` (``jax.random.PRNGKey(seed)``) as NumPyro's
    ``MCMC.run`` and HMC kernel split them: one key per chain; of it, one for the model's initialisation (unused
    here) and three at the kernel's initialisation, of which the first is the chain's. A small program of its own,
    so that NUTS's program does not carry the splits' code for work done once."""
    keys = jax.random.split(key, chains) if chains > 1 else key[None]  # as numpyro.infer.MCMC.run
    return jax.vmap(lambda k: jax.random.split(jax.random.split(k)[0], 3)[0])(keys)


def chain_keys(seed: int, chains: int) -> np.ndarray:
    """The chains' first keys (chains, 2) of `run_nuts` with `seed`, split as NumPyro's ``MCMC.run`` and HMC kernel
    split them (a small program of its own: `scalinfer.fit` computes them in a thread while it traces NUTS's
    program, whose lowering needs only their shape)."""
    return np.asarray(_chain_keys(jax.random.PRNGKey(seed), int(chains)))


def _cast(tree, dtype):
    """Floating-point leaves of `tree` as `dtype` (None: unchanged)."""
    if dtype is None:
        return tree
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x, tree)


class ChainStart(NamedTuple):
    """Where a chain starts: its position w (d,), and the potential energy and its gradient (in w) there.

    `run_nuts` evaluates them before the program, with the batched program the posterior-mode search compiled
    (`scalinfer.inference.optimize.Objective`), so that the NUTS program holds one copy of the gradient, the
    one its leapfrog steps call: a second, for the start alone, cost as much compilation (seconds on CPU) as
    the first."""

    position: jax.Array
    potential_energy: jax.Array
    potential_grad: jax.Array


def _chain_starts(model_fn: Callable, model_kwargs: dict[str, Any], like: dict[str, Any],
                  preconditioner: Preconditioner, init_w: np.ndarray) -> ChainStart:
    """The `ChainStart` of each row of `init_w` (chains, d): the potential at z = mean + scale * w and its
    gradient in w, scale * dU/dz, evaluated in the data's float type."""
    scale = np.asarray(preconditioner.scale, float)
    pe, grad_z = Objective(model_fn, model_kwargs, like)(np.asarray(preconditioner.mean, float) + scale * init_w)
    return ChainStart(init_w, pe, grad_z * scale)


class _Loop(NamedTuple):
    """What the loop over warmup + sampling carries from one iteration (and one chunk of iterations) to the
    next: the chain, the adaptation and the parameters it set, the draws of w and their `NutsStats` so far,
    and each warmup iteration's tree size and step size."""

    chain: ChainState
    adaptation: Any
    parameters: NutsParameters
    draws: jax.Array
    stats: NutsStats
    warm_steps: jax.Array
    warm_step_size: jax.Array


# what NUTS's program takes and returns, named for its stored form (`scalinfer.inference.compiled.StoredProgram`)
for _node in (NutsStats, ChainState, ChainStart, _Loop):
    export.register_namedtuple_serialization(_node, serialized_name=f"scalinfer.nuts.{_node.__name__}")
export.register_pytree_node_serialization(
    Preconditioner, serialized_name="scalinfer.nuts.Preconditioner",
    serialize_auxdata=lambda meta: json.dumps(meta).encode(),  # (sites,): its one meta field
    deserialize_auxdata=lambda data: (tuple((name, tuple(shape)) for name, shape in json.loads(data)[0]),))


def _chain_fn(model_fn: Callable, static: tuple, config: NutsConfig, axis_name: str | None = None, chains: int = 1):
    """One chain, in chunks: ``(rng_key, first, preconditioner, target_accept, data, loop, start, stop) -> loop``.

    The program runs iterations ``start`` to ``stop`` of warmup + sampling, carrying `_Loop` (the draws of w and
    their stats among it) in and out; at ``start == 0`` it ignores the `loop` given (any value of its shapes,
    `_loop_shapes`) and starts the chain at `first` (`ChainStart`). One chunk of every iteration is the whole
    run; a few chunks let the caller report progress between them with the same compiled program, and the same
    numbers: the chunks run the same loop body on the same carry."""
    dtype = None if config.potential_dtype is None else jnp.dtype(config.potential_dtype)
    warmup, samples = config.warmup, config.samples

    def parts(rng_key, first: ChainStart, preconditioner: Preconditioner, target_accept, data):
        kwargs = join_kwargs(data, static)  # the data come in the potential's precision (`_program_and_arguments`)
        # the potential's value in a type known without tracing the model: `potential_dtype`, else JAX's default
        # float type (the data's, as `run_nuts` passes them); so the carry's shapes (`loop_shapes`) need no trace.
        # (A model whose potential promotes to float64 under a float32 `potential_dtype` has its value rounded.)
        pe_type = jnp.result_type(float) if dtype is None else dtype

        def potential(w):
            return potential_energy(model_fn, (), kwargs, _cast(preconditioner.to_z(w), dtype)).astype(pe_type)

        _, step = nuts_kernel(potential, max(config.max_tree_depth, config.warmup_tree_depth), product_dtype=dtype)
        w0 = first.position
        adapt_init, adapt_update, adapt_final = window_adaptation(warmup, w0.shape[0], config.adapt, target_accept,
                                                                  axis_name, chains)

        def fresh() -> _Loop:
            # the chain's key (`_chain_keys`); the start's potential and gradient in the types the transitions carry
            # them in
            chain = ChainState(w0, first.potential_energy.astype(pe_type), first.potential_grad.astype(w0.dtype),
                               rng_key)
            adaptation = adapt_init(1.0, preconditioner.metric)
            ftype, itype = jnp.result_type(float), jnp.result_type(int)
            draws = jnp.zeros((samples,) + w0.shape, w0.dtype)
            stats = NutsStats(*(jnp.zeros(samples, t) for t in (bool, itype, ftype, ftype)))
            # warmup's tree sizes and step sizes (one slot at least: JAX refuses even a dropped write into an
            # empty array; sliced off below)
            warm_steps, warm_step_size = jnp.zeros(max(warmup, 1), itype), jnp.zeros(max(warmup, 1), ftype)
            return _Loop(chain, adaptation, adaptation.parameters, draws, stats, warm_steps, warm_step_size)

        # one loop over warmup + sampling, writing draw i - warmup (warmup iterations write slot 0, which the
        # first draw overwrites): one copy of the NUTS transition in the program, not one per phase
        def body(i, loop: _Loop) -> _Loop:
            chain, adaptation, parameters, draws, stats, warm_steps, warm_step_size = loop
            depth = jnp.where(i < warmup, config.warmup_tree_depth, config.max_tree_depth)
            chain, info = step(chain, parameters, depth)
            warm_steps = warm_steps.at[i].set(info.num_steps, mode="drop")
            warm_step_size = warm_step_size.at[i].set(parameters.step_size, mode="drop")
            if warmup:
                def adapt(adaptation):
                    adaptation = adapt_update(adaptation, i, chain.position, info.accept_prob)
                    last = lax.cond(i == warmup - 1, adapt_final, lambda a: a.parameters, adaptation)
                    return adaptation, last

                adaptation, parameters = lax.cond(i < warmup, adapt, lambda a: (a, parameters), adaptation)
            j = jnp.maximum(i - warmup, 0) % samples  # sampling's blocks after the first reuse the slots
            draws = lax.dynamic_update_index_in_dim(draws, chain.position, j, 0)
            stats = jax.tree.map(lambda b, x: lax.dynamic_update_index_in_dim(b, x.astype(b.dtype), j, 0), stats, info)
            return _Loop(chain, adaptation, parameters, draws, stats, warm_steps, warm_step_size)

        return fresh, body

    def scalinfer_nuts(rng_key, first: ChainStart, preconditioner: Preconditioner, target_accept, data, loop: _Loop,
                       start, stop):
        fresh, body = parts(rng_key, first, preconditioner, target_accept, data)
        loop = lax.cond(start == 0, lambda _: fresh(), lambda given: given, loop)
        return lax.fori_loop(start, stop, body, loop)

    shapes: dict[Any, _Loop] = {}  # the carry's shapes by the arguments': a fit asks twice, and warm fits again

    def loop_shapes(rng_key, first: ChainStart, preconditioner: Preconditioner, data) -> _Loop:
        args = (rng_key, first, preconditioner, data)
        leaves, tree = jax.tree.flatten(args)
        # JAX's default float type too: the carry's floats follow it (float64 only where the caller enabled it)
        key = (jnp.result_type(float), tree, tuple((np.shape(x), np.result_type(x)) for x in leaves))
        if key not in shapes:
            # (the target acceptance enters only the adaptation's updates, not the carry's shapes)
            shapes[key] = jax.eval_shape(lambda k, f, p, d: parts(k, f, p, 0.5, d)[0](), *args)
        return shapes[key]

    return scalinfer_nuts, loop_shapes


@program
def _nuts_program(model_fn, static, config: NutsConfig, chains: int, parallel: bool):
    """The compiled program of all `chains` chains, the shapes of what one chain's loop carries (`_chain_fn`) and
    where the loop goes (None: the default device). Every argument but the data, the preconditioner, the target
    acceptance and the chunk's bounds has a leading chain axis, named ``"chain"``: the warmup pools the chains'
    draws along it (`window_adaptation`).

    - `parallel`: one chain per device, the loop split over them as the program returns it (so that the chunks
      after the first do not compile again): what ``jax.pmap(chain, in_axes=(0, 0, None, None, 0, None,
      None))`` is in this JAX (a `jit` of a `shard_map` over a mesh of the devices), written out so that the
      program keeps its name in JAX's compile logs and cache;
    - else the chains vectorized (`jax.vmap`) on one device: each transition of the batch waits for its longest
      tree, which with the pooled warmup's one kernel differ little from chain to chain."""
    fn, loop_shapes = _chain_fn(model_fn, static, config, "chain" if chains > 1 else None, chains)
    axes = (0, 0, None, None, None, 0, None, None)
    if not parallel:
        def scalinfer_nuts_vectorized(keys, first, preconditioner, target_accept, data, loop, start, stop):
            return jax.vmap(fn, in_axes=axes, axis_name="chain")(keys, first, preconditioner, target_accept, data,
                                                                  loop, start, stop)

        return jax.jit(scalinfer_nuts_vectorized), loop_shapes, None
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.local_devices()[:chains]), ("chain",))

    def one_chain_per_device(keys, first, preconditioner, target_accept, data, loop, start, stop):
        first, loop = (jax.tree.map(lambda x: x[0], t) for t in (first, loop))
        out = fn(keys[0], first, preconditioner, target_accept, data, loop, start, stop)
        return jax.tree.map(lambda x: x[None], out)

    def scalinfer_nuts_chains(keys, first, preconditioner, target_accept, data, loop, start, stop):
        chain, everywhere = PartitionSpec("chain"), PartitionSpec()
        return jax.shard_map(one_chain_per_device, mesh=mesh,
                             in_specs=tuple(everywhere if a is None else chain for a in axes),
                             out_specs=chain, check_vma=False)(keys, first, preconditioner, target_accept, data,
                                                               loop, start, stop)

    return jax.jit(scalinfer_nuts_chains), loop_shapes, NamedSharding(mesh, PartitionSpec("chain"))


#: chunks of warmup and of sampling each, when progress is shown (one chunk of each phase's iterations
#: costs a return to Python: ~0.1 ms, against milliseconds per NUTS iteration)
PROGRESS_CHUNKS = 10


def _chunks(warmup: int, lo: int, hi: int, progress: bool, split_sampling: bool = False,
            terminal: int | None = None) -> list[tuple[int, int]]:
    """(start, stop) of the program's calls for a block of draws, iterations `lo` to `hi` of warmup + sampling;
    the first block (``lo == warmup``) runs warmup too: the whole block at once, or with progress
    `PROGRESS_CHUNKS` chunks of warmup (first block) and as many of sampling; with `split_sampling` alone, warmup
    at once and sampling in `PROGRESS_CHUNKS` chunks. `terminal`: an iteration of the first block's warmup where
    a call ends (the start of warmup's terminal window, `terminal_window`)."""
    first = lo == warmup
    cut = [terminal] if first and terminal is not None and 0 < terminal < warmup else []
    if not (progress or split_sampling):
        edges = [0 if first else lo, *cut, hi]
        return list(zip(edges[:-1], edges[1:]))
    warm = np.linspace(0, warmup, PROGRESS_CHUNKS + 1 if progress else 2) if first else np.array([lo])
    edges = np.unique(np.concatenate([warm, cut, np.linspace(lo, hi, PROGRESS_CHUNKS + 1)]).round())
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _slots(warmup: int, samples: int, lo: int, hi: int) -> np.ndarray:
    """The draws' buffer slots that iterations `lo` to `hi` (sampling's, ``lo >= warmup``) write: the program
    writes draw i - warmup into slot (i - warmup) mod `samples` (`_chain_fn`)."""
    return (np.arange(lo, hi) - warmup) % samples


def _run_chunks(run, args, target, loop, warmup: int, samples: int, chunks, bar, diverging_before: int = 0,
                stop_when_divergent: bool = False) -> tuple[_Loop, int]:
    """Call the program over `chunks` with `args` (the chains' keys and starts, the preconditioner, the data) at
    target acceptance `target`, updating `bar` (tqdm) after each with the phase and the divergent draws so far
    (`diverging_before` of earlier blocks); returns the loop's last state and the iteration it stopped at: the
    last chunk's end, or with `stop_when_divergent` the end of the first chunk that sampled a divergent draw. The
    bar says "starting" until the first chunk returns: that call also compiles the program when neither JAX's
    caches nor the persistent one hold it."""
    if not chunks:
        return loop, 0
    diverging, lo = diverging_before, max(chunks[0][0], warmup)
    for start, stop in chunks:
        keys, first, preconditioner, data = args
        loop = run(keys, first, preconditioner, target, data, loop, start, stop)
        if bar.disable and not stop_when_divergent:
            continue
        if stop > warmup:  # this block's sampled draws so far (warmup iterations write slot 0, overwritten)
            slots = _slots(warmup, samples, lo, stop)
            diverging = diverging_before + int(np.asarray(loop.stats.diverging)[..., slots].sum())
        if not bar.disable:
            bar.set_description_str(f"{bar.desc.split(':')[0]}: {'warmup' if stop <= warmup else 'sampling'}",
                                    refresh=False)
            bar.set_postfix_str(f"{diverging} divergent", refresh=False)
            bar.update(stop - start)
        if stop_when_divergent and diverging > diverging_before:
            return loop, stop
    return loop, chunks[-1][1]


def _config(warmup, samples, adapt, max_tree_depth, warmup_tree_depth, potential_dtype) -> NutsConfig:
    """`run_nuts`'s and `lower_nuts`'s settings as the program's `NutsConfig` (warmup's depth cap defaults to
    sampling's)."""
    return NutsConfig(int(warmup), int(samples), adapt, int(max_tree_depth),
                      int(max_tree_depth if warmup_tree_depth is None else warmup_tree_depth), potential_dtype)


def _target(target_accept: float) -> np.ndarray:
    """The program's target acceptance argument, in JAX's default float type (checked: in (0, 1))."""
    if not 0.0 < float(target_accept) < 1.0:
        raise ModelError(f"target_accept must be between 0 and 1 (exclusive), got {target_accept!r}")
    return np.asarray(float(target_accept), jnp.result_type(float))


def _program_and_arguments(model_fn: Callable, model_kwargs: dict[str, Any], first: ChainStart,
                           preconditioner: Preconditioner, config: NutsConfig, chains: int, chain_method: str,
                           seed: int | None):
    """The compiled program `run_nuts` calls (`_nuts_program`) and what it is called with besides the chains'
    starts and the preconditioner: (program, the chains' keys, the data, the loop's first carry). One function
    for `run_nuts` and `lower_nuts`, so that the program lowered ahead is the one run (`seed` None: the keys'
    shape only, for lowering)."""
    data, static = split_kwargs(model_kwargs)
    # the potential's data in its float type, cast here in NumPy: cast in the program, they cost it a kernel each
    if config.potential_dtype is not None:
        data = _cast(jax.tree.map(np.asarray, data), np.dtype(config.potential_dtype))
    # in NumPy: a JAX array on one device would be split across the chains' devices by a program of its own;
    # without a seed, zeros of their shape (what lowering needs: `_chain_keys` is then neither compiled nor run)
    if seed is None:
        like = jax.eval_shape(lambda: _chain_keys(jax.random.PRNGKey(0), int(chains)))
        keys = np.zeros(like.shape, like.dtype)
    else:
        keys = chain_keys(seed, chains)
    if chain_method not in CHAIN_METHODS:
        raise ModelError(f"chain_method must be one of {CHAIN_METHODS}, got {chain_method!r}")
    parallel = chain_method == "parallel" and chains > 1
    run, loop_shapes, loop_sharding = _nuts_program(model_fn, static, config, int(chains), parallel)
    shapes = loop_shapes(jax.ShapeDtypeStruct(keys.shape[1:], keys.dtype), jax.tree.map(lambda x: x[0], first),
                         preconditioner, data)
    loop = jax.tree.map(lambda s: np.zeros((chains,) + s.shape, s.dtype), shapes)
    if loop_sharding is not None:  # as the program returns it (an empty array, which XLA leaves unsplit, whole)
        loop = jax.tree.map(lambda x: jax.device_put(x, loop_sharding if x.size else loop_sharding.update(
            spec=jax.sharding.PartitionSpec())), loop)
    return run, keys, data, loop


def lower_nuts(model_fn: Callable, model_kwargs: dict[str, Any], like: dict[str, Any], *, chains: int,
               warmup: int, samples: int, adapt: str = "dense", target_accept: float = 0.8, max_tree_depth: int = 10,
               warmup_tree_depth: int | None = None, chain_method: str = "parallel",
               potential_dtype: str | None = None) -> LoweredProgram:
    """The program `run_nuts` runs with these settings, traced and lowered but not compiled, for unconstrained
    sites shaped as `like` (name -> array of one chain; only the shapes matter: neither the chains' starts nor the
    preconditioner's values enter the program).

    ``.compile()`` of the result (a `scalinfer.inference.compiled.LoweredProgram`) releases the GIL while XLA
    compiles (seconds on CPU), so a caller can compile the program in a thread while it finds the chains' starts,
    as `scalinfer.fit` does while it searches for the posterior mode; `run_nuts` then runs that executable (the
    program keeps it for arguments of these shapes). Tracing stays in the caller's thread: NumPyro's effect
    handlers live on one process-wide stack."""
    config = _config(warmup, samples, adapt, max_tree_depth, warmup_tree_depth, potential_dtype)
    preconditioner = Preconditioner.around({k: np.zeros(v.shape) for k, v in like.items()})
    d = preconditioner.dim
    first = ChainStart(np.zeros((chains, d)), np.zeros(chains), np.zeros((chains, d)))
    run, keys, data, loop = _program_and_arguments(model_fn, model_kwargs, first, preconditioner, config, chains,
                                                   chain_method, None)
    return run.lower(keys, first, preconditioner, _target(target_accept), data, loop, 0, 0)


def run_nuts(model_fn: Callable, model_kwargs: dict[str, Any], init_params: dict[str, Any], *, chains: int,
             warmup: int, samples: int, seed: int = 0, adapt: str = "dense", target_accept: float = 0.8,
             max_tree_depth: int = 10, warmup_tree_depth: int | None = None, chain_method: str = "parallel",
             preconditioner: Preconditioner | None = None, potential_dtype: str | None = None,
             progress: bool | None = None, max_samples: int | None = None, extend_by: int | None = None,
             enough: Callable[[dict[str, np.ndarray], dict[str, np.ndarray]], bool] | None = None,
             stop_when_divergent: bool = False, terminal_target_accept: float | None = None,
             careful_target_accept: float | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run NUTS on `model_fn` with `model_kwargs` as data.

    Parameters
    ----------
    init_params : unconstrained starting values, name -> array with a leading axis of size `chains`.
    preconditioner : the chain's coordinates (`Preconditioner`; default: z itself). With the mode and the
        Laplace standard deviations (`Preconditioner.around`) every coordinate is O(1) in the posterior.
        That matters because the mass-matrix adaptation shrinks its estimate toward 1e-3 times the identity:
        for a parameter of posterior sd 1e-4 (a setting's log loss on smoothed curves) that is a 10^4-fold
        error in its variance, which forces tiny steps at maximum tree depth. Its `metric` is the mass
        matrix warmup starts from (`Preconditioner`).
    adapt : mass-matrix adaptation during warmup (`ADAPT`): ``"dense"``, ``"diag"`` or ``"none"`` (the
        preconditioner's metric throughout, by default the identity on w; the step size is always adapted).
    target_accept : the mean acceptance probability warmup adapts the step size toward, in (0, 1): an argument of
        the compiled program, so that a run at another one (`scalinfer.fit`'s careful rerun) compiles nothing.
    terminal_target_accept : the target from the start of warmup's terminal window on (`terminal_window`: its
        last iterations, where only the step size adapts, by a dual average restarted there), and so the one the
        step size of sampling is adapted toward. Default: `target_accept`.
    careful_target_accept : with `stop_when_divergent`, where the run diverges it goes again from the start of
        warmup's terminal window, with the chains, the mass matrix and the restarted dual average as warmup had
        them there, at this target: the run with ``terminal_target_accept=careful_target_accept``, bit for bit,
        without paying again for the warmup before that window (the adaptation of the mass matrix, most of it).
        Once: where that run diverges too, it stops likewise. The stats' ``target_accept`` says which ran.
    max_tree_depth, warmup_tree_depth : NUTS's tree depth caps after and during warmup (default: the same).
    chain_method : ``"parallel"`` (one device per chain) or ``"vectorized"`` (the chains batched in one program
        on one device), one of `CHAIN_METHODS`; see `runtime.chain_method_for`. The two run the same per-chain
        program and draw from the same distribution, but not the same draws: the batched program rounds
        differently, and NUTS's trajectories amplify a difference in the last bit.
    potential_dtype : evaluate the potential and its gradient in this float type (e.g. ``"float32"``: the
        data are cast once, the position at each evaluation); the integrator, the adaptation and the
        constrained draws keep the data's type. None: the data's type.
    progress : a progress bar on stderr (iterations done of warmup + sampling, divergent draws so far, elapsed
        time and an estimate of what is left); None (default): only when stderr is a terminal. The run then
        goes in `PROGRESS_CHUNKS` chunks of warmup and as many of sampling, calls of the same compiled program
        that give the same draws, bit for bit, as one call.
    max_samples, extend_by, enough : draw more than `samples` per chain, in blocks of `extend_by` (1 to
        `samples`; default `samples`; the last one shorter if need be), up to `max_samples` (default `samples`: no
        more), while ``enough(draws, stats)`` (the draws and stats so far, as returned) is False. Each block
        continues the chains where the last stopped, with the step size and mass matrix warmup set, so the draws
        of a run extended to n are those of one run of n draws, bit for bit; a convergence criterion as `enough`
        is thus Vehtari et al.'s (2021) advice, "run longer", made a rule. The blocks run the same compiled
        program as the first.
    stop_when_divergent : sample in `PROGRESS_CHUNKS` chunks per block (as with progress) and stop at the end of
        the first chunk that sampled a divergent transition, for a caller that would not keep a run with one:
        the draws returned are then the first ones of the whole run, bit for bit, fewer than asked for (their
        stats hold the divergence), and no block follows.

    Returns
    -------
    (draws, stats): constrained draws (sampled and deterministic sites) name -> (chains, samples, ...), and
    `STAT_FIELDS` name -> (chains, samples), as NumPyro's ``get_samples(group_by_chain=True)`` and
    ``get_extra_fields(group_by_chain=True)``, plus ``warmup_num_steps`` and ``warmup_step_size``
    (chains, warmup): each warmup iteration's leapfrog steps and the step size it ran with, and
    ``target_accept`` (a 0-d array): the terminal target acceptance of the run returned.
    """
    if adapt not in ADAPT:
        raise ModelError(f"adapt must be one of {ADAPT}, got {adapt!r}")
    target = _target(target_accept)
    terminal = target if terminal_target_accept is None else _target(terminal_target_accept)
    careful = None if careful_target_accept is None else _target(careful_target_accept)
    if careful is not None and not stop_when_divergent:
        raise ModelError("careful_target_accept is the target of a run that goes again where it diverged: it needs "
                         "stop_when_divergent=True")
    warmup, samples = int(warmup), int(samples)
    if samples < 1:
        raise ModelError(f"samples must be at least 1, got {samples}")
    max_samples = int(samples if max_samples is None else max_samples)
    if max_samples < samples:
        raise ModelError(f"max_samples must be at least samples={samples}, got {max_samples}")
    extend_by = int(samples if extend_by is None else extend_by)
    if not 1 <= extend_by <= samples:
        raise ModelError(f"extend_by must be from 1 to samples={samples}, got {extend_by}")
    init = {k: np.asarray(v, dtype=float) for k, v in dict(init_params).items()}
    lead = {np.shape(v)[0] if np.ndim(v) else None for v in init.values()}
    if lead != {chains}:
        raise ModelError(f"init_params must have a leading axis of size chains={chains}, got {sorted(lead, key=str)}")
    like = {k: v[0] for k, v in init.items()}
    preconditioner = preconditioner or Preconditioner.around(jax.tree.map(np.zeros_like, like))
    expected = tuple((k, tuple(np.shape(like[k]))) for k in sorted(like))
    if preconditioner.sites != expected:
        raise ModelError(f"the preconditioner's sites {preconditioner.sites} are not init_params' {expected}")
    init_w = np.stack([preconditioner.to_w({k: v[c] for k, v in init.items()}) for c in range(chains)])
    first = _chain_starts(model_fn, model_kwargs, like, preconditioner, init_w)
    config = _config(warmup, samples, adapt, max_tree_depth, warmup_tree_depth, potential_dtype)
    run, keys, data, loop = _program_and_arguments(model_fn, model_kwargs, first, preconditioner, config, chains,
                                                   chain_method, seed)
    show = sys.stderr is not None and sys.stderr.isatty() if progress is None else bool(progress)
    per_block = warmup + samples
    unraveled = tree_unraveler({k: np.zeros(shape) for k, shape in preconditioner.sites})
    blocks: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = []  # per block: (draws, stats)

    def keep(loop: _Loop, lo: int, hi: int) -> None:
        """The block's draws (iterations `lo` to `hi` of warmup + sampling) of w in the model's constrained space,
        deterministic sites included, and its stats: a program of its own, which compiles in a fraction of what
        the same code added to the NUTS program (benchmarks/README.md, "quickstart"). It constrains the whole
        buffer of `samples` draws whatever the block's length, so it compiles once."""
        loop = jax.device_get(loop)
        slots = _slots(warmup, samples, lo, hi)
        z = unraveled(np.asarray(preconditioner.mean) + np.asarray(preconditioner.scale) * np.asarray(loop.draws))
        blocks.append(({k: v[:, slots] for k, v in constrain(model_fn, z, model_kwargs, batch_ndims=2).items()},
                       {k: np.asarray(v)[:, slots] for k, v in loop.stats._asdict().items()}))
        if len(blocks) == 1:
            blocks[0][1]["warmup_num_steps"] = np.asarray(loop.warm_steps)[:, :warmup]
            blocks[0][1]["warmup_step_size"] = np.asarray(loop.warm_step_size)[:, :warmup]

    def joined() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        if len(blocks) == 1:
            return blocks[0]
        draws = {k: np.concatenate([b[0][k] for b in blocks], axis=1) for k in blocks[0][0]}
        stats = {k: np.concatenate([b[1][k] for b in blocks], axis=1) for k in STAT_FIELDS}
        return draws, {**stats, **{k: v for k, v in blocks[0][1].items() if k not in STAT_FIELDS}}

    with tqdm(total=per_block, file=sys.stderr, disable=not show, unit="it", dynamic_ncols=True,
              desc=f"NUTS, {chains} chains: starting", leave=True) as bar:
        args = (keys, first, preconditioner, data)
        stop = stop_when_divergent
        # warmup up to its terminal window in calls of their own where the target changes there or may: the loop's
        # state at that window's start is what a careful run goes on from
        at = terminal_window(warmup)
        split = careful is not None or float(terminal) != float(target)
        chunks = _chunks(warmup, warmup, warmup + samples, show, stop, at if split else None)
        early = [c for c in chunks if c[1] <= at]  # (at the run's own target where the target does not change there)
        at_terminal, _ = _run_chunks(run, args, target, loop, warmup, samples, early, bar)
        late = chunks[len(early):]
        loop, end = _run_chunks(run, args, terminal, at_terminal, warmup, samples, late, bar, 0, stop)
        if careful is not None and np.asarray(loop.stats.diverging)[..., _slots(warmup, samples, warmup, end)].any():
            terminal = careful
            bar.n = late[0][0]
            bar.refresh()
            loop, end = _run_chunks(run, args, terminal, at_terminal, warmup, samples, late, bar, 0, stop)
        keep(loop, warmup, end)
        blocks[0][1]["target_accept"] = np.asarray(terminal)
        drawn = end - warmup
        while (enough is not None and drawn < max_samples and not (stop and blocks[-1][1]["diverging"].any())
               and not enough(*joined())):
            block = min(extend_by, max_samples - drawn)  # the last block ends at max_samples
            bar.total += block
            bar.refresh()
            before = sum(int(b[1]["diverging"].sum()) for b in blocks)
            lo = warmup + drawn
            chunks = _chunks(warmup, lo, lo + block, show, stop)
            loop, end = _run_chunks(run, args, terminal, loop, warmup, samples, chunks, bar, before, stop)
            keep(loop, lo, end)
            drawn = end - warmup
    return joined()
