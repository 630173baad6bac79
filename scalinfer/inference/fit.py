"""Fitting a model to a run table, and the `Fit` object that holds the posterior.

A `Fit` wraps an ArviZ DataTree with the groups ``posterior`` (sampled and natural-scale parameters),
``sample_stats`` (divergences, tree sizes...), ``log_likelihood``, ``log_prior`` (one variable per latent
site, `scalinfer.inference.compiled.log_densities`), ``observed_data`` and ``constant_data`` (the model's inputs,
the run table's columns as ``run_COLUMN``, and the model's scalar constants, centering and counts, as one
variable ``constants`` along the coordinate ``constant`` of their names), and root attributes naming the
model, its version, the method and the scalinfer version, and the model's options as JSON (``model_options``),
so that a reopened fit's `Fit.model` is the model that was fitted. It saves as one netCDF file (`FILE_FORMAT`)
and reopens without refitting (`load_fit`, which also reads the files of `READ_FORMATS`).
"""

from __future__ import annotations

import datetime as _dt
import importlib
import io
import json
import os
import sys
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scalinfer import __version__
from scalinfer.errors import FitFileError, ModelError
from scalinfer.runtime import chain_method_for, float64
from scalinfer.models import get_model, model_version
from scalinfer.models.base import Model
from scalinfer.predict import Prediction, interval
from scalinfer.runs.schema import RunTable

__all__ = ["Fit", "fit", "load_fit", "read_summary", "FILE_FORMAT", "READ_FORMATS", "METHODS"]

#: the format `Fit.save` writes; 2: the model's constants as one variable (``constant_data/constants``)
FILE_FORMAT = "scalinfer.fit/2"
#: the formats `load_fit` reads (1: one scalar variable ``const_NAME`` per constant)
READ_FORMATS = ("scalinfer.fit/1", FILE_FORMAT)
METHODS = ("nuts", "map", "laplace", "bootstrap")
#: thresholds of the diagnostics that `Fit.warnings` reports
RHAT_MAX, ESS_MIN = 1.01, 400
#: NUTS's draws per chain by default, and at most where those have not converged (`fit`'s ``max_samples``)
SAMPLES, MAX_SAMPLES = 1000, 4000
#: where they have not, each extension draws this fraction of ``samples`` more per chain: most misses are near
#: the thresholds (an R-hat of 1.011 at 4 x 1,000), which half as many draws again usually mends, at half the cost
EXTEND_FRACTION = 0.5
#: above this R-hat a chain has not found the others' posterior (Gelman and Rubin's old 1.1): where it does not fall
#: from one block of draws to the next, `fit` draws no more, which would not mend it
RHAT_STUCK = 1.1
#: NUTS's tree depth cap in warmup (at most 2^6 - 1 = 63 leapfrog steps per iteration). Early warmup runs on a
#: mass matrix not yet adapted, where NUTS builds its longest trees, though those iterations only feed the step
#: size and the first mass-matrix windows; capped, they still move the chain and still give the windows their
#: draws. A smaller cap can leave the adaptation unfinished on small tables (benchmarks/README.md).
WARMUP_TREE_DEPTH = 6


def _careful_target(target_accept: float) -> float:
    """The target acceptance of NUTS's second run in coordinates from the mode where the first diverged
    (`fit`), from warmup's terminal window on: halfway from `target_accept` to 1 (0.9 -> 0.95), a smaller step,
    Stan's remedy for divergent transitions. On the quickstart's table those coordinates diverge at 0.9 on most
    seeds and at 0.95 on few, and a run there takes about two thirds of the gradients of one in the model's own,
    with a larger bulk ESS (benchmarks/README.md, "fit_speed.py", 2026-12-05 17:39 and 19:18 UTC)."""
    return 1.0 - (1.0 - float(target_accept)) / 2


def _log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"scalinfer: {msg}", file=sys.stderr, flush=True)


