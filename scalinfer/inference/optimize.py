"""Point estimates: the posterior mode by saddle-free Newton steps, and the Laplace approximation around it.

Used on their own (``method="map"`` / ``"laplace"``: fast, approximate intervals) and to start NUTS from the
posterior's mode, which is what keeps hierarchical models from starting chains in separate modes.

Everything here runs on one compiled program per model and data shapes, `_batch_program`: the potential
(negative log joint, *summed* over runs) and its gradient at a batch of unconstrained points (a `vmap` of
`jax.value_and_grad`), with the data as an argument (see `scalinfer.inference.compiled`). The rest is NumPy:

- **Newton.** Each iteration takes the Hessian by forward differences of the gradient (at x + h e_i, in one batch
  or a few; h = eps^(1/2), so the error is ~1e-8 relative in float64; where the model's Hessian is sparse, at fewer
  points, `HessianColumns`), replaces its eigenvalues by their absolute
  values (a saddle is left, not approached: the joint density of a hierarchical model has saddles), and evaluates
  the step at lengths 1, 1/2, 1/4, ... a batch at a time, moving to the length of least potential among those that
  meet Armijo's condition (of lengths within the potential's rounding of that least, `DECREMENT_TOL`, the longest,
  so that near the mode the full step is kept). Far from the mode the longest acceptable length often overshoots a
  valley that a shorter one in the same batch reaches, so the least takes fewer iterations (benchmarks/README.md,
  "fit_speed.py"). It stops when the largest gradient component is below `gtol`, or, once it is below
  `CONVERGED_GRAD`, when the Newton decrement g' |H|^-1 g / 2 (what the step expects to gain) is below
  `DECREMENT_TOL` relative to the potential: there the sum over the runs has reached its rounding, and on a large
  table the gradient does not get below `gtol` (on Step Law's 1,911 runs it stalls a few times above it). The
  decrement alone is not enough: along a stiff direction a gradient above `CONVERGED_GRAD` can expect a fall below
  the rounding. It gives up, not converged, after `UNBOUNDED_ITER` full Newton steps in a row that did not halve
  the gradient: near a maximum a full step shrinks the gradient by orders of magnitude, so steps that keep their
  full length and leave it as it is follow a density that rises without bound (a joint density with no maximum, as
  a hierarchical one where a scale runs to 0), and the search stops there instead of at `max_iter`
  (benchmarks/README.md, "the mode search where the joint density has no maximum").
- **Why not L-BFGS.** The posterior's curvatures span many orders of magnitude (1e-1 to 1e8 on Step Law),
  beyond what a few memory pairs capture: L-BFGS stopped far from the mode where Newton converges, and its
  programs cost more to compile than the batched gradient (figures in benchmarks/README.md).
- **Sparse Hessians.** A model with a parameter per setting or per size (the surface model's offsets) has a sparse
  Hessian: two settings' parameters meet only through the shared ones. Gradient differences along a sum of
  columns that share no nonzero row but the shared parameters' give every entry of those columns, the shared rows'
  entries coming from the shared parameters' own columns by symmetry (Powell and Toint 1979; `HessianColumns`): on
  Step Law's 1,911 runs, 30 directions for 78 parameters, one batch of the program instead of three. The nonzeros
  are those of Newton's first `FULL_HESSIANS` Hessians, taken in full; an entry zero at both points is a zero of
  the model's structure (a sum over runs none of which depends on both parameters gives an exact 0). Only the
  steps use it: were an entry missed, the steps would be less good, not the mode, which is where the gradient
  vanishes, and the mode's own Hessian (Laplace, NUTS's scales) is always taken in full.
- **One BLAS thread.** The search alternates NumPy's linear algebra on small matrices (an `eigh` per Newton step)
  with XLA batches that use every core. OpenBLAS's worker threads spin for a while after each call, taking a core
  from XLA's next batch; a matrix of a few hundred rows gains nothing from a second thread. So `find_map` runs with
  one BLAS thread (threadpoolctl's `threadpool_limits`, process-wide for the search's duration and restored after
  it): on Step Law's table a cold MAP fit takes ~0.2 s less (benchmarks/README.md, "fit_speed.py").
- **Why differences, not `jax.hessian`.** The forward-over-reverse Hessian compiles far slower than the
  batched gradient, and the Hessian is needed only to the accuracy of differences: forward ones
  for Newton's steps, central ones (h = eps^(1/3), error ~1e-10 relative) at the mode for the Laplace
  covariance and NUTS's coordinate scales.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.distributions import biject_to
from numpyro.infer.initialization import init_to_median, init_to_value
from numpyro.infer.util import potential_energy
from threadpoolctl import threadpool_limits

from scalinfer.errors import ModelError
from scalinfer.inference.compiled import LoweredProgram, constrain, join_kwargs, program, split_kwargs, tree_unraveler

__all__ = ["PointFit", "HessianColumns", "find_map", "unconstrained_like", "lower_start", "laplace_draws",
           "laplace_flat"]

#: rows of the batched potential-and-gradient program: parameters + 1 (a Hessian by forward differences in
#: one batch), at most MAX_BATCH, and at most MAX_BATCH_ELEMENTS / (data elements): on a long table a batch's
#: intermediates (rows x runs values each) then stay within a CPU's caches, where a larger batch costs more per
#: row, and a Newton step's line search (which needs only its first few step lengths) evaluates fewer points
#: (benchmarks/README.md, "fit_speed.py")
MAX_BATCH = 128
MAX_BATCH_ELEMENTS = 2**18
#: the mode search has converged when the largest gradient component is below this (`PointFit.converged`)
CONVERGED_GRAD = 1e-3
#: once converged, Newton stops when its decrement, the potential's expected fall g' |H|^-1 g / 2, is below this
#: times max(1, |potential|): ~100 float64 roundings of the potential's sum (eps 2.2e-16)
DECREMENT_TOL = 1e-14
#: Newton's first this many Hessians are taken in full; the entries nonzero in either are the Hessian's pattern,
#: from which the later ones are taken along fewer directions where that saves batches (`HessianColumns`)
FULL_HESSIANS = 2
#: the mode search gives up (not converged) after this many full Newton steps in a row that did not halve the
#: largest gradient component (the module's docstring, "Newton")
UNBOUNDED_ITER = 10


@program
def _start_program(model_fn, static, strategy: str):
    """(rng_key, init_values, data) -> unconstrained start: the model's rough estimate (`strategy` "value",
    sites it does not give drawn as NumPyro's `init_to_uniform` does) or the prior median ("median")."""

    def scalinfer_start(rng_key, values, dyn):
        init = init_to_value(values=values) if strategy == "value" else init_to_median(num_samples=15)
        model = handlers.substitute(handlers.seed(model_fn, rng_key), substitute_fn=init)
        tr = handlers.trace(model).get_trace(**join_kwargs(dyn, static))
        return {k: biject_to(s["fn"].support).inv(s["value"]) for k, s in tr.items()
                if s["type"] == "sample" and not s["is_observed"]}

    return jax.jit(scalinfer_start)


