"""Compiled programs that take the data as arguments, so that they compile once per model and shapes.

A NumPyro model's data (its keyword arguments) can enter a compiled XLA program in two ways: closed over,
as constants of the program, or passed as arguments. Closed over, every new table of the same shapes is a
new program: it compiles again (seconds to tens of seconds on CPU), and JAX's persistent compilation cache
never hits across datasets, since the cache key is the program, constants included. Passed as arguments,
the program depends only on the model, the shapes and dtypes of the data, and the settings: a calibration
study that fits 100 simulated tables compiles once, and a new process finds the programs in the
persistent cache.

This module holds what the inference programs share:

- `split_kwargs`: the model's keyword arguments -> (traced arguments: arrays, Python floats and None;
  static ones: Python ints, bools and strings, which a model may use for shapes or branches);
- `program`: a decorator caching one jitted function per (model, static kwargs, settings), so a second fit
  in the same process reuses the compiled executable without tracing again; where JAX's persistent cache is
  on, the function is a `StoredProgram`, whose traced programs are kept on disk, so that a new process neither
  traces nor compiles them;
- `release_if_crowded`: drops the programs of this module's caches when the process nears the OS's limit on
  memory maps (never JAX's caches of the caller's own functions);
- `model_sites`: what the model's sites are (names, types, supports), from an abstract trace that compiles
  nothing;
- `constrain`: the constrained values at unconstrained draws (deterministic sites included), and
  `log_densities`: the pointwise log likelihood of each observed site and the log prior density of each latent
  site at posterior draws, from one trace of the model; each one compiled, vectorised program.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import inspect
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["split_kwargs", "join_kwargs", "program", "StoredProgram", "LoweredProgram", "program_store",
           "release_if_crowded", "model_sites", "DRAW_ROWS", "constrain", "lower_constrain", "log_densities",
           "lower_log_densities", "tree_unraveler"]


def split_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    """(dynamic, static) parts of a model's keyword arguments.

    Dynamic (traced arguments of the compiled programs): arrays of any shape (0-d integer arrays excepted),
    Python and NumPy floats, and None (an empty pytree). Static (part of the program's identity): Python
    ints, bools and strings, 0-d integer arrays, and anything else hashable. A model must not branch in
    Python on the *value* of a dynamic argument (on its shape, or on whether it is None, is fine).
    """
    dynamic, static = {}, []
    for k, v in kwargs.items():
        if v is None or isinstance(v, (float, np.floating)) and not isinstance(v, bool):
            dynamic[k] = v
        elif isinstance(v, (bool, int, str, np.integer, np.bool_)):
            static.append((k, v.item() if isinstance(v, np.generic) else v))
        elif hasattr(v, "shape") and hasattr(v, "dtype"):
            if np.ndim(v) == 0 and np.issubdtype(np.asarray(v).dtype, np.integer):
                static.append((k, int(np.asarray(v))))
            else:
                dynamic[k] = v
        else:
            try:
                hash(v)
            except TypeError:
                dynamic[k] = v  # a pytree of arrays (list, dict...)
            else:
                static.append((k, v))
    return dynamic, tuple(sorted(static))


def join_kwargs(dynamic: dict[str, Any], static: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {**dynamic, **dict(static)}


def _model_key(model_fn: Callable) -> Any:
    """A hashable identity of a model function. A model's bound method is keyed by (class, function,
    instance): models are frozen dataclasses whose fields are their options, so equal models (the same class
    and options) share programs. Python compares bound methods by the *identity* of their instance, and each
    fit with model options builds a new model, so keying on the method itself would compile and keep a new
    program per fit. A plain function is its own key."""
    if inspect.ismethod(model_fn):
        return (type(model_fn.__self__), model_fn.__func__, model_fn.__self__)
    return model_fn


_LOCK = threading.Lock()
_MAX_PROGRAMS = 64
_CACHES: list[dict[Any, Callable]] = []


def program(build: Callable | None = None, *, optimization_level: int | None = None) -> Callable:
    """Cache the result of ``build(model_fn, static, *settings)`` per model and settings: a jitted function, or a
    tuple whose first item is one (and what goes with it). The jitted function is handed out as a
    `StoredProgram`, named by the model, `static`, the settings and `build` (`_stored_name`); without a name
    where these cannot say all the program depends on (a model defined outside scalinfer, a closure, a setting
    without a faithful ``repr``), and then traced in every process.

    `optimization_level`: XLA's backend (LLVM) optimization level its executables are compiled at (None: XLA's
    default, 3). A program run only a few dozen times, whose compilation costs more than its runs, compiles
    at 1 (``@program(optimization_level=1)``: the mode search's batched gradient); NUTS's, run some 10^5 times,
    at XLA's default.

    The cache keeps the functions alive, so JAX's in-memory cache of their executables is reused by later fits;
    JAX's persistent cache (`scalinfer.runtime.configure`) and the program store cover new processes and
    programs dropped by `release_if_crowded`.
    """
    if build is None:
        return functools.partial(program, optimization_level=optimization_level)
    options = None if optimization_level is None else {"xla_backend_optimization_level": int(optimization_level)}
    cache: dict[Any, Callable] = {}
    _CACHES.append(cache)

    @functools.wraps(build)
    def get(model_fn: Callable, static: tuple, *settings: Any) -> Callable:
        key = (_model_key(model_fn), static, settings)
        with _LOCK:
            fn = cache.get(key)
            if fn is None:
                if len(cache) >= _MAX_PROGRAMS:
                    cache.pop(next(iter(cache)))
                built = build(model_fn, static, *settings)
                name = _stored_name(build, model_fn, static, settings)
                if isinstance(built, tuple):
                    fn = (StoredProgram(built[0], name, options), *built[1:])
                else:
                    fn = StoredProgram(built, name, options)
                cache[key] = fn
        return fn

    get.cache = cache  # type: ignore[attr-defined]
    return get


# ---- the program store ----------------------------------------------------------------------------------------

#: the values a stored program's name may hold: those whose ``repr`` says all they are
_PLAIN = (bool, int, float, str, type(None))


def _plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return isinstance(value, _PLAIN) or isinstance(value, np.generic)


#: scalinfer's own folder: the models whose programs are stored are those defined in it
_PACKAGE = Path(__file__).resolve().parent.parent


@functools.cache
def _source_digest() -> str:
    """SHA-256 of scalinfer's sources (every ``.py`` of the package) and the versions of JAX, jaxlib and NumPyro:
    a stored program is only ever read back by the code that traced it."""
    import jax
    import jaxlib
    import numpyro

    h = hashlib.sha256(f"jax {jax.__version__} jaxlib {jaxlib.__version__} numpyro {numpyro.__version__}".encode())
    for path in sorted(_PACKAGE.rglob("*.py")):
        h.update(str(path.relative_to(_PACKAGE)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _stored_name(build: Callable, model_fn: Callable, static: tuple, settings: tuple) -> str | None:
    """What a `program`'s function computes, as a string that changes with anything that can change it: the
    program (`build`), the model (its class and its fields' values, or a module-level function), `static`, the
    settings, and the sources (`_source_digest`). None for a model defined outside scalinfer (a user's or a
    test's: the code it calls is not in the digest) and where one of these has no faithful ``repr`` (a model
    that is a closure or not a dataclass, a setting that is an object): such programs are traced in every
    process."""
    if inspect.ismethod(model_fn):
        owner = model_fn.__self__
        if not dataclasses.is_dataclass(owner):
            return None
        fields = tuple((f.name, getattr(owner, f.name)) for f in dataclasses.fields(owner))
        if not _plain([v for _, v in fields]):
            return None
        cls = type(owner)
        model = f"{cls.__module__}.{cls.__qualname__}.{model_fn.__func__.__name__}{fields!r}"
    elif inspect.isfunction(model_fn) and model_fn.__closure__ is None and "<locals>" not in model_fn.__qualname__:
        cls = model_fn
        model = f"{model_fn.__module__}.{model_fn.__qualname__}"
    else:
        return None
    flat_settings = [v for s in settings for v in (s if isinstance(s, tuple) else (s,))]
    if not _plain([v for _, v in static]) or not _plain(flat_settings):
        return None
    try:
        source = inspect.getsourcefile(cls)
    except TypeError:
        source = None
    if source is None or not Path(source).resolve().is_relative_to(_PACKAGE):
        return None
    return f"{build.__module__}.{build.__qualname__}|{model}|{static!r}|{settings!r}|{_source_digest()}"


def program_store() -> Path | None:
    """Where `StoredProgram` keeps traced programs: ``scalinfer.runtime.cache_root() / "programs"``, where
    JAX's persistent compilation cache is on (`scalinfer.runtime.configure`, or the user's own setting); None
    (nothing stored) where it is off."""
    import jax

    from scalinfer.runtime import cache_root

    return cache_root() / "programs" if jax.config.jax_compilation_cache_dir else None


def same_programs(kwargs: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether a model's programs on keyword arguments `kwargs` are the ones on `other`: the same static part
    (`split_kwargs`) and dynamic parts of the same tree, shapes and dtypes (their values may differ)."""
    (dyn, static), (dyn_other, static_other) = split_kwargs(kwargs), split_kwargs(other)
    return static == static_other and _shapes((dyn,)) == _shapes((dyn_other,))


def _shapes(args: tuple) -> str:
    """The arguments' tree, shapes, dtypes and weak types: what JAX traces a jitted function again for (a NumPy
    array and a JAX array of the same shape and dtype are one program; so are two placements of an array)."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten(args)
    parts = [str(tree)]
    for x in leaves:
        aval = jax.typeof(x)  # a Python scalar: a weakly typed 0-d array, as JAX traces it
        parts.append(f"{aval.shape}{aval.dtype}{'weak' if aval.weak_type else ''}")
    return "|".join(parts)


class StoredProgram:
    """A jitted function whose programs (one per argument shapes) are kept on disk as `jax.export` modules,
    so that a new process neither traces nor (with JAX's persistent cache) compiles them.

    Why: JAX's persistent cache is keyed by the lowered program, so a new process still traces and lowers every
    program before it can look one up; for the surface model (whose gradient every program traces) that was most
    of a warm fit's set-up (benchmarks/README.md, "fit_speed.py"). A stored program is read back without tracing,
    and its call (a jitted ``Exported.call``) finds its executable in the persistent cache.

    ``fn(*args)`` calls the program for these arguments' shapes; ``fn.lower(*args)`` lowers it
    (`LoweredProgram`), whose ``compile()``, in any thread, hands the executable to later calls with arguments
    of these shapes. With a `name` (`_stored_name`) and a store (`program_store`), the program is read from
    ``store / sha256(name, shapes)`` or, if not there (or unreadable), traced, exported and written there
    (atomically); either way the call runs the exported program, so the first process and the next run the
    same one. Without a name or a store, the jitted function itself.

    `compiler_options`: XLA's options for every executable of the program (``jax.stages.Lowered.compile``'s;
    None: XLA's defaults), whether compiled ahead (`lower`) or by a first call."""

    def __init__(self, jitted: Callable, name: str | None, compiler_options: dict[str, Any] | None = None):
        self.jitted, self.name, self.compiler_options = jitted, name, compiler_options
        self._programs: dict[str, Callable] = {}
        self._compiled: dict[str, Callable] = {}
        self._compiling: dict[str, threading.Event] = {}  # shapes -> set when its `LoweredProgram.compile` ends
        self._lock = threading.Lock()

    def _for(self, shapes: str, args: tuple) -> Callable:
        store = program_store() if self.name is not None else None
        if store is None:
            return self.jitted
        import jax

        # the settings that change how JAX lowers a traced program, and the devices it is lowered for
        config = (jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision, jax.devices())
        key = hashlib.sha256(f"{self.name}|{config}|{shapes}".encode()).hexdigest()
        with self._lock:
            fn = self._programs.get(key)
            if fn is None:
                exported = self._exported(store / key, args)

                def call(*a):
                    return exported.call(*a)

                # named as the function stored, for JAX's compile logs and cache
                call.__name__ = call.__qualname__ = getattr(self.jitted, "__name__", "call")
                fn = self._programs[key] = jax.jit(call)
        return fn

    def _exported(self, path: Path, args: tuple):
        from jax import export

        try:
            return export.deserialize(bytearray(path.read_bytes()))
        except FileNotFoundError:
            pass
        except Exception as e:  # a damaged or foreign file: traced again, and replaced
            print(f"scalinfer: stored program {path} unreadable ({type(e).__name__}); tracing it again",
                  file=sys.stderr)
        exported = export.export(self.jitted)(*args)
        try:
            from scalinfer._io import atomic_write_bytes

            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, exported.serialize())
        except OSError as e:  # a full or read-only cache is no reason to fail
            print(f"scalinfer: cannot store program {path} ({e.strerror or e})", file=sys.stderr)
        return exported

    def lower(self, *args: Any) -> LoweredProgram:
        shapes = _shapes(args)

        def keep(compiled):
            with self._lock:
                self._compiled[shapes] = compiled

        def begin() -> Callable[[], None]:
            with self._lock:
                done = self._compiling.setdefault(shapes, threading.Event())

            def end():
                with self._lock:
                    if self._compiling.get(shapes) is done:
                        del self._compiling[shapes]
                done.set()

            return end

        return LoweredProgram(self._for(shapes, args).lower(*args), keep, self.compiler_options, begin)

    def __call__(self, *args: Any) -> Any:
        return self.resolve(*args)(*args)

    def resolve(self, *args: Any) -> Callable:
        """What a call with arguments of these shapes runs (the executable `LoweredProgram.compile` handed over,
        else the stored or jitted function; with `compiler_options`, the executable compiled here with them):
        a caller that calls it many times with such arguments (the mode search's batches) can keep it and skip
        working out the arguments' shapes each time. Where a `LoweredProgram.compile` of these shapes is under way
        in another thread, it waits for that executable rather than compile a second one."""
        shapes = _shapes(args)
        with self._lock:
            compiling = self._compiling.get(shapes)
        if compiling is not None:
            compiling.wait()
        compiled = self._compiled.get(shapes)
        if compiled is None and self.compiler_options is not None:
            compiled = self.lower(*args).compile()
        return compiled if compiled is not None else self._for(shapes, args)


class LoweredProgram:
    """A `StoredProgram`'s program lowered for some arguments (`lowered`, a ``jax.stages.Lowered``).
    ``compile()`` compiles it (XLA releases the GIL: a thread can, while another traces) and hands the
    executable to the program, whose calls with arguments of these shapes run it from then on: a later call
    does not look for it again (a jitted ``Exported.call`` called after its ``lower().compile()`` in another
    thread compiled it a second time), and a call while it compiles waits for it (`StoredProgram.resolve`)."""

    def __init__(self, lowered, keep: Callable[[Any], None], compiler_options: dict[str, Any] | None = None,
                 begin: Callable[[], Callable[[], None]] | None = None):
        self.lowered, self._keep, self.compiler_options, self._begin = lowered, keep, compiler_options, begin

    def compile(self):
        end = self._begin() if self._begin is not None else None  # the program's calls wait for this compilation
        try:
            compiled = self.lowered.compile(compiler_options=self.compiler_options)
            self._keep(compiled)
            return compiled
        finally:
            if end is not None:
                end()


def _count_lines(path: str) -> int | None:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return None


def release_if_crowded(fraction: float = 0.5) -> bool:
    """Drop the programs this module holds (the `program` caches: scalinfer's jitted functions, and with them
    their executables) when this process holds more than `fraction` of the OS's limit on memory maps (Linux:
    /proc/sys/vm/max_map_count, 65,530 by default). JAX's caches of the caller's own functions are left alone.

    Each XLA CPU executable holds hundreds of memory maps, so a long session that fits tables of many
    different shapes (a calibration study with varying numbers of diverged runs, a notebook looping over
    subsets) would stop with LLVM's "Cannot allocate memory" after a few dozen distinct programs. Programs
    dropped here are traced again when next needed, and come back from JAX's persistent cache where one is
    configured. Returns whether it dropped them (never where /proc is not there)."""
    n = _count_lines("/proc/self/maps")
    try:
        with open("/proc/sys/vm/max_map_count") as fh:
            limit = int(fh.read().strip())
    except (OSError, ValueError):
        return False
    if n is None or n < fraction * limit:
        return False
    with _LOCK:
        for cache in _CACHES:
            cache.clear()
    gc.collect()  # the jitted functions, and JAX's executables keyed weakly on them, go now
    return True


def tree_unraveler(z: dict[str, Any]) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """NumPy inverse of `jax.flatten_util.ravel_pytree` for a dict of arrays like `z`: flat vectors of shape
    (..., dim) -> dict of arrays (..., *shape). Runs no XLA program."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(z)
    shapes = [np.shape(x) for x in leaves]
    sizes = [int(np.prod(s)) for s in shapes]
    ends = np.cumsum(sizes)

    def unravel(flat):
        flat = np.asarray(flat)
        lead = flat.shape[:-1]
        parts = [flat[..., e - n:e].reshape(tuple(lead) + tuple(s)) for e, n, s in zip(ends, sizes, shapes)]
        return jax.tree_util.tree_unflatten(treedef, parts)

    return unravel


def model_sites(model_fn: Callable, kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Name -> {type, is_observed, ndim, support, lower, upper} of each site of the model run on `kwargs`,
    from an abstract trace (`jax.eval_shape`): no XLA program is compiled or run. ``lower``/``upper`` are
    floats where the support's bounds are constants, None where they depend on the data or are absent."""
    import jax
    from numpyro import handlers

    dynamic, static = split_kwargs(kwargs)
    out: dict[str, dict[str, Any]] = {}

    def bound(x):
        if x is None:
            return None
        if isinstance(x, jax.core.Tracer):
            return None
        try:
            return float(np.asarray(x))
        except (TypeError, ValueError):
            return None

    def run(dyn):
        tr = handlers.trace(handlers.seed(model_fn, jax.random.PRNGKey(0))).get_trace(**join_kwargs(dyn, static))
        for k, site in tr.items():
            info = {"type": site["type"], "is_observed": bool(site.get("is_observed", False)),
                    "ndim": len(np.shape(site["value"])), "support": None, "lower": None, "upper": None}
            if site["type"] == "sample":
                support = site["fn"].support
                info["support"] = type(support).__name__
                info["lower"] = bound(getattr(support, "lower_bound", None))
                info["upper"] = bound(getattr(support, "upper_bound", None))
                info["has_lower"] = hasattr(support, "lower_bound")
                info["has_upper"] = hasattr(support, "upper_bound")
            out[k] = info
        return 0.0

    jax.eval_shape(run, dynamic)
    return out


@program
def _constrain_program(model_fn, static):
    """At XLA's default optimization level, though a fit runs it on only a few chunks of draws: the mode's
    constrained values set NUTS's coordinates (`Model.nuts_kwargs`), so a level that rounds them otherwise moves
    every draw (benchmarks/README.md, "fit_speed.py")."""
    import jax
    from numpyro.infer.util import constrain_fn

    def scalinfer_constrain(z, dyn):
        return constrain_fn(model_fn, (), join_kwargs(dyn, static), z, return_deterministic=True, batch_ndims=1)

    return jax.jit(scalinfer_constrain)


def constrain(model_fn: Callable, z: dict[str, Any], kwargs: dict[str, Any], batch_ndims: int = 1
              ) -> dict[str, np.ndarray]:
    """`numpyro.infer.util.constrain_fn` at unconstrained draws `z` (site name -> array with `batch_ndims`
    leading batch axes): the constrained value of every latent site and every deterministic site, as one
    compiled program with the data as an argument (the batch axes flattened into one and run in chunks of
    `DRAW_ROWS`, so that the mode, a Laplace approximation and NUTS's draws share it)."""
    dynamic, static = split_kwargs(kwargs)
    lead = np.shape(next(iter(z.values())))[:batch_ndims]
    flat = {k: np.reshape(v, (-1, *np.shape(v)[batch_ndims:])) for k, v in z.items()}
    out = _in_chunks(_constrain_program(model_fn, static), flat, dynamic)
    return {k: np.asarray(v).reshape(*lead, *np.shape(v)[1:]) for k, v in out.items()}


def lower_constrain(model_fn: Callable, z: dict[str, Any], kwargs: dict[str, Any]) -> LoweredProgram:
    """The program `constrain` runs at unconstrained draws shaped like `z` (one batch axis, of any length: the
    program's is `DRAW_ROWS`), lowered: ``.compile()`` it in a thread (`scalinfer.fit` compiles it beside the mode
    search's program), and a later `constrain` of such draws runs it."""
    dynamic, static = split_kwargs(kwargs)
    return _constrain_program(model_fn, static).lower(_chunk_like(z), dynamic)


#: rows of the draws' programs (`constrain`, `log_densities`): draws run through them in chunks of this many,
#: the last padded, so that one program per model and data shapes serves the mode (one row), a Laplace
#: approximation's draws and NUTS's, before and after NUTS draws more (a multiple of 16: whole float32 vectors)
DRAW_ROWS = 400


def _chunk_like(tree: dict[str, Any]) -> dict[str, np.ndarray]:
    """Zeros shaped like `tree`'s arrays (one leading batch axis), with `DRAW_ROWS` rows."""
    return {k: np.zeros((DRAW_ROWS, *np.shape(v)[1:]), np.asarray(v).dtype) for k, v in tree.items()}


def _in_chunks(program: Callable, flat: dict[str, np.ndarray], dynamic: dict[str, Any]) -> Any:
    """`program(rows, dynamic)` over `flat`'s rows (one leading batch axis) in chunks of `DRAW_ROWS`, the last
    padded with copies of the first row (values the model accepts), its outputs' rows concatenated."""
    import jax

    n = len(next(iter(flat.values())))
    total = max(1, -(-n // DRAW_ROWS)) * DRAW_ROWS

    def padded(x):
        x = np.asarray(x)
        fill = x[:1] if n else np.zeros((1, *x.shape[1:]), x.dtype)
        return np.concatenate([x, np.repeat(fill, total - n, axis=0)]) if total > n else x

    rows = {k: padded(v) for k, v in flat.items()}
    outs = [program({k: v[i:i + DRAW_ROWS] for k, v in rows.items()}, dynamic) for i in range(0, total, DRAW_ROWS)]
    return jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs])[:n], *outs)