@float64  # N ~ 1e12 to fractional powers; the caller's jax_enable_x64 is restored on return
def fit(runs: RunTable, model: str | Model = "chinchilla", method: str | None = None, chains: int = 4,
        warmup: int = 500, samples: int | None = None, seed: int = 0, adapt: str = "dense",
        target_accept: float | None = None, warmup_tree_depth: int = WARMUP_TREE_DEPTH, quiet: bool = True,
        potential_dtype: str | None = None, progress: bool | None = None, max_samples: int | None = None,
        **options: Any) -> Fit:
    """Fit `model` to `runs` and return a `Fit`.

    Parameters
    ----------
    runs : a `RunTable` (see `scalinfer.load_runs`).
    model : a model name (`scalinfer.models.MODEL_NAMES`) or a `Model`.
    method : ``"nuts"`` (default for Bayesian models), ``"map"`` (the mode, no intervals), ``"laplace"``
        (Gaussian around the mode: fast, approximate intervals) or the model's own (``classic``: bootstrap).
    chains, warmup, samples : NUTS settings (``samples`` draws per chain after ``warmup``; 4 x (500 + 1,000)
        by default: at 500 draws the largest R-hat of a fit sits at the 1.01 line, passing or failing by seed,
        on the quickstart's table and others: benchmarks/README.md, "defaults.py"). NUTS starts its
        chains from the Laplace approximation at the posterior mode; where the mode search does not converge
        and the model names sites to hold (`Model.mode_held`: a joint density with no maximum), at the mode
        given the fewest of those sites, in their order, for which the search converges, held at the model's
        start values (the fit's attribute ``map_held`` names them). Where the model chooses NUTS's coordinates
        from the mode (`Model.nuts_kwargs`: the surface's pinned optima), the mode is found again in them and
        NUTS runs there; if it diverges there, it stops at the end of that chunk of draws and goes again there
        from the start of warmup's terminal window (`scalinfer.inference.nuts.terminal_window`: the chains and the
        mass matrix as warmup had them there) with a smaller step, the step size adapted anew toward a target
        acceptance halfway from `target_accept` to 1 (`_careful_target`: Stan's remedy for divergences; the fit's
        attribute ``target_accept`` says which ran); if that diverges too, it stops likewise and runs in the
        model's own coordinates at `target_accept`, and the fit keeps the run with fewer divergences (the
        attribute ``nuts_coordinates`` says which; where both diverge, the careful one is run again in full to
        count them).
    max_samples : where the draws so far have not converged (R-hat above `RHAT_MAX` or bulk ESS below `ESS_MIN`
        for a scalar parameter, the criteria of `Fit.warnings`), NUTS draws `EXTEND_FRACTION` x `samples` more per
        chain, continuing the same chains, until they have or `max_samples` are drawn
        (`scalinfer.inference.nuts.run_nuts`); not where an R-hat above `RHAT_STUCK` did not fall over the last
        block (a chain stuck apart).
        Default: `MAX_SAMPLES` when `samples` is left at its default, else `samples` (exactly the draws asked
        for). The fit's attribute ``samples_extended`` says how many draws per chain were added. One chain is
        never extended (R-hat compares chains).
    seed : everything random follows from it.
    target_accept : NUTS's target acceptance probability (default: the model's `target_accept`, 0.9 for most).
    adapt : mass-matrix adaptation in NUTS's warmup (on coordinates scaled by the Laplace standard
        deviations at the mode): ``"dense"`` (default; a window of fewer than twice as many draws as
        parameters gives a matrix with shrunk correlations, see `scalinfer.inference.nuts.shrunk_covariance`),
        ``"diag"`` or ``"none"``.
    potential_dtype : ``"float32"`` or ``"float64"``: the float type NUTS evaluates the log density in
        (default: the model's `potential_dtype`; float32 is faster per gradient on CPU), and so the fit's
        pointwise log likelihood and log prior at its draws (the density they were drawn from; stored as
        float64). The mode, its curvature and the draws' constrained values are float64 either way.
    quiet : no report of the fit's steps on stderr.
    progress : NUTS's progress bar on stderr (iterations, divergent draws, elapsed, what is left); None
        (default): only when stderr is a terminal. It changes no draw (`scalinfer.inference.nuts.run_nuts`).
    options : the model's options (its dataclass fields, e.g. ``size_scatter``; `Model.with_options`), saved in
        the fit so that `Fit.model` (and a reloaded fit's) is the model fitted.
    """
    m = get_model(model)
    if max_samples is None:
        max_samples = MAX_SAMPLES if samples is None else samples
    samples = SAMPLES if samples is None else samples
    if max_samples < samples:  # before any work
        raise ModelError(f"max_samples must be at least samples={samples}, got {max_samples}")
    if options:
        m = m.with_options(**options)
    method = method or m.default_method
    potential_dtype = potential_dtype or m.potential_dtype
    if potential_dtype not in (None, "float32", "float64"):
        raise ModelError(f"potential_dtype must be 'float32' or 'float64', got {potential_dtype!r}")
    if method not in METHODS:
        raise ModelError(f"unknown method {method!r} (one of: {', '.join(METHODS)})")
    t0 = time.perf_counter()
    data, constants = m.prepare(runs)
    if method == m.default_method != "nuts":  # the model's own fitting method (classic: bootstrap)
        draws, stats = m.fit_draws(data, constants, samples=samples * chains, seed=seed)
        tree = _to_tree(m, runs, data, constants, {k: v[None] for k, v in draws.items()}, stats, None, method)
        return Fit(tree, timings={"total_s": time.perf_counter() - t0}, model=m)
    if method == "bootstrap":
        raise ModelError(f"model {m.name!r} is Bayesian: use --method nuts, map or laplace")

    from scalinfer.inference.compiled import model_sites, release_if_crowded, same_programs
    from scalinfer.inference.optimize import find_map, laplace_draws, laplace_flat

    checks = method == "nuts" and chains > 1 and max_samples > samples
    if release_if_crowded():
        _log("dropped the compiled programs of earlier fits (this process neared the OS's memory-map limit); "
             "they come back from the persistent cache", quiet)
    kwargs = m.model_kwargs(data, constants)
    _log(f"{m.name}: {len(runs)} runs; finding the posterior mode", quiet)
    start = m.init_values(data, constants)
    chain_method = chain_method_for(chains) if method == "nuts" else None
    target_accept = float(target_accept or m.target_accept)
    nuts_settings = dict(chains=chains, warmup=warmup, samples=samples, adapt=adapt, target_accept=target_accept,
                         warmup_tree_depth=warmup_tree_depth, chain_method=chain_method,
                         potential_dtype=potential_dtype)
    mode_compiled, nuts_compiled = _compile_ahead(m, kwargs, start, seed, nuts_settings if method == "nuts" else {})
    # the model's sites for the fit's tree (`_to_tree`), traced while the mode search's program compiles (NUTS's
    # fit takes them on its own coordinates, `_compile_draws`)
    sites = model_sites(m.model, kwargs) if method != "nuts" else None
    # ArviZ imported in a thread once the programs are traced, while they compile and the mode is searched for,
    # which run in XLA without the GIL (begun before, its Python would take turns with the tracing's); else, with
    # the programs found compiled, its import would lie between the mode and NUTS: arviz_base (the DataTree,
    # ~0.3 s). Where NUTS may draw more until its draws converge (`enough`), arviz_stats (their diagnostics; ~0.7 s,
    # most of it SciPy's statistics, which a fit of a fixed number of draws does not need) is imported while NUTS
    # samples, in XLA, without the GIL: during the mode search its Python would hold up the search's own
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scalinfer-import")
    arviz_imported = pool.submit(importlib.import_module, "arviz_base")
    pool.shutdown(wait=False)
    for compiled in mode_compiled:
        compiled.result()
    point = find_map(m.model, kwargs, start, seed=seed)
    extra: dict[str, Any] = {}
    if method == "nuts" and not point.converged:
        for k in range(1, len(m.mode_held) + 1):
            hold = m.mode_held[:k]  # the fewest sites held that give a mode (`Model.mode_held`), in their order
            held = find_map(m.model, kwargs, start, seed=seed, hold=hold)
            if held.converged:
                _log(f"{m.name}: the posterior-mode search did not converge; NUTS starts from the mode given "
                     f"{', '.join(hold)} at the model's start value", quiet)
                point = held
                extra["map_held"] = ",".join(hold)
                break
    extra["map_converged"] = int(point.converged)
    own = (kwargs, point)  # the model's own coordinates
    pinned = m.nuts_kwargs(kwargs, point) if method == "nuts" else None
    if pinned is not None:
        # NUTS's coordinates from the mode (`Model.nuts_kwargs`), and the mode again in them: its start and scales
        kwargs, values = pinned
        if not same_programs(kwargs, own[0]):  # NUTS's program compiled ahead is not the one these coordinates run
            nuts_compiled = _compile_nuts(m, kwargs, values, seed, nuts_settings)
        point = find_map(m.model, kwargs, values, seed=seed, hold=point.held)
    t_map = time.perf_counter() - t0
    if method == "map":
        draws = {k: np.asarray(v)[None, None] for k, v in point.params.items()}
        tree = _to_tree(m, runs, data, constants, draws, None, kwargs, method, extra, sites=sites)
        return Fit(tree, timings={"total_s": time.perf_counter() - t0, "map_s": t_map}, model=m)
    if method == "laplace":
        d, _ = laplace_draws(point, samples * chains, seed=seed)
        draws = {k: v.reshape(chains, samples, *v.shape[1:]) for k, v in d.items()}
        tree = _to_tree(m, runs, data, constants, draws, None, kwargs, method, extra, sites=sites)
        return Fit(tree, timings={"total_s": time.perf_counter() - t0, "map_s": t_map}, model=m)

    from scalinfer.inference.nuts import run_nuts, terminal_window

    sites = _compile_draws(m, kwargs, point, potential_dtype)
    _log(f"{m.name}: NUTS, {chains} chains x ({warmup} warmup + {samples} draws)", quiet)
    t1 = time.perf_counter()
    extra["target_accept"] = target_accept
    arviz_imported.result()  # (or the error importing it)
    if checks:  # `enough`'s own import waits for this one to finish
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scalinfer-import")
        pool.submit(importlib.import_module, "arviz_stats")
        pool.shutdown(wait=False)
    nuts_compiled.result()  # compiled while the mode was searched for (or the error compiling it)

    rhat_before = [float("inf")]  # the worst R-hat of the draws one block ago

    extend_by = max(1, int(EXTEND_FRACTION * samples))

    def enough(draws, stats) -> bool:
        more, why, rhat_before[0] = _more_draws({**draws, **_derived(m, draws, constants)}, rhat_before[0])
        if why:
            n = next(iter(draws.values())).shape[1]
            _log(f"{m.name}: {why} after {n} draws per chain; " + (
                 f"drawing {min(extend_by, max_samples - n)} more" if more else
                 "not drawing more: a chain stuck apart from the others stays apart"), quiet)
        return not more

    def nuts(kwargs, point, metric: bool, stop_when_divergent: bool = False, **settings):
        # start each chain at a different point of the Laplace approximation (over-dispersed a little), so
        # that R-hat can tell if chains disagree; fall back to jitter around the mode
        try:
            flat = laplace_flat(point, chains, seed=seed + 1)
        except ModelError:
            z0 = point.flat
            flat = z0[None] + 0.05 * np.random.default_rng(seed).normal(size=(chains, z0.shape[0]))
        init = point.unravel(_finite_starts(point, flat))
        rhat_before[0] = float("inf")
        return run_nuts(m.model, kwargs, init, seed=seed, preconditioner=_preconditioner(point, metric),
                        progress=progress,
                        max_samples=max_samples, extend_by=extend_by, enough=enough if chains > 1 else None,
                        stop_when_divergent=stop_when_divergent, **{**nuts_settings, **settings})

    # coordinates fitted to the mode that fail somewhere go again from warmup's terminal window with a smaller step,
    # then give way to the model's own, if those diverge less: the runs in them stop at their first divergent draw,
    # and the careful one is run in full only if the model's own diverge too
    careful = _careful_target(target_accept)
    draws, stats = nuts(kwargs, point, metric=pinned is not None, stop_when_divergent=pinned is not None,
                        careful_target_accept=careful if pinned is not None else None)
    if pinned is not None:
        extra["nuts_coordinates"] = "from the mode"
        if float(stats["target_accept"]) != target_accept:
            _log(f"{m.name}: a divergent transition in NUTS's coordinates from the mode; sampled again there from "
                 f"warmup's terminal window (iteration {terminal_window(warmup)}) with target_accept {careful:g}",
                 quiet)
            extra["target_accept"] = careful
        if stats["diverging"].any():
            _log(f"{m.name}: a divergent transition at target_accept {careful:g} after "
                 f"{stats['diverging'].shape[1]} draws per chain; sampling again in the model's own coordinates",
                 quiet)
            again = nuts(*own, metric=False)
            n_own = int(again[1]["diverging"].sum())
            if n_own:
                _log(f"{m.name}: {n_own} divergent transitions in the model's own coordinates; sampling in full in "
                     "those from the mode, to keep the coordinates with fewer", quiet)
                draws, stats = nuts(kwargs, point, metric=True, terminal_target_accept=careful)
            if n_own < int(stats["diverging"].sum()):
                (kwargs, point), (draws, stats) = own, again
                extra["nuts_coordinates"] = "the model's own (fewer divergences)"
                extra["target_accept"] = target_accept
    extra["samples_extended"] = int(stats["diverging"].shape[1] - samples)
    t_nuts = time.perf_counter() - t1
    extra["warmup_leapfrog_steps"] = int(stats.pop("warmup_num_steps").sum())
    extra["potential_dtype"] = potential_dtype or str(np.result_type(float))
    stats.pop("warmup_step_size")  # run_nuts's adaptation trace: the fit keeps only what warmup cost
    stats.pop("target_accept")  # (the attribute ``target_accept``)
    _log(f"{m.name}: NUTS took {t_nuts:.1f} s", quiet)
    tree = _to_tree(m, runs, data, constants, draws, stats, kwargs, method, extra, potential_dtype, sites)
    return Fit(tree, timings={"total_s": time.perf_counter() - t0, "map_s": t_map, "nuts_s": t_nuts}, model=m)