@program(optimization_level=1)
def _batch_program(model_fn, static):
    """(flat points (n, dim), template z, data) -> (potentials (n,), gradients (n, dim)). Compiled at XLA's
    backend optimization level 1, not its default 3: a mode search runs it some 20-100 times, so its compilation
    is most of its cost (benchmarks/README.md, "fit_speed.py")."""

    def scalinfer_potential(flat, z_like, dyn):
        _, unravel = ravel_pytree(z_like)
        f = lambda v: potential_energy(model_fn, (), join_kwargs(dyn, static), unravel(v))  # noqa: E731
        return jax.vmap(jax.value_and_grad(f))(flat)

    return jax.jit(scalinfer_potential)


@dataclasses.dataclass(frozen=True)
class HessianColumns:
    """Directions along which differences of the gradient give every entry of a symmetric Hessian with a known
    pattern of nonzeros (Powell and Toint 1979, "On the estimation of sparse Hessian matrices").

    Direction k is the sum of the unit vectors of a group of columns. Its difference of the gradient, component i,
    is the sum over the group's columns c of H[i, c]: entry H[i, j] is there at component i of j's direction when j
    is the only column of its group nonzero in row i, and otherwise at component j of i's direction when i is the
    only one of its own group nonzero in row j (H[j, i], the same by symmetry). `of_pattern` groups the columns so
    that one or the other always holds.

    Attributes
    ----------
    directions : (k, dim) 0/1, the sums of the groups' unit vectors.
    entries : (2, nnz) the rows and columns of the pattern's entries.
    sources : (2, nnz) for each entry, the direction and the component whose difference holds it.
    """

    directions: np.ndarray
    entries: np.ndarray
    sources: np.ndarray

    @classmethod
    def of_pattern(cls, pattern: np.ndarray) -> HessianColumns:
        """The columns of a Hessian whose nonzeros are `pattern` (dim, dim; symmetrized, the diagonal added),
        grouped greedily. A column joins a group of columns it shares no nonzero row with but rows of columns
        that stand alone: those rows' entries come from their own columns. The densest columns come first, so
        that the shared parameters, which meet almost every other, stand alone before the sparse ones are grouped
        (taken the sparsest first, on Step Law's table a shared parameter that meets only the 17 loss levels joined
        another vector's group and kept the levels apart: 44 directions against 30). Where the rule leaves an entry
        unrecoverable (it does not by construction: checked all the same), one direction per column."""
        p = np.asarray(pattern, bool)
        n = p.shape[0]
        p = p | p.T | np.eye(n, dtype=bool)
        group = np.full(n, -1)
        groups: list[list[int]] = []
        alone = np.zeros(n, bool)  # columns that must keep a group of their own: shared rows of some group
        for c in np.argsort(-p.sum(axis=0), kind="stable"):
            for k, members in enumerate(groups if not alone[c] else ()):
                if alone[members].any() or p[c, members].any():
                    continue
                shared = p[:, c] & p[:, members].any(axis=1)
                if any(group[r] >= 0 and len(groups[group[r]]) > 1 for r in np.flatnonzero(shared)):
                    continue
                members.append(int(c))
                group[c] = k
                alone |= shared
                break
            else:
                group[c] = len(groups)
                groups.append([int(c)])
        return cls._of_groups(p, group, len(groups)) or cls._of_groups(p, np.arange(n), n)

    @classmethod
    def _of_groups(cls, p: np.ndarray, group: np.ndarray, k: int) -> HessianColumns | None:
        member = np.zeros((k, p.shape[0]), bool)
        member[group, np.arange(p.shape[0])] = True
        # hits[g, i]: how many of group g's columns are nonzero in row i
        hits = member.astype(int) @ p.T.astype(int)
        i, j = np.nonzero(p)
        from_j = hits[group[j], i] == 1  # j alone in its group at row i: H[i, j] at component i of j's direction
        from_i = hits[group[i], j] == 1
        if not np.all(from_j | from_i):
            return None
        sources = np.where(from_j, np.stack([group[j], i]), np.stack([group[i], j]))
        return cls(member.astype(float), np.stack([i, j]), sources)

    def hessian(self, differences: np.ndarray) -> np.ndarray:
        """The Hessian (dim, dim) from the differences of the gradient along `directions` (k, dim), divided by the
        step: zero outside the pattern."""
        n = self.directions.shape[1]
        out = np.zeros((n, n), differences.dtype)
        out[self.entries[0], self.entries[1]] = differences[self.sources[0], self.sources[1]]
        return out