@program(optimization_level=1)
def _log_densities_program(model_fn, static):
    """Compiled at XLA's backend optimization level 1: a fit runs it once on its draws, a few chunks, about as
    fast as at the default level 3, and it compiles faster (level 0 compiles faster still but runs ~4x slower:
    benchmarks/README.md, "fit_speed.py")."""
    import jax
    import jax.numpy as jnp
    from numpyro import handlers

    def one(sample, dyn):
        model = handlers.substitute(handlers.seed(model_fn, jax.random.PRNGKey(0)), data=sample)
        tr = handlers.trace(model).get_trace(**join_kwargs(dyn, static))
        likelihood, prior = {}, {}
        for name, site in tr.items():
            if site["type"] != "sample":
                continue
            lp = site["fn"].log_prob(site["value"])
            if site["is_observed"]:
                likelihood[name] = lp
            else:
                prior[name] = jnp.sum(lp if site.get("scale") is None else site["scale"] * lp)
        return likelihood, prior

    def scalinfer_log_densities(samples, dyn):
        return jax.vmap(one, in_axes=(0, None))(samples, dyn)

    return jax.jit(scalinfer_log_densities)


def log_densities(model_fn: Callable, samples: dict[str, Any], kwargs: dict[str, Any], batch_ndims: int = 2,
                  dtype: str | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    r"""(log likelihood, log prior) of the model at `samples` (the latent sites' values, arrays with `batch_ndims`
    leading batch axes, e.g. (chain, draw)), from one trace of the model per draw.

    - log likelihood: observed site name -> the log density of each observation, of shape batch + the site's
      (what `numpyro.infer.util.log_likelihood` returns);
    - log prior: latent site name -> array of the batch shape. For a site
      :math:`\theta_k \sim p_k(\theta_k \mid \theta_{<k})` this is :math:`\sum \log p_k(\theta_k \mid
      \theta_{<k})` at the draw (summed over the site's own elements; times the site's plate scale, if any), in
      the model's own (constrained) parametrisation: the terms of the joint prior :math:`\log p(\theta) = \sum_k
      \log p_k`, which power-scaling sensitivity raises to a power one site, or all of them, at a time
      (`scalinfer.inference.sensitivity`).

    The model runs under NumPyro's `substitute` and `trace` handlers, one draw at a time under `jax.vmap`, as one
    compiled program with the data as an argument (cached per model and static arguments).

    `dtype`: the float type to evaluate in (``"float32"``: the samples and the data cast to it, as a float32 NUTS
    potential evaluates them; None: as given). The results are float64 either way."""
    lead = np.shape(next(iter(samples.values())))[:batch_ndims]
    program, (flat, dynamic) = _log_densities_call(model_fn, samples, kwargs, batch_ndims, dtype)
    likelihood, prior = _in_chunks(program, flat, dynamic)
    return ({k: np.asarray(v, float).reshape(*lead, *np.shape(v)[1:]) for k, v in likelihood.items()},
            {k: np.asarray(v, float).reshape(lead) for k, v in prior.items()})


def lower_log_densities(model_fn: Callable, samples: dict[str, Any], kwargs: dict[str, Any], batch_ndims: int = 2,
                        dtype: str | None = None) -> LoweredProgram:
    """The program `log_densities` runs at samples shaped like `samples` (with these arguments; its batch is
    `DRAW_ROWS` rows, whatever theirs), lowered: ``.compile()`` it in a thread (`scalinfer.fit` compiles the one of
    NUTS's draws while NUTS's program compiles or runs), and a later `log_densities` of such samples runs it."""
    program, (flat, dynamic) = _log_densities_call(model_fn, samples, kwargs, batch_ndims, dtype)
    return program.lower(_chunk_like(flat), dynamic)


def _log_densities_call(model_fn: Callable, samples: dict[str, Any], kwargs: dict[str, Any], batch_ndims: int,
                        dtype: str | None) -> tuple[Callable, tuple]:
    """`log_densities`'s program and its arguments: the samples' batch axes flattened into one, the floats cast to
    `dtype` (None: as given)."""
    dynamic, static = split_kwargs(kwargs)
    flat = {k: np.reshape(v, (-1, *np.shape(v)[batch_ndims:])) for k, v in samples.items()}
    if dtype is not None:
        flat, dynamic = _cast_floats((flat, dynamic), np.dtype(dtype))
    return _log_densities_program(model_fn, static), (flat, dynamic)


def _cast_floats(tree, dtype: np.dtype):
    """The floating-point leaves of `tree` (arrays and Python floats) as NumPy values of `dtype`."""
    import jax

    def cast(x):
        if isinstance(x, float) or np.issubdtype(np.asarray(x).dtype, np.floating):
            return np.asarray(x, dtype)
        return x

    return jax.tree.map(cast, tree)