def _compile_ahead(m: Model, kwargs: dict[str, Any], start, seed: int, nuts_settings: dict[str, Any]
                   ) -> tuple[list[Future], Future | None]:
    """Compile the programs of the mode search and of NUTS (with `nuts_settings`; empty: no NUTS) in threads,
    before the mode is known: their shapes are (those of the mode search's start, `lower_start`). Returns the
    futures of the mode search's compilations (its potential and its start) and of NUTS's. The program of
    constrained values, the mode's (`PointFit.params`) and the draws' (`scalinfer.inference.compiled.constrain`),
    compiles once the mode search's has (needed only after the mode search, it would take cores from the
    compilation the search waits for); a failure there is not awaited: the values' own call compiles it again and
    says what failed. The chains' first keys (`scalinfer.inference.nuts.chain_keys`) are computed in a thread too:
    NUTS's lowering needs only their shape.

    The models are traced here, one program after the other: NumPyro's effect handlers live on one
    process-wide stack, so two threads must not trace at once. XLA compiles with the GIL released, so NUTS's
    program, the longest to compile and the last a NUTS fit waits for, is traced first (after the start's, whose
    shapes it takes) and compiles while the mode search's is traced, compiled and run. A cold fit is bound by its
    two cores' CPU seconds; traced the other way round, the mode is found sooner but NUTS's compilation, started
    later, ends later (benchmarks/README.md, "fit_speed.py")."""
    from scalinfer.inference.compiled import lower_constrain
    from scalinfer.inference.nuts import chain_keys, lower_nuts
    from scalinfer.inference.optimize import Objective, lower_start

    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="scalinfer-compile")
    try:
        first = lower_start(m.model, kwargs, start, seed)
        like = {k: np.zeros(v.shape, v.dtype) for k, v in first.lowered.out_info.items()}
        start_compiled = pool.submit(first.compile)
        if nuts_settings:  # compiled and run beside NUTS's tracing
            pool.submit(chain_keys, seed, nuts_settings["chains"])
        nuts = pool.submit(lower_nuts(m.model, kwargs, like, **nuts_settings).compile) if nuts_settings else None
        mode = [pool.submit(Objective(m.model, kwargs, like).lower().compile), start_compiled]
        constrained = lower_constrain(m.model, {k: v[None] for k, v in like.items()}, kwargs)

        def after_the_mode_search():
            futures_wait(mode[:1])
            constrained.compile()

        pool.submit(after_the_mode_search)
        return mode, nuts
    finally:
        pool.shutdown(wait=False)  # the threads end with the compilations