class Objective:
    """The potential (negative log joint) of a model on its data, in flat unconstrained coordinates laid out
    like `z_like`, evaluated in batches of a fixed number of rows (one compiled program)."""

    def __init__(self, model_fn: Callable, model_kwargs: dict[str, Any], z_like: dict[str, Any]):
        self.model_fn, self.model_kwargs = model_fn, dict(model_kwargs)
        dyn, self.static = split_kwargs(model_kwargs)
        # on the device once: a call would otherwise copy every data array in again
        self.dyn = jax.device_put(dyn)
        self.z_like = {k: jnp.asarray(v) for k, v in z_like.items()}
        self.dim = int(sum(np.size(v) for v in z_like.values()))
        data_size = sum(int(np.size(v)) for v in jax.tree_util.tree_leaves(self.dyn))
        self.rows = max(1, min(self.dim + 1, MAX_BATCH, MAX_BATCH_ELEMENTS // max(data_size, 1)))
        self.unravel = tree_unraveler(z_like)
        self._program = _batch_program(model_fn, self.static)
        self._run: Callable | None = None  # the program for this batch's shapes, once called (`StoredProgram.resolve`)
        # Newton's Hessians: the nonzeros of those taken in full so far, how many, and (after `FULL_HESSIANS`) the
        # directions of the later ones (None: in full)
        self._pattern = np.zeros((self.dim, self.dim), bool)
        self._full_hessians = 0
        self._columns: HessianColumns | None = None

    @property
    def columns(self) -> HessianColumns | None:
        """The directions of Newton's Hessians once they are fewer than the parameters and save batches (after its
        first `FULL_HESSIANS`, `hessian`); None while they are taken in full."""
        return self._columns

    def lower(self) -> LoweredProgram:
        """The program a call evaluates, traced and lowered but not compiled: ``.compile()`` it in a thread while
        this one does other work (`scalinfer.fit` compiles it beside NUTS's program); a later call runs that
        executable (`scalinfer.inference.compiled.LoweredProgram`)."""
        return self._program.lower(np.zeros((self.rows, self.dim)), self.z_like, self.dyn)

    def __call__(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Potentials (n,) and gradients (n, dim) at the rows of `flat` (n, dim); n is padded to the batch."""
        flat = np.atleast_2d(np.asarray(flat, dtype=float))
        n = flat.shape[0]
        pad = (-n) % self.rows
        x = np.concatenate([flat, np.repeat(flat[:1], pad, axis=0)]) if pad else flat
        f, g = [], []
        for i in range(0, x.shape[0], self.rows):
            args = (x[i:i + self.rows], self.z_like, self.dyn)
            if self._run is None:
                self._run = self._program.resolve(*args)
            fi, gi = self._run(*args)
            f.append(np.asarray(fi, dtype=float))
            g.append(np.asarray(gi, dtype=float))
        return np.concatenate(f)[:n], np.concatenate(g)[:n]

    def hessian(self, x: np.ndarray, g: np.ndarray | None = None) -> np.ndarray:
        """Hessian at `x` by differences of the gradient, symmetrized: central (2 dim gradients, step
        h = eps^(1/3), error ~eps^(2/3) relative) or, given the gradient `g` at `x`, forward (step h = eps^(1/2),
        error ~eps^(1/2): enough for a Newton step). Forward ones take dim gradients, or, after the first
        `FULL_HESSIANS` and where it saves batches, one per direction of the `HessianColumns` of their nonzeros."""
        eps = float(np.finfo(np.asarray(jax.tree_util.tree_leaves(self.z_like)[0]).dtype).eps)
        if g is None:
            h = eps ** (1 / 3)
            _, gs = self(np.concatenate([x + h * np.eye(self.dim), x - h * np.eye(self.dim)]))
            hess = (gs[:self.dim] - gs[self.dim:]) / (2 * h)
        elif self._columns is not None:
            h = eps ** 0.5
            _, gs = self(x + h * self._columns.directions)
            hess = self._columns.hessian((gs - g) / h)
        else:
            h = eps ** 0.5
            _, gs = self(x + h * np.eye(self.dim))
            hess = (gs - g) / h
            if self._full_hessians < FULL_HESSIANS:  # the pattern is that of the first ones only
                self._pattern |= (hess != 0) | ~np.isfinite(hess)
                self._full_hessians += 1
                if self._full_hessians == FULL_HESSIANS:
                    columns = HessianColumns.of_pattern(self._pattern)
                    if -(-len(columns.directions) // self.rows) < -(-self.dim // self.rows):  # fewer batches
                        self._columns = columns
        return 0.5 * (hess + hess.T)


@dataclasses.dataclass(frozen=True)
class PointFit:
    """The mode of the posterior.

    Attributes
    ----------
    z : unconstrained parameters at the mode (a dict of arrays, as NUTS takes them in ``init_params``).
    params : constrained values at the mode (sampled sites and deterministics).
    potential : negative log joint density at the mode.
    converged : whether the largest gradient component fell below `CONVERGED_GRAD` (of the sites not held).
    held : sites held at their start values (`find_map`'s `hold`): then `z` is the mode given them.
    objective : the potential and its gradient in flat unconstrained coordinates (`Objective`).
    """

    z: dict[str, Any]
    potential: float
    converged: bool
    objective: Objective
    held: tuple[str, ...] = ()
    _cache: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def params(self) -> dict[str, np.ndarray]:
        """Constrained values at the mode (computed on first use: a NUTS fit never needs them)."""
        if "params" not in self._cache:
            self._cache["params"] = {k: v[0] for k, v in self.constrain(self.flat[None]).items()}
        return self._cache["params"]

    @property
    def flat(self) -> np.ndarray:
        """`z` as one flat vector, in the order of `jax.flatten_util.ravel_pytree` (and of `unravel`)."""
        return np.concatenate([np.ravel(np.asarray(x, dtype=float)) for x in jax.tree_util.tree_leaves(self.z)])

    @property
    def unravel(self) -> Callable:
        """Flat unconstrained vectors (..., dim) -> dicts like `z` (NumPy, no XLA program)."""
        return self.objective.unravel

    @property
    def model_fn(self) -> Callable:
        return self.objective.model_fn

    @property
    def model_kwargs(self) -> dict[str, Any]:
        return self.objective.model_kwargs

    def potentials(self, flat: np.ndarray) -> np.ndarray:
        """Potential (negative log joint) at each row of `flat` (n, dim)."""
        return self.objective(flat)[0]

    def hessian(self) -> np.ndarray:
        """Hessian of the potential at the mode, flat unconstrained coordinates (computed once)."""
        if "hessian" not in self._cache:
            self._cache["hessian"] = self.objective.hessian(self.flat)
        return self._cache["hessian"]

    def constrain(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Constrained values (sampled sites and deterministics) at each row of `flat` (n, dim)."""
        return constrain(self.model_fn, self.unravel(np.atleast_2d(flat)), self.model_kwargs)


def _newton(objective: Objective, x: np.ndarray, fx: float, g: np.ndarray, gtol: float, max_iter: int,
            free: np.ndarray | None = None) -> tuple[np.ndarray, float, float]:
    """Saddle-free damped Newton from `x`, where the potential is `fx` and its gradient `g` (see the module's
    docstring), moving only the coordinates where `free` (a boolean mask; default all) is true. Returns (x,
    potential, max |grad| over the free coordinates)."""
    free = np.ones(x.shape[0], bool) if free is None else np.asarray(free, bool)
    history: list[tuple[bool, float]] = []  # per iteration: (the step was Newton's full step, max |grad| before it)
    for _ in range(max_iter):
        if not np.all(np.isfinite(g)) or np.max(np.abs(g[free])) <= gtol:
            break
        recent = history[-UNBOUNDED_ITER:]
        if (len(recent) == UNBOUNDED_ITER and all(full for full, _ in recent)
                and np.max(np.abs(g[free])) > 0.5 * recent[0][1]):
            break  # full steps that do not shrink the gradient: the density rises without bound (no maximum)
        hess = objective.hessian(x, g)[np.ix_(free, free)]
        if not np.all(np.isfinite(hess)):
            break
        w, V = np.linalg.eigh(hess)
        lam = np.maximum(np.abs(w), max(1e-10 * np.max(np.abs(w)), 1e-12))
        step = np.zeros_like(x)
        step[free] = -(V @ ((V.T @ g[free]) / lam))
        slope = float(g @ step)  # < 0: |eigenvalues| make the step a descent direction
        if np.max(np.abs(g[free])) < CONVERGED_GRAD and -0.5 * slope <= DECREMENT_TOL * max(1.0, abs(fx)):
            break  # at the mode, to the potential's rounding
        for first in range(0, 60, objective.rows):  # step lengths 1, 1/2, ..., 2^-59, a batch at a time
            t = 0.5 ** np.arange(first, first + objective.rows)
            ft, gt = objective(x[None] + t[:, None] * step[None])
            ok = np.isfinite(ft) & (ft <= fx + 1e-4 * t * slope) & np.all(np.isfinite(gt), axis=1)
            if ok.any():
                break
        else:
            break
        least = np.where(ok, ft, np.inf)  # of the lengths that decrease the potential enough, the least potential's
        k = int(np.argmax(least <= least.min() + DECREMENT_TOL * max(1.0, abs(fx))))  # (the longest within rounding)
        history.append((bool(t[k] == 1.0), float(np.max(np.abs(g[free])))))
        x, fx, g = x + t[k] * step, float(ft[k]), gt[k]
    gmax = float(np.max(np.abs(g[free]))) if np.all(np.isfinite(g)) else np.inf
    return x, float(fx), gmax


def _start_values(init_values: dict[str, Any] | None, strategy: str) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=float) for k, v in (init_values or {}).items()} if strategy == "value" else {}


def unconstrained_like(model_fn, model_kwargs: dict[str, Any], init_values: dict[str, Any] | None = None,
                       seed: int = 0) -> dict[str, jax.ShapeDtypeStruct]:
    """The shapes of the model's unconstrained sites, as `find_map`'s `PointFit.z` will have them (name ->
    `jax.ShapeDtypeStruct`), from `find_map`'s first start lowered (`lower_start`), without running anything: what
    the mode search's `Objective` and a NUTS program can be lowered for before the mode is known
    (`Objective.lower`, `scalinfer.inference.nuts.lower_nuts`)."""
    out = lower_start(model_fn, model_kwargs, init_values, seed).lowered.out_info
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in out.items()}


def lower_start(model_fn, model_kwargs: dict[str, Any], init_values: dict[str, Any] | None = None,
                seed: int = 0) -> LoweredProgram:
    """The program of `find_map`'s first start, lowered (`scalinfer.inference.compiled.LoweredProgram`): its
    ``lowered.out_info`` are `unconstrained_like`'s shapes, and ``.compile()``, in a thread, hands the executable
    to `find_map`'s call (`scalinfer.fit` compiles it beside the mode search's program)."""
    dyn, static = split_kwargs(model_kwargs)
    strategy = "value" if init_values else "median"
    return _start_program(model_fn, static, strategy).lower(jax.random.PRNGKey(seed),
                                                            _start_values(init_values, strategy), dyn)


def find_map(model_fn, model_kwargs: dict[str, Any], init_values: dict[str, Any] | None = None,
             seed: int = 0, max_iter: int = 200, gtol: float = 1e-6, hold: tuple[str, ...] = ()) -> PointFit:
    """Minimize the potential starting from `init_values` (if given and the density is finite there) or from
    the prior median. ``converged`` means the largest gradient component fell below `CONVERGED_GRAD`.

    `hold`: sites kept at their start (`init_values`, else the prior median) while the others move: the mode of
    the density given them, for a joint density with no maximum (`scalinfer.models.base.Model.mode_held`).

    NumPy's BLAS runs on one thread meanwhile (the module's docstring, "One BLAS thread")."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _find_map(model_fn, model_kwargs, init_values, seed, max_iter, gtol, hold)


def _find_map(model_fn, model_kwargs: dict[str, Any], init_values: dict[str, Any] | None, seed: int, max_iter: int,
              gtol: float, hold: tuple[str, ...]) -> PointFit:
    dyn, static = split_kwargs(model_kwargs)
    strategies = (["value"] if init_values else []) + ["median"]
    objective = None
    for strategy in strategies:
        z0 = _start_program(model_fn, static, strategy)(jax.random.PRNGKey(seed), _start_values(init_values, strategy),
                                                        dyn)
        objective = objective or Objective(model_fn, model_kwargs, z0)
        # in NumPy, in `ravel_pytree`'s order (`PointFit.flat`): JAX's ravel of JAX arrays compiles programs of its own
        x0 = np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in jax.tree_util.tree_leaves(z0)])
        (f0,), (g0,) = objective(x0[None])
        if np.isfinite(f0) and np.all(np.isfinite(g0)):
            break
    else:
        raise ModelError("the posterior density is not finite at the model's starting point nor at the prior "
                         "median; check the data's units")
    free = None
    if hold:
        missing = [k for k in hold if k not in objective.z_like]
        if missing:
            raise ModelError(f"cannot hold {', '.join(missing)} in the mode search: not a sampled site")
        free = ~np.concatenate([np.full(np.size(objective.z_like[k]), k in hold) for k in sorted(objective.z_like)])
    x, fun, gmax = _newton(objective, x0, float(f0), g0, gtol, max_iter, free)
    return PointFit(z=objective.unravel(x), potential=fun, converged=bool(gmax < CONVERGED_GRAD),
                    objective=objective, held=tuple(hold))


def laplace_draws(point: PointFit, n_draws: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Draws from the Gaussian approximation at the mode in unconstrained space, mapped to constrained values.

    Returns (constrained draws of shape (n_draws, ...), unconstrained flat draws (n_draws, dim)).
    Raises `ModelError` if the Hessian at the mode is not positive definite (the mode is a saddle or the
    posterior is improper along some direction).
    """
    flat = laplace_flat(point, n_draws, seed)
    return point.constrain(flat), flat


def laplace_flat(point: PointFit, n_draws: int, seed: int = 0) -> np.ndarray:
    """The unconstrained flat draws (n_draws, dim) of `laplace_draws` (no constrained values)."""
    hess, chol_prec = point.hessian(), None
    if np.all(np.isfinite(hess)):
        try:
            chol_prec = np.linalg.cholesky(hess)
        except np.linalg.LinAlgError:
            pass
    if chol_prec is None:
        raise ModelError("Laplace approximation failed: the Hessian at the mode is not positive definite; "
                         "use --method nuts")
    eps = np.random.default_rng(seed).standard_normal((int(n_draws), point.flat.shape[0]))
    # z = mode + L^-T eps has covariance (L L^T)^-1 = H^-1
    return point.flat + np.linalg.solve(chol_prec.T, eps.T).T