def _compile_nuts(m: Model, kwargs: dict[str, Any], start, seed: int, nuts_settings: dict[str, Any]) -> Future:
    """Compile, in a thread, NUTS's program for coordinates other than those `_compile_ahead` compiled it for (a
    model's `Model.nuts_kwargs` that change its sites, as the surface model's pinned loss levels do), before the
    mode is searched for again in them: its shapes are those of that search's start. Returns the compilation's
    future."""
    from scalinfer.inference.nuts import lower_nuts
    from scalinfer.inference.optimize import unconstrained_like

    like = {k: np.zeros(v.shape, v.dtype) for k, v in unconstrained_like(m.model, kwargs, start, seed).items()}
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scalinfer-compile")
    try:
        return pool.submit(lower_nuts(m.model, kwargs, like, **nuts_settings).compile)
    finally:
        pool.shutdown(wait=False)


def _compile_draws(m: Model, kwargs: dict[str, Any], point, potential_dtype: str | None
                   ) -> dict[str, dict[str, Any]]:
    """Compile, in a thread, the program of the log densities (`_log_densities`) of NUTS's draws, so that it is
    ready when NUTS ends (one program, however many draws: `scalinfer.inference.compiled.DRAW_ROWS`). The
    program of the draws' constrained values is the mode's, compiled beside the mode search's
    (`_compile_ahead`). Called once the mode is found: where NUTS's program still compiles, a core is free of the
    mode search. A failure is not awaited: the program's own call compiles it again and says what failed. Returns
    the model's sites on `kwargs` (`model_sites`, for `_to_tree`)."""
    from scalinfer.inference.compiled import lower_constrain, lower_log_densities, model_sites

    sites = model_sites(m.model, kwargs)
    latent = _latent(sites)
    constrained = lower_constrain(m.model, {k: np.zeros((1, *np.shape(v))) for k, v in point.z.items()}, kwargs)
    like = {k: np.zeros(v.shape, v.dtype) for k, v in constrained.lowered.out_info.items() if k in latent}
    densities = lower_log_densities(m.model, like, kwargs, batch_ndims=1, dtype=_densities_dtype(potential_dtype))
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scalinfer-compile")
    pool.submit(densities.compile)
    pool.shutdown(wait=False)
    return sites


def _preconditioner(point, metric: bool):
    """NUTS's coordinates w = (z - mode) / scale (a `scalinfer.inference.nuts.Preconditioner`), z the flat
    unconstrained point, the scales the Laplace standard deviations, or 1/sqrt(diagonal curvature) where
    the Hessian at the mode is not positive definite (a saddle of a hierarchical joint density), clipped to
    [1e-8, 10]. With `metric` (and a positive definite Hessian) warmup starts from the Laplace covariance
    in w, H^-1 / (scale scale'): the Laplace correlations where no scale is clipped; else from the identity.

    `metric` is for coordinates fitted to the mode (`Model.nuts_kwargs`). In a hierarchical model's own
    coordinates the Gaussian at the joint mode is a poor guide to the posterior's shape: on Step Law's table
    the posterior mean of tau_lr lies 19 Laplace standard deviations from the mode and the posterior covariance,
    in coordinates whitened by the full Laplace covariance, has eigenvalues from 0.003 to 500 (NUTS there took
    260 leapfrog steps per draw, against 15 with per-coordinate scales and a dense mass matrix adapted in
    warmup); on the quickstart's table warmup's first iterations took as many steps from it as from the
    identity (~60). In the surface's pinned coordinates it is a good one: 14-18 steps on Step Law against
    31-37 from the identity, 20-24 on the quickstart's against ~60, until warmup's first full window
    (benchmarks/README.md, "warmup.py")."""
    from scalinfer.inference.nuts import Preconditioner

    z0 = point.flat
    hess = point.hessian()
    sd, cov = None, None
    if np.all(np.isfinite(hess)):
        w, V = np.linalg.eigh(hess)
        if w.min() > 0:
            sd = np.sqrt(np.einsum("ij,j,ij->i", V, 1.0 / w, V))
            if metric:
                cov = (V / w) @ V.T
                cov = 0.5 * (cov + cov.T)
        else:
            sd = 1.0 / np.sqrt(np.maximum(np.abs(np.diag(hess)), 1e-2))
    if sd is None or not np.all(np.isfinite(sd)):
        sd, cov = np.ones_like(z0), None
    sd = np.clip(sd, 1e-8, 10.0)
    cov = None if cov is None else cov / np.outer(sd, sd)
    return Preconditioner.around(point.z, sd, cov)


def _finite_starts(point, flat: np.ndarray) -> np.ndarray:
    """Chain starts where the log density is finite: a start outside the support (a Laplace draw past a wall
    of the likelihood, e.g. a target made unreachable) is pulled halfway back to the mode until it is
    inside; NUTS cannot move from a start of infinite potential."""
    z0 = point.flat
    out = np.array(flat, dtype=float)
    bad = np.zeros(out.shape[0], bool)
    for _ in range(30):
        bad = ~np.isfinite(point.potentials(out))
        if not bad.any():
            return out
        out[bad] = z0 + 0.5 * (out[bad] - z0)
    out[bad] = z0
    return out


def _derived(m: Model, draws: dict[str, np.ndarray], constants) -> dict[str, np.ndarray]:
    """The model's derived natural-scale parameters (`Model.derived`) of `draws` (chains, n, ...), same layout."""
    chains, n = next(iter(draws.values())).shape[:2]
    flat = {k: v.reshape(chains * n, *v.shape[2:]) for k, v in draws.items()}
    return {k: np.asarray(v).reshape(chains, n, *np.shape(v)[1:]) for k, v in m.derived(flat, constants).items()}


def _rhat_ess(arrays: dict[str, np.ndarray]) -> tuple[dict[str, float], dict[str, float]]:
    """Rank-normalized split R-hat and bulk ESS (Vehtari et al. 2021, ArviZ's) of each (chains, draws) array."""
    from arviz_stats import ess, rhat

    return ({k: float(rhat(v, chain_axis=0, draw_axis=1)) for k, v in arrays.items()},
            {k: float(ess(v, chain_axis=0, draw_axis=1, method="bulk")) for k, v in arrays.items()})


def _more_draws(draws: dict[str, np.ndarray], rhat_before: float = float("inf")) -> tuple[bool, str | None, float]:
    """Whether more draws of the same chains can mend `draws` (chains, n): (more, why, worst R-hat).

    ``why`` names the worst failure of `Fit.warnings`' R-hat and ESS criteria among the scalar parameters
    (``"R-hat 1.024 (phi), bulk ESS 159 (tau_lr)"``), None when nothing fails. More draws mend slow mixing, not a
    chain stuck in another mode, which stays there for thousands of draws, each at the tree-depth cap: so the
    answer is no where the worst R-hat is above `RHAT_STUCK` and did not fall since the draws one block ago
    (`rhat_before`; a short first block's R-hat can be far above 1.1 and still fall)."""
    rhat, ess = _rhat_ess({k: np.asarray(v, float) for k, v in draws.items() if np.ndim(v) == 2})
    bad = {k: v for k, v in rhat.items() if np.isfinite(v) and v > RHAT_MAX}
    low = {k: v for k, v in ess.items() if np.isfinite(v) and v < ESS_MIN}
    out = []
    if bad:
        k = max(bad, key=bad.get)
        out.append(f"R-hat {bad[k]:.3f} ({k})")
    if low:
        k = min(low, key=low.get)
        out.append(f"bulk ESS {low[k]:.0f} ({k})")
    worst = max(bad.values(), default=1.0)
    return bool(out) and (worst <= RHAT_STUCK or worst < rhat_before), ", ".join(out) or None, worst


def _to_tree(m: Model, runs: RunTable, data, constants, draws, stats, kwargs, method, extra=None,
             potential_dtype: str | None = None, sites: dict[str, dict[str, Any]] | None = None):
    """Assemble the DataTree: posterior (+ derived natural-scale parameters), stats, log-likelihood, data.
    `potential_dtype`: the float type NUTS evaluated the log density in, and the log densities are evaluated in
    (the density the draws were sampled from; their values are stored as float64). `sites`: the model's sites on
    `kwargs` (`model_sites`), where the caller has them."""
    from arviz_base import from_dict

    from scalinfer.inference.compiled import model_sites

    draws.update(_derived(m, draws, constants))
    groups: dict[str, dict[str, Any]] = {"posterior": draws}
    if stats:
        groups["sample_stats"] = {
            "diverging": stats["diverging"].astype(bool), "n_steps": stats["num_steps"],
            "acceptance_rate": stats["accept_prob"], "energy": stats["energy"]}
    if sites is None:  # one abstract trace for both below
        sites = model_sites(m.model, kwargs) if kwargs is not None else {}
    bounds = _support_bounds(m, kwargs, sites) if kwargs is not None else {}
    if kwargs is not None and method != "map":  # one draw: nothing to estimate LOO from
        groups["log_likelihood"], log_prior = _log_densities(m, kwargs, draws, sites, potential_dtype)
    observed = {k: v for k, v in data.items() if k in m.observed}
    if observed:
        groups["observed_data"] = observed
    groups["constant_data"] = {
        **{k: v for k, v in data.items() if k not in observed},
        **{f"run_{c}": runs.df[c].to_numpy() for c in _run_columns(runs)},
    }
    coords = dict(m.coords(data, constants) or {})
    if constants:  # one variable along the coordinate ``constant`` (their names): `Fit.constants`
        groups["constant_data"]["constants"] = np.array([float(v) for v in constants.values()])
        coords["constant"] = list(constants)
    attrs = {"/": {
        "file_format": FILE_FORMAT, "scalinfer_version": __version__, "model": m.name,
        "model_version": m.version, "model_options": _options_json(m), "method": method, "n_runs": len(runs),
        "source": str(runs.source),
        "table_kind": runs.kind, "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        **{k: v for k, v in (extra or {}).items()},
        **{f"meta_{k}": str(v) for k, v in runs.meta.items()},
    }}
    dims = dict(m.dims)
    for k in groups["constant_data"]:
        if k.startswith("run_"):
            dims[k] = ["run"]
    dims["constants"] = ["constant"]
    tree = from_dict(groups, dims=dims, coords=coords or None, attrs=attrs, check_conventions=False)
    for k, (lo, hi) in bounds.items():
        if k in tree["posterior"].data_vars:
            tree["posterior"][k].attrs.update({"support_lower": lo, "support_upper": hi})
    if "log_likelihood" in groups:  # a group of its own: one value per draw (`dims` are the sites' in posterior)
        tree["log_prior"] = from_dict({"log_prior": log_prior}, check_conventions=False)["log_prior"]
    return tree


def _options_json(m: Model) -> str:
    """The model's options as a JSON object (NumPy scalars and arrays as plain numbers and lists)."""
    def plain(v):
        if isinstance(v, (np.generic, np.ndarray)):
            return v.tolist()
        raise ModelError(f"model {m.name!r}: option value {v!r} cannot be saved in a fit file")
    return json.dumps(m.options(), default=plain, sort_keys=True)


def _fitted_model(attrs: dict[str, Any]) -> Model:
    """The model a fit file's root attributes name, with the options it was fitted with (a file written
    before options were saved has none: the model's defaults, as it was fitted then)."""
    model = get_model(str(attrs["model"]))
    options = attrs.get("model_options")
    return model.with_options(**json.loads(str(options))) if options else model


def _support_bounds(m: Model, kwargs, sites: dict[str, dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """(lower, upper) of each scalar sampled site's support, where finite on at least one side. `sites`: the
    model's on `kwargs` (`scalinfer.inference.compiled.model_sites`)."""
    out, traced = {}, []
    for k, site in sites.items():
        if site["type"] != "sample" or site["is_observed"] or site["ndim"] != 0:
            continue
        if (site["has_lower"] and site["lower"] is None) or (site["has_upper"] and site["upper"] is None):
            traced.append(k)  # a bound computed in the model (from the data or other parameters)
            continue
        lo = -np.inf if site["lower"] is None else site["lower"]
        hi = np.inf if site["upper"] is None else site["upper"]
        if site["support"] in ("_Positive", "_GreaterThan", "_GreaterThanEq") and not np.isfinite(lo):
            lo = 0.0
        if np.isfinite(lo) or np.isfinite(hi):
            out[k] = (lo, hi)
    if traced:  # run the model for their values (compiles its operations one by one: only when needed)
        import jax
        from numpyro import handlers

        tr = handlers.trace(handlers.seed(m.model, jax.random.PRNGKey(0))).get_trace(**kwargs)
        for k in traced:
            support = tr[k]["fn"].support
            lo = float(np.asarray(getattr(support, "lower_bound", -np.inf)))
            hi = float(np.asarray(getattr(support, "upper_bound", np.inf)))
            if np.isfinite(lo) or np.isfinite(hi):
                out[k] = (lo, hi)
    return out


def _run_columns(runs: RunTable) -> list[str]:
    keep = ["run_id", "N", "N_total", "N_active", "D", "loss", "lr", "batch_tokens", "steps", "diverged",
            "group", "step", "target_loss", "steps_to_target", "tokens_to_target"]
    out = []
    for c in keep:
        if c in runs.df.columns and not runs.df[c].isna().all():
            out.append(c)
    return out


def _log_densities(m: Model, kwargs, draws, sites: dict[str, dict[str, Any]], dtype: str | None = None
                   ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(log likelihood, log prior) at the draws of the model's latent sites (`sites`: the model's on `kwargs`,
    `scalinfer.inference.compiled.model_sites`), evaluated in `dtype` (None: float64)."""
    from scalinfer.inference.compiled import log_densities

    latent = _latent(sites)
    return log_densities(m.model, {k: v for k, v in draws.items() if k in latent}, kwargs, batch_ndims=2,
                         dtype=_densities_dtype(dtype))


def _latent(sites: dict[str, dict[str, Any]]) -> set[str]:
    """The latent sites (sampled or deterministic, not observed) of a model's `sites` (`model_sites`)."""
    return {k for k, s in sites.items() if s["type"] in ("sample", "deterministic") and not s["is_observed"]}


def _densities_dtype(dtype: str | None) -> str | None:
    """The float type `log_densities` casts to for a potential evaluated in `dtype` (None: none, float64)."""
    return None if dtype == "float64" else dtype


class Fit:
    """A fitted model: the posterior (an ArviZ DataTree) and what can be asked of it.

    Examples
    --------
    >>> fit = scalinfer.fit(runs, model="chinchilla")           # doctest: +SKIP
    >>> fit.summary()["alpha"]["q50"]                            # doctest: +SKIP
    >>> fit.predict(N=7e10, D=1.4e12).to_dict()["loss"]          # doctest: +SKIP
    """

    def __init__(self, tree, timings: dict[str, float] | None = None, model: Model | None = None):
        self._tree = tree
        self._file: _FitFile | None = None  # a reopened fit's file, until `tree` is built from it
        self.timings = dict(timings or {})
        self._model = model
        self._summary: dict[str, dict[str, float]] | None = None  # `summary`, computed on first use

    @classmethod
    def _of_file(cls, file: _FitFile) -> Fit:
        fit = cls(None)
        fit._file = file
        return fit

    @property
    def tree(self):
        """The ArviZ DataTree. A reopened fit builds it from its file on first use (xarray decodes every
        variable: most of the cost of reopening a fit); its answers (`predict`, `draws`, `constants`,
        `warnings`) read only the variables they need (`arrays`)."""
        if self._tree is None:
            self._tree = self._file.tree()
            self._file = None
        return self._tree

    @property
    def model(self) -> Model:
        """The model fitted, options included (for a reopened fit, built from the file's attributes on first
        use: reading a saved summary needs no model code)."""
        if self._model is None:
            self._model = _fitted_model(self.attrs)
        return self._model

    # ---- what it holds -------------------------------------------------------------------------------
    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self._file.attrs if self._file is not None else self.tree.attrs)

    @property
    def groups(self) -> tuple[str, ...]:
        """The names of the tree's groups (``posterior``, ``constant_data``, ``log_prior``...)."""
        return tuple(self._file.groups) if self._file is not None else tuple(self.tree.children)

    def arrays(self, group: str, names=None) -> dict[str, np.ndarray]:
        """The data variables of `group` (all, in the file's order, or those in `names`) as NumPy arrays, with
        their dimensions' order (the sample dimensions ``chain``, ``draw`` first)."""
        if self._file is not None:
            return self._file.arrays(group, names)
        ds = self.tree[group]
        return {k: v.values for k, v in ds.data_vars.items() if names is None or k in names}

    @property
    def method(self) -> str:
        return str(self.attrs["method"])

    @property
    def posterior(self):
        return self.tree["posterior"].to_dataset()

    @property
    def constants(self) -> dict[str, float]:
        """The model's scalar constants (centering, counts, resolved options): name -> value."""
        if self._file is not None:
            return self._file.constants()
        cd = self.tree["constant_data"]
        if "constants" in cd.data_vars:
            return {str(k): float(v) for k, v in zip(cd["constant"].values, cd["constants"].values)}
        # format 1: one scalar variable per constant
        return {k[len("const_"):]: float(v.values) for k, v in cd.data_vars.items() if k.startswith("const_")}

    @property
    def runs(self) -> pd.DataFrame:
        """The run table the model was fit to (its used rows)."""
        cd = self.tree["constant_data"].to_dataset()
        return pd.DataFrame({k[len("run_"):]: cd[k].values for k in cd.data_vars if k.startswith("run_")})

    def draws(self, names=None) -> dict[str, np.ndarray]:
        """Posterior draws flattened over chains: name -> (n_draws, ...)."""
        post = self.arrays("posterior", names)
        names = list(post) if names is None else names
        return {k: post[k].reshape(-1, *post[k].shape[2:]) for k in names}

    @property
    def n_draws(self) -> int:
        """The number of posterior draws: chains x draws per chain."""
        shape = next(iter(self.arrays("posterior").values())).shape
        return shape[0] * shape[1]

    # ---- diagnostics -----------------------------------------------------------------------------------
    def scalar_names(self) -> list[str]:
        return [k for k, v in self.arrays("posterior").items() if v.ndim == 2]

    def summary(self) -> dict[str, dict[str, float]]:
        """Per scalar parameter: mean, sd, q05, q50, q95, r_hat, ess_bulk (NaN where not defined). A reopened
        fit's are the ones saved with it (`summary_dict`), computed by `save` from the same draws. Computed once
        per fit, since its draws do not change (every `predict` reads it for the fit's warnings); each call
        returns its own copy."""
        saved = self._saved_summary()
        if saved is not None:
            return saved["parameters"]
        if self._summary is None:
            self._summary = self._compute_summary()
        return {k: dict(v) for k, v in self._summary.items()}

    def _compute_summary(self) -> dict[str, dict[str, float]]:
        post = self.posterior
        names = self.scalar_names()
        n_chains, n_draws = post.sizes["chain"], post.sizes["draw"]
        rhat = ess = None
        if n_chains > 1 and n_draws > 3:
            rhat, ess = _rhat_ess({k: post[k].transpose("chain", "draw").values for k in names})
        out = {}
        for k in names:
            v = post[k].values.ravel()
            q = np.quantile(v, [0.05, 0.5, 0.95])
            out[k] = {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else float("nan"),
                      "q05": float(q[0]), "q50": float(q[1]), "q95": float(q[2]),
                      "r_hat": float(rhat[k]) if rhat is not None else float("nan"),
                      "ess_bulk": float(ess[k]) if ess is not None else float("nan")}
        return out

    @property
    def divergences(self) -> int:
        if "sample_stats" not in self.groups:
            return 0
        return int(self.arrays("sample_stats", ["diverging"])["diverging"].sum())

    def warnings(self, summary: dict | None = None) -> list[str]:
        """What a careful reader must know before trusting this fit (empty when all is well)."""
        out = []
        s = self.summary() if summary is None else summary
        if self.method == "map":
            out.append("method=map: a point estimate; intervals are zero-width and say nothing of uncertainty")
        elif self.method == "laplace":
            out.append("method=laplace: intervals are a Gaussian approximation at the mode; check with nuts")
        if self.attrs.get("map_converged", 1) == 0:
            out.append("the posterior-mode search did not converge")
        if self.method == "nuts":
            n = self.n_draws
            if self.divergences:
                out.append(f"{self.divergences} divergent transitions of {n} ({100 * self.divergences / n:.2g}%): "
                           "the posterior may be biased where the sampler could not go")
            bad = {k: v["r_hat"] for k, v in s.items() if np.isfinite(v["r_hat"]) and v["r_hat"] > RHAT_MAX}
            if bad:
                worst = max(bad, key=bad.get)
                out.append(f"R-hat above {RHAT_MAX} for {len(bad)} parameter(s) (worst {worst}: {bad[worst]:.3f}) "
                           f"after {self.posterior.sizes['draw']} draws per chain: chains disagree; run longer "
                           "(--max-samples) or reparameterize")
            low = {k: v["ess_bulk"] for k, v in s.items() if np.isfinite(v["ess_bulk"]) and v["ess_bulk"] < ESS_MIN}
            if low:
                worst = min(low, key=low.get)
                out.append(f"bulk ESS below {ESS_MIN} for {len(low)} parameter(s) (worst {worst}: {low[worst]:.0f}) "
                           f"after {self.posterior.sizes['draw']} draws per chain")
        out.extend(self._bound_warnings())
        out.extend(self.model.fit_warnings(self))
        return out

    def _bound_warnings(self) -> list[str]:
        """Parameters whose posterior piles against an edge of their support (e.g. a scale at 0): the data
        push past what the model allows, or do not identify the parameter."""
        if self.method == "map":
            return []
        out = []
        bounds = self._file.support_bounds() if self._file is not None else {
            k: (v.attrs.get("support_lower"), v.attrs.get("support_upper"))
            for k, v in self.tree["posterior"].data_vars.items()}
        post = self.arrays("posterior")
        for k, values in post.items():
            lo, hi = bounds.get(k, (None, None))
            if lo is None or values.ndim != 2:
                continue
            v = values.ravel()
            for edge, side in ((lo, "lower"), (hi, "upper")):
                if not np.isfinite(edge):
                    continue
                far = np.quantile(v, 0.99 if side == "lower" else 0.01)
                span = abs(far - edge)
                near = np.mean(np.abs(v - edge) < 0.02 * span) if span > 0 else 1.0
                if near > 0.10:
                    out.append(f"posterior of {k} piles against its {side} bound {edge:g} "
                               f"({100 * near:.0f}% of draws within 2% of it): not identified by the data, "
                               "or the model is too rigid there")
        return out

    def summary_dict(self) -> dict[str, Any]:
        """The `scalinfer summary --json` object. A saved fit carries it (root attribute ``summary_json``,
        written by `save` from the same posterior), so that reading it back needs neither the model's code
        nor the diagnostics library."""
        saved = self._saved_summary()
        if saved is not None:
            return saved
        s = self.summary()
        post = self.posterior
        return {"model": self.attrs["model"], "method": self.method, "n_runs": int(self.attrs["n_runs"]),
                "chains": int(post.sizes["chain"]), "draws_per_chain": int(post.sizes["draw"]),
                "samples_extended": int(self.attrs.get("samples_extended", 0)),
                "divergences": self.divergences, "parameters": s, **s, "warnings": self.warnings(s)}

    def _saved_summary(self) -> dict[str, Any] | None:
        """The summary a reopened fit's file carries (`save`), while the fit is that file as read (its tree not
        yet built, so not changed since)."""
        if self._file is not None and "summary_json" in self._file.attrs:
            return json.loads(str(self._file.attrs["summary_json"]))
        return None

    # ---- answers -----------------------------------------------------------------------------------------
    def predict(self, ci: float = 0.9, sensitivity: bool | None = None, **targets: Any) -> Prediction:
        """Posterior draws and intervals of the model's quantities at `targets` (e.g. ``N=1e9, D=2e10``).

        A target that is not a positive finite number raises `ModelError`. The prediction's `warnings` are the
        fit's own (`warnings`: convergence, approximate methods), the answer's (`scalinfer.inference.checks`: a
        target beyond 10x the data or below the smallest size, an optimum outside or at the edge of the range
        tried, a batch below one sequence or above D, an LR above 1) and the model's (`predict_warnings`).

        With `sensitivity` the prediction also carries each quantity's power-scaling prior and likelihood
        sensitivity (`Prediction.prior_sensitivity`, `scalinfer.inference.sensitivity`), and a warning for each
        prior-dominated one, naming the prior that moves it most. None (default): at a single target only (a
        grid costs as much again per cell; the costs are in benchmarks/README.md)."""
        if not 0 < ci < 1:
            raise ModelError(f"ci must be between 0 and 1, got {ci}")
        missing = [t for t in self.model.required_targets if targets.get(t) is None]
        if missing:
            raise ModelError(f"model {self.model.name!r} needs target(s) {', '.join(missing)}")
        from scalinfer.inference import checks

        checks.check_targets(targets, self.model.targets)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow of unreachable targets -> inf, reported
            draws = self.model.predict(self.draws(), self.constants, **targets)
        units = {k: self.model.predicts.get(k, "") for k in draws}
        from scalinfer.inference import sensitivity as _sensitivity

        ps = None
        if sensitivity or sensitivity is None and all(np.ndim(v) == 1 for v in draws.values()):
            ps = _sensitivity.unavailable(self, len(next(iter(draws.values()))))
            ps = ps or _sensitivity.prior_sensitivity(self, draws)
        intervals = {q: interval(v, ci) for q, v in draws.items()}  # once, for the warnings and the answer
        return Prediction(draws=draws, units=units, targets=targets, ci=ci, intervals=intervals,
                          extrapolation=self.model.extrapolation(self.constants, **targets),
                          warnings=tuple(self.warnings() + checks.answer_warnings(self.constants, draws, targets, ci,
                                                                                  intervals)
                                         + self.model.predict_warnings(self.constants, answer=draws, **targets)
                                         + _sensitivity.sensitivity_warnings(ps if isinstance(ps, dict) else None)),
                          model=self.model.name, prior_sensitivity=ps)

    def recommend(self, N: float, D: float, **options: Any):
        """The peak LR and batch to run at (N, D), and what they risk: `scalinfer.decide.recommend` (surface)."""
        from scalinfer.decide import recommend

        return recommend(self, N, D, **options)

    def suggest(self, N: float, D: float, candidates=None, **options: Any):
        """The calibration runs to buy next for the target (N, D), ranked by expected variance cut of log lr_opt
        there per FLOP: `scalinfer.suggest.suggest` (surface)."""
        from scalinfer.suggest import suggest

        return suggest(self, N, D, candidates, **options)

    # ---- files -------------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the fit as one netCDF file, atomically (a temp file in the same folder, then rename)."""
        from scalinfer._io import atomic_write_with

        summary = json.dumps(self.summary_dict())  # before `tree`: a reopened fit's is the one in its file
        self.tree.attrs["summary_json"] = summary
        return atomic_write_with(path, lambda tmp: self.tree.to_netcdf(tmp, engine="h5netcdf"))

    def __repr__(self) -> str:
        chains, draws = next(iter(self.arrays("posterior").values())).shape[:2]
        return f"<Fit {self.attrs['model']} by {self.method}: {self.attrs['n_runs']} runs, {chains}x{draws} draws>"


def load_fit(path: str | os.PathLike) -> Fit:
    """Reopen a fit saved by `Fit.save`. Raises `FitFileError` naming the problem if it is not one.

    The file is read into memory once, so the fit is the file as it was then (rewriting the file later changes
    nothing). Its answers (`Fit.predict`, `Fit.draws`, `Fit.constants`, `Fit.warnings`) read the variables they
    need from that copy; `Fit.tree` decodes it all on first use."""
    path = Path(path)
    fit = Fit._of_file(_FitFile.read(path))
    _build_model(path, fit)
    return fit


def read_summary(path: str | os.PathLike) -> dict[str, Any]:
    """`Fit.summary_dict` of a saved fit, read from the file's root attributes without loading its groups or
    the model's code (a file written before fits carried their summary is loaded in full and summarised).
    Raises `FitFileError` as `load_fit`."""
    path = Path(path)
    head = _head(path)
    if head is not None and "summary_json" in head[0]:
        _check(path, *head)
        return json.loads(str(head[0]["summary_json"]))
    fit = Fit._of_file(_FitFile.read(path))
    _build_model(path, fit)
    return fit.summary_dict()


def _head(path: Path) -> tuple[dict[str, Any], set[str]] | None:
    """The root attributes and group names of an HDF5 file (None where h5py cannot read it: `_FitFile.read`
    then says what is wrong)."""
    import h5py

    try:
        with h5py.File(path, "r") as h:
            return dict(h.attrs), set(h.keys())
    except Exception:  # not HDF5, a folder, unreadable: `_FitFile.read` names it
        return None


def _attribute(value: Any) -> Any:
    """An HDF5 attribute as netCDF readers give it (h5netcdf, so xarray): a one-element array as its element."""
    if isinstance(value, np.ndarray) and value.shape == (1,):
        return value[0]
    return value


class _FitFile:
    """A fit file's bytes, read once, and the numbers a `Fit` answers from, read from them with h5py on demand:
    root attributes, group names, a group's data variables as NumPy arrays, the constants. xarray decodes the
    whole file only for `tree` (it resolves the dimensions of every variable of every group: the slow part of
    reopening a fit, benchmarks/README.md's cli_speed).

    The variables read here are the numbers scalinfer writes: floats (missing values already NaN), integers,
    and booleans, which netCDF stores as int8 with the attribute ``dtype = "bool"``."""

    def __init__(self, path: Path, data: bytes, attrs: dict[str, Any], groups: tuple[str, ...]):
        self.path, self._data, self.attrs, self.groups = path, data, attrs, groups
        self._read: dict[str, tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]] = {}
        self._constants: dict[str, float] | None = None

    @classmethod
    def read(cls, path: Path) -> _FitFile:
        """The checked file (`_check`), or `FitFileError`."""
        if not path.exists():
            raise FitFileError(f"{path}: no such file")
        try:
            data = path.read_bytes()
            with _h5(data) as h:
                attrs = {k: _attribute(v) for k, v in h.attrs.items() if k != "_NCProperties"}
                groups = tuple(h.keys())
        except Exception as e:  # a folder, unreadable, not HDF5: h5py raises many types
            raise FitFileError(f"{path}: not a netCDF fit file ({type(e).__name__}: {e})") from None
        _check(path, attrs, set(groups))
        return cls(path, data, attrs, groups)

    #: the variables' attributes a `Fit` reads (``dtype``: netCDF's mark of a boolean)
    ATTRIBUTES = ("dtype", "support_lower", "support_upper")

    def _group(self, group: str) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        """(name -> array, name -> `ATTRIBUTES`) of the group's numeric data variables (not its coordinates, the
        netCDF dimension scales), in the file's order, read once."""
        if group not in self._read:
            arrays, attrs = {}, {}
            with _h5(self._data) as h:
                for k, ds in h[group].items():
                    if ds.dtype.kind not in "biuf" or ds.is_scale:
                        continue
                    a = {name: _attribute(ds.attrs[name]) for name in self.ATTRIBUTES if name in ds.attrs}
                    arrays[k] = ds[()].astype(bool) if a.get("dtype") == "bool" else ds[()]
                    attrs[k] = a
            self._read[group] = arrays, attrs
        return self._read[group]

    def arrays(self, group: str, names=None) -> dict[str, np.ndarray]:
        """`Fit.arrays` (numeric variables only: a string variable, such as a run's id, is in `tree`)."""
        arrays = self._group(group)[0]
        return {k: v for k, v in arrays.items() if names is None or k in names}

    def support_bounds(self) -> dict[str, tuple[Any, Any]]:
        """Posterior variable -> (support_lower, support_upper) attributes (None where absent)."""
        return {k: (a.get("support_lower"), a.get("support_upper")) for k, a in self._group("posterior")[1].items()}

    def constants(self) -> dict[str, float]:
        """`Fit.constants`: ``constant_data/constants`` along its coordinate ``constant`` (format 2), or each
        ``constant_data/const_NAME`` (format 1)."""
        if self._constants is None:
            arrays = self._group("constant_data")[0]
            if "constants" in arrays:
                with _h5(self._data) as h:
                    names = h["constant_data/constant"].asstr()[()]
                self._constants = {str(k): float(v) for k, v in zip(names, arrays["constants"])}
            else:
                self._constants = {k[len("const_"):]: float(v) for k, v in arrays.items() if k.startswith("const_")}
        return dict(self._constants)

    def tree(self):
        """The whole ArviZ DataTree, decoded by xarray."""
        import xarray as xr

        try:
            return xr.open_datatree(io.BytesIO(self._data), engine="h5netcdf").load()
        except Exception as e:  # h5py/xarray raise many types for a file that is not netCDF
            raise FitFileError(f"{self.path}: not a netCDF fit file ({type(e).__name__}: {e})") from None


def _h5(data: bytes):
    import h5py

    return h5py.File(io.BytesIO(data), "r")


def _check(path: Path, attrs: dict[str, Any], groups: set[str]) -> None:
    """A fit file: scalinfer's format, the groups a fit has, and a model of this scalinfer's version (checked
    against the registry, without importing the model)."""
    fmt = attrs.get("file_format")
    if fmt is None:
        raise FitFileError(f"{path}: a netCDF file, but not written by scalinfer (no 'file_format' attribute)")
    if fmt not in READ_FORMATS:
        raise FitFileError(f"{path}: file format {fmt!r}; this scalinfer ({__version__}) reads "
                           f"{' or '.join(map(repr, READ_FORMATS))}")
    for g in ("posterior", "constant_data"):
        if g not in groups:
            raise FitFileError(f"{path}: the {g!r} group is missing")
    name = str(attrs.get("model"))
    try:
        version = model_version(name)
    except ModelError as e:
        raise FitFileError(f"{path}: {e}") from None
    if str(attrs.get("model_version")) != version:
        raise FitFileError(
            f"{path}: written by model {name!r} version {attrs.get('model_version')}, this scalinfer "
            f"has version {version}; refit with this version")


def _build_model(path: Path, fit: Fit) -> None:
    try:
        fit.model
    except (ModelError, ValueError) as e:  # options this scalinfer's model does not take, or unreadable JSON
        raise FitFileError(f"{path}: the model's options {fit.attrs.get('model_options')!r} do not fit "
                           f"this scalinfer's {fit.attrs.get('model')!r} ({e})") from None
