"""Fitting speed (issue #8): scalinfer's NUTS against nutpie on one model, and repeated fits of one model.

Default, ``--model surface``: the ``surface`` model without size scatter (``size_scatter=False``: the model
of issue #8, which ``benchmarks/_pymc_surface.py`` writes out in PyMC; the default fit of a table with several
model sizes adds size scatter, at 1.5-1.7x the wall time: row 8) on Step Law's 1,911 dense runs
(``../shared/datasets/steplaw/dense_runs.csv``, read in place), every measurement in a fresh Python process:

1. scalinfer MAP, cold: ``scalinfer.fit(runs, model="surface", size_scatter=False, method="map")`` with a new,
   empty compilation cache, ``--repeats`` times (the row: the median); after the first, untimed, the equivalence
   check: the PyMC model of
   ``benchmarks/_pymc_surface.py`` and scalinfer's NumPyro model must give the same log density (unconstrained
   space, Jacobians included) and the same gradient at scalinfer's MAP point and at points jittered around it
   (``--no-check`` skips it);
2. scalinfer NUTS, cold: ``scalinfer.fit(runs, model="surface", size_scatter=False, chains=4, warmup=W,
   samples=S, seed=0)`` with another new, empty compilation cache (``SCALINFER_CACHE``);
3. scalinfer NUTS, warm: the same fit in a new process that finds its programs in that cache, traced
   (`scalinfer.inference.compiled.StoredProgram`) and compiled;
4. nutpie, cold: the PyMC model on the same centred arrays (``prepare(runs)`` of that model), compiled by
   ``nutpie.compile_pymc_model`` (numba, empty PyTensor and numba caches) and sampled by
   ``nutpie.sample(compiled, chains=4, tune=W, draws=S, seed=0, cores=2)`` (nutpie's defaults otherwise:
   diagonal mass matrix, target acceptance 0.8, its own initialisation);
5. nutpie from MAP, cold (``--no-nutpie-from-map`` skips it): the same, every chain started at scalinfer's MAP
   point from step 1 (``initial_points``, no jitter), each value moved by 1e-8 of itself (`NUDGE`: nutpie
   refuses a start whose gradient has a component exactly zero, as a mode's can). With its default start,
   chains can settle in poorer local modes of this posterior (e.g. a large scatter tau_lr of the optimal LRs
   with a near-linear LR valley), which no amount of sampling speed makes up for; this row separates sampler
   speed from initialisation;
6. blackjax, cold (``--no-blackjax`` skips it): scalinfer's MAP, Laplace-scaled coordinates and chain starts,
   then blackjax's window adaptation (dense mass matrix with Stan's regularization, target acceptance 0.9, as
   scalinfer) and NUTS on the
   NumPyro potential, one chain per CPU device (``jax.pmap``).
7. scalinfer with a float64 potential (``--no-float64`` skips it): the surface model's NUTS evaluates its
   potential in float32 (``Surface.potential_dtype``; nutpie and blackjax run float64); this row is the same
   fit with ``potential_dtype="float64"``, timed as the second fit in its process (programs compiled).
8. the default model, cold and warm (two processes sharing a new cache): ``scalinfer.fit(runs,
   model="surface", ...)``, which on Step Law's eight model sizes adds size scatter. Its min bulk ESS is over
   the same quantities, the laws' intercepts and N slopes there drawn from their conditionals;
9. nutpie on the default model, cold, its own start: the PyMC twin with size scatter
   (``build_model(..., size_scatter=True)``: the sizes' levels centered, as a PyMC user would write them; the
   same joint distribution as scalinfer's, in another parameterization); and (``--no-nutpie-from-map`` skips it)
   from scalinfer's MAP of the default model (a cold ``method="map"`` fit of it; `_pymc_surface.twin_start`
   maps its mode to the twin's variables), as row 5 for the plain model. Its log density is not scalinfer's
   point by point (a change of variables), so the check is of the posteriors: the means of the shared scalars
   (`_pymc_surface.posterior_agreement`, z-scores from their Monte Carlo standard errors) against nutpie's
   better run that converged (R-hat <= 1.01), compared only when scalinfer's converged too, as are the ESS/s and
   cold-wall ratios (``default_size_scatter``: null otherwise; every R-hat is in the JSON; from the MAP, nutpie's
   cold wall has the MAP's added, as in ``cold_wall_ratio_vs_nutpie``).
   A run from the MAP that nutpie refuses to start ("bad initial gradient: Invalid initial point") is left out,
   its error named in the table and in the JSON's ``failed_runs``, and the ratios use the runs that started.

10. the quickstart: ``scalinfer quickstart --json`` (its table and NUTS settings, ``data/manifest.json``), cold and
   warm (two processes sharing a new cache); its fit's own seconds (``quickstart_fit_s``, cold;
   ``quickstart_fit_warm_s``) and the process's wall, start-up and answer included (``quickstart_wall_s``, cold).

Rows 2, 3, 8 and 10 are each the median (by wall) of ``--repeats`` (default 3) (cold, warm) pairs of processes,
each pair with its own new cache; the JSON keeps every run's wall and ESS/s. Row 1 is the median of as many cold
processes (``map_repeats_wall_s``). ``default_cold_wall_s`` and
``default_warm_wall_s`` repeat row 8's walls at the JSON's top level.

Columns: *wall s* is the fit in the process (table preparation, MAP, compilation, sampling; Python imports and
reading the CSV excluded; the JSON also has each process's wall); *compile s* is, for scalinfer cold, its wall
minus the warm wall (JAX's own count of XLA compile seconds is in the JSON as ``xla_compile_s``), for the MAP
and warm rows the XLA compile seconds not served by the cache, for nutpie the model build and
``compile_pymc_model``, for blackjax the sampler's ``lower().compile()``; *sampling s* is scalinfer's
``fit.timings["nuts_s"]`` (the Laplace scaling at the mode, warmup and draws; in the cold row it includes
compiling the NUTS program), nutpie's ``nutpie.sample`` call (warmup and draws), blackjax's compiled run;
*min bulk ESS* is the least bulk ESS (``arviz_stats.ess``) over every sampled parameter and element (the 27
scalars and the 3 x 17 per-setting ones; derived quantities excluded), *R-hat max* likewise; *steps/draw* the
mean leapfrog steps per kept draw (warmup not included).

``ess_per_s_ratio_vs_nutpie`` is (scalinfer warm min bulk ESS / warm NUTS seconds) over (nutpie min bulk ESS /
nutpie sampling seconds), compilation excluded on both sides, against the better of nutpie's two runs.
``cold_wall_ratio_vs_nutpie`` is scalinfer's cold wall over nutpie's shorter cold wall, compilation included
on both sides: its own start, or from our MAP with the MAP's cold wall added (a user of nutpie would have to
find it). Against nutpie's own-start run alone they are ``..._vs_nutpie_own_start`` (with its own start, chains
of this posterior can stay in poorer modes, whose ESS is then meaningless). The machine may be shared: the JSON
records the load average at the start, the end and around each process.

    python benchmarks/fit_speed.py [--warmup 1000 --samples 1000 --chains 4 --cores 2 --no-blackjax --repeats 3]

``--model chinchilla`` (or any other model that simulates from an (N, D) design) times repeated NUTS fits of
one model to different data of the same shapes instead (what a calibration study, a test suite or a notebook
does). Each scenario runs in a fresh Python process; all share one new, empty persistent compilation cache:

- process 1: fit table A (cold: nothing compiled yet), then table B in the same process (new data, same
  shapes);
- process 2: fit table C (new process, new data, the persistent cache from process 1).

Tables B and C are A's design re-simulated from the model's `true_params` with other noise seeds. For each
fit: wall and CPU seconds, MAP and NUTS seconds, draws per second of the NUTS phase, and the number of XLA
compilations (and their seconds) that were not persistent-cache hits.

    python benchmarks/fit_speed.py --model chinchilla [--data data/simulated_chinchilla.csv --format FORMAT
                                                       --chains 4 --warmup 500 --samples 500]

Either way, prints a table, then as its last line one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPLAW = ROOT.parent / "shared" / "datasets" / "steplaw" / "dense_runs.csv"


REPEAT_CHILD = r"""
import json, sys, time
t_import = time.perf_counter()
import numpy as np
import scalinfer
import scalinfer.runtime
from scalinfer.models import get_model
import jax.monitoring as mon

data, model, chains, warmup, samples = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
seeds = [int(s) for s in sys.argv[6].split(",")]
fmt = sys.argv[7] or None
scalinfer.runtime.configure(chains)  # as the CLI: a device per chain, float64, the persistent cache
log = {"compiles": 0, "compile_s": 0.0, "hits": 0, "pending_hit": False}

def on_event(event, **kw):
    if event == "/jax/compilation_cache/cache_hits":
        log["pending_hit"] = True

def on_duration(event, secs, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        if log["pending_hit"]:
            log["hits"] += 1
        else:
            log["compiles"] += 1
            log["compile_s"] += secs
        log["pending_hit"] = False

mon.register_event_listener(on_event)
mon.register_event_duration_secs_listener(on_duration)
m = get_model(model)
base = scalinfer.load_runs(data, format=fmt)
out = []
for seed in seeds:
    if seed == 0:
        runs = base
    else:
        df = m.simulate(m.true_params(), base.df[["N", "D"]], seed=seed)
        runs = scalinfer.load_runs(df)
    before = {k: log[k] for k in ("compiles", "compile_s", "hits")}
    t0, c0 = time.perf_counter(), time.process_time()
    f = scalinfer.fit(runs, model=model, chains=chains, warmup=warmup, samples=samples, seed=seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = f.summary()
    out.append({"table_seed": seed, "wall_s": wall, "cpu_s": cpu, **f.timings,
                "draws_per_s": chains * samples / f.timings["nuts_s"],
                "compiles": log["compiles"] - before["compiles"],
                "compile_s": log["compile_s"] - before["compile_s"], "cache_hits": log["hits"] - before["hits"],
                "min_ess_bulk": min(v["ess_bulk"] for v in s.values()),
                "max_r_hat": max(v["r_hat"] for v in s.values()), "divergences": f.divergences})
print(json.dumps(out))
"""


def run(cache: str, args, seeds: str) -> list[dict]:
    env = {**os.environ, "SCALINFER_CACHE": cache}
    res = subprocess.run([sys.executable, "-c", REPEAT_CHILD, str(args.data), args.model, str(args.chains),
                          str(args.warmup), str(args.samples), seeds, args.format or ""], capture_output=True, text=True, env=env)
    if res.returncode:
        sys.exit(res.stderr)
    return json.loads(res.stdout.strip().splitlines()[-1])


def repeated_fits(args) -> None:
    with tempfile.TemporaryDirectory() as cache:
        first = run(cache, args, "0,1")
        second = run(cache, args, "2")
    rows = [("process 1, table A (cold)", first[0]), ("process 1, table B (same process)", first[1]),
            ("process 2, table C (new process)", second[0])]
    print(f"{args.model} on {args.data}: {args.chains} chains x ({args.warmup} + {args.samples})")
    print(f"{'':36s} {'wall s':>7s} {'cpu s':>6s} {'map s':>6s} {'nuts s':>7s} {'draws/s':>8s} {'compiles':>8s} "
          f"{'compile s':>9s} {'hits':>5s} {'minESS':>7s}")
    for name, r in rows:
        print(f"{name:36s} {r['wall_s']:7.2f} {r['cpu_s']:6.1f} {r['map_s']:6.2f} {r['nuts_s']:7.2f} "
              f"{r['draws_per_s']:8.0f} {r['compiles']:8d} {r['compile_s']:9.2f} {r['cache_hits']:5d} {r['min_ess_bulk']:7.0f}")
    print(json.dumps({"model": args.model, "chains": args.chains, "warmup": args.warmup, "samples": args.samples,
                      "cold": first[0], "same_process": first[1], "new_process": second[0]}))



# ---- surface: scalinfer against nutpie --------------------------------------------------------------------

SURFACE_CHILD = r"""
import json, os, sys, time
t_process = time.perf_counter()
mode, data_path, fmt = sys.argv[1], sys.argv[2], sys.argv[3] or None
chains, warmup, samples, seed = map(int, sys.argv[4:8])
opt = json.loads(sys.argv[8])
sys.path.insert(0, opt["bench_dir"])
sys.path.insert(0, os.path.join(opt["bench_dir"], os.pardir, "tests"))
import numpy as np
import scalinfer
import scalinfer.runtime
from support.compile_log import CompileLog

scalinfer.runtime.configure(chains)  # as the CLI: a device per chain, float64, the persistent cache
from scalinfer.models.surface import MODEL as SURFACE, PINNED, SCALARS, SETTING
from scalinfer.models.surface.population import PRIOR_SETS

# the model that the PyMC twin (_pymc_surface.py) writes out: surface without size scatter, issue #8's model (the
# default turns size scatter on for tables of two or more model sizes; see scalinfer.models.surface)
MODEL = SURFACE.with_options(size_scatter=False)

NAMES = list(SCALARS + SETTING)  # every parameter of the model (the offsets eps, however sampled)
SAMPLED = list(SCALARS + PINNED) + ["ell"]  # its sampled sites (without pins w is eps: a MAP's, the twin's)
# nutpie's start from scalinfer's mode: each value times 1 + NUDGE. At an exact mode a gradient component can be
# exactly zero, and nutpie refuses such a start ("bad initial gradient: Invalid initial point"): at 36d9caf the
# default model's mode had d logp / d log tau_loss = 0.0 in nutpie's numba function (6e-16 in PyMC's own), and
# every chain failed to start; nudged by 1e-8 of itself, it starts.
NUDGE = 1e-8
# the scalars both parameterizations of the default model (size scatter) have: their posterior means must agree
AGREE = list(SCALARS) + ["tau_lr_size", "tau_b_size", "tau_loss_size"]


def means(post):
    # {name: (posterior mean, its Monte Carlo standard error)} over AGREE
    from arviz_stats import mcse
    se = mcse(post[AGREE], sample_dims=["chain", "draw"], method="mean")
    return {k: (float(post[k].values.mean()), float(se[k].values)) for k in AGREE}

runs = scalinfer.load_runs(data_path, format=fmt)
out = {"mode": mode, "n_runs": len(runs), "load_before": os.getloadavg()[0]}


def diag(post, divergences, n_draws):
    # least bulk ESS and largest R-hat over every element of every sampled site (as benchmarks/steplaw_lr._diag)
    from arviz_stats import ess, rhat
    ds = post[NAMES]
    e = [float(np.nanmin(v.values)) for v in ess(ds, sample_dims=["chain", "draw"], method="bulk").data_vars.values()]
    r = [float(np.nanmax(v.values)) for v in rhat(ds, sample_dims=["chain", "draw"]).data_vars.values()]
    by = dict(zip(ds.data_vars, e))
    worst = min(by, key=by.get)
    return {"ess_bulk_min": min(e), "ess_bulk_min_param": worst, "rhat_max": max(r), "divergences": int(divergences),
            "draws": int(n_draws)}


if mode in ("map", "nuts"):
    with CompileLog() as log:
        t0 = time.perf_counter()
        model = SURFACE if opt.get("default_model") else MODEL
        if mode == "map":
            f = scalinfer.fit(runs, model=model, method="map", seed=seed)
        else:
            kw = dict(chains=chains, warmup=warmup, samples=samples, seed=seed, potential_dtype=opt.get("dtype"))
            if opt.get("repeat"):  # time a second fit in this process: its programs compiled by the first
                scalinfer.fit(runs, model=model, **kw)
                t0 = time.perf_counter()
            f = scalinfer.fit(runs, model=model, **kw)
        out["wall_s"] = time.perf_counter() - t0
    out.update({"timings": f.timings, "xla_compiles": log.compiles, "xla_compile_s": log.compile_s,
                "cache_hits": log.hits})
    if mode == "nuts":
        post = f.posterior
        out["diag"] = diag(post, f.divergences, post.sizes["chain"] * post.sizes["draw"])
        out["n_steps_mean"] = float(f.tree["sample_stats"]["n_steps"].values.mean())
        out["warmup_n_steps_mean"] = f.attrs["warmup_leapfrog_steps"] / (chains * max(warmup, 1))
        if opt.get("default_model"):
            out["means"] = means(post)
    else:  # the mode's constrained values, deterministic sites included (the default model's twin starts from those)
        post = f.posterior
        names = list(post.data_vars) if opt.get("default_model") else SAMPLED
        params = {k: np.asarray(post[k].values)[0, 0] for k in names}
        with open(opt["map_out"], "w") as fh:
            json.dump({k: v.tolist() for k, v in params.items()}, fh)
    if mode == "map" and opt.get("check"):
        import _pymc_surface as P
        data, const = MODEL.prepare(runs)
        t0 = time.perf_counter()
        out["equivalence"] = P.check_equivalence(P.build_model(data, const, PRIOR_SETS[MODEL.prior]), MODEL.model,
                                                 MODEL.model_kwargs(data, const), params)
        out["equivalence"]["check_s"] = time.perf_counter() - t0

elif mode == "nutpie":
    import nutpie
    import pymc  # noqa: F401
    import _pymc_surface as P
    t0 = time.perf_counter()
    if opt.get("default_model"):  # the twin of the default model: size scatter, centered levels
        data, const = SURFACE.prepare(runs)
        model = P.build_model(data, const, PRIOR_SETS[SURFACE.prior], size_scatter=True)
    else:
        data, const = MODEL.prepare(runs)
        model = P.build_model(data, const, PRIOR_SETS[MODEL.prior])
    if opt.get("init"):  # start every chain at this point (scalinfer's MAP), not jittered, but nudged
        with open(opt["init"]) as fh:
            start = P.twin_start({k: np.asarray(v, float) for k, v in json.load(fh).items()}, model)
        start = {k: v * (1.0 + NUDGE) for k, v in start.items()}
        compiled = nutpie.compile_pymc_model(model, backend=opt["backend"], initial_points=start, jitter_rvs=set())
    else:
        compiled = nutpie.compile_pymc_model(model, backend=opt["backend"])
    t1 = time.perf_counter()
    trace = nutpie.sample(compiled, chains=chains, tune=warmup, draws=samples, seed=seed, cores=opt["cores"],
                          progress_bar=False)
    t2 = time.perf_counter()
    out.update({"wall_s": t2 - t0, "compile_s": t1 - t0, "sampling_s": t2 - t1})
    ss = trace.sample_stats
    post = trace.posterior.to_dataset()
    out["diag"] = diag(post, ss["diverging"].values.sum(), post.sizes["chain"] * post.sizes["draw"])
    out["n_steps_mean"] = float(ss["n_steps"].values.mean())
    out["max_depth_pct"] = float(100 * ss["maxdepth_reached"].values.mean())
    out["warmup_n_steps_mean"] = float(trace.warmup_sample_stats["n_steps"].values.mean())
    # a chain stuck in a poorer mode shows as a lower mean log density
    out["chain_mean_logp"] = [float(v) for v in ss["logp"].mean("draw").values]
    if opt.get("default_model"):
        out["means"] = means(post)

elif mode == "blackjax":
    from scalinfer.runtime import configure
    configure(chains)
    import jax
    import blackjax
    from blackjax.adaptation.base import get_filter_adapt_info_fn
    from numpyro.infer.util import constrain_fn, potential_energy
    from scalinfer.inference.fit import _finite_starts, _preconditioner
    from scalinfer.inference.optimize import find_map, laplace_flat
    t0 = time.perf_counter()
    data, const = MODEL.prepare(runs)
    kw = MODEL.model_kwargs(data, const)
    # what scalinfer.fit does before NUTS: the mode, Laplace-scaled coordinates, chain starts from the Laplace
    point = find_map(MODEL.model, kw, MODEL.init_values(data, const), seed=seed)
    flat = laplace_flat(point, chains, seed=seed + 1)
    from jax.flatten_util import ravel_pytree
    _, unravel = ravel_pytree(point.z)
    pc = _preconditioner(point)
    mean, scale = np.asarray(pc.mean), np.asarray(pc.scale)
    w_init = (np.asarray(_finite_starts(point, flat)) - mean) / scale
    affine = lambda w: unravel(mean + scale * w)  # noqa: E731
    logdensity = lambda w: -potential_energy(MODEL.model, (), kw, affine(w))  # noqa: E731
    t_prep = time.perf_counter()

    def chain(key, w0):
        k_warm, k_draw = jax.random.split(key)
        adapt = blackjax.window_adaptation(blackjax.nuts, logdensity, is_mass_matrix_diagonal=False,
                                           target_acceptance_rate=0.9, adaptation_info_fn=get_filter_adapt_info_fn())
        (state, params), _ = adapt.run(k_warm, w0, num_steps=warmup)
        kernel = blackjax.nuts(logdensity, **params)

        def step(st, k):
            st, info = kernel.step(k, st)
            return st, (st.position, info.is_divergent, info.num_integration_steps)

        _, (w, div, n) = jax.lax.scan(step, state, jax.random.split(k_draw, samples))
        z = jax.vmap(affine)(w)
        return jax.vmap(lambda v: constrain_fn(MODEL.model, (), kw, v, return_deterministic=True))(z), div, n

    keys = jax.random.split(jax.random.PRNGKey(seed), chains)
    program = jax.pmap(chain).lower(keys, w_init).compile()
    t_compile = time.perf_counter()
    draws, div, n = jax.device_get(program(keys, w_init))
    t2 = time.perf_counter()
    out.update({"wall_s": t2 - t0, "prep_s": t_prep - t0, "compile_s": t_compile - t_prep,
                "sampling_s": t2 - t_compile})
    from arviz_base import from_dict
    tree = from_dict({"posterior": {k: np.asarray(v) for k, v in draws.items()}},
                     dims={k: ["setting"] for k in SETTING})
    post = tree["posterior"].to_dataset()
    out["diag"] = diag(post, np.asarray(div).sum(), chains * samples)
    out["n_steps_mean"] = float(np.asarray(n).mean())

out["load_after"] = os.getloadavg()[0]
out["process_wall_s"] = time.perf_counter() - t_process
print(json.dumps(out, default=float))
"""


def _child(mode: str, args, env: dict[str, str], failures: dict[str, str] | None = None, name: str = "",
           **opt) -> dict | None:
    """Run one measurement in a fresh process; its last stdout line is a JSON object. A process that fails stops the
    benchmark, unless `failures` is given (a peer's run that may refuse to start, as nutpie from an exact mode): then
    None, its error's gist in ``failures[name]`` (the JSON's ``failed_runs``), and the benchmark goes on without it."""
    opt = {"bench_dir": str(Path(__file__).resolve().parent), **opt}
    print(f"fit_speed: {mode} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", SURFACE_CHILD, mode, str(args.data), args.format or "",
                          str(args.chains), str(args.warmup), str(args.samples), str(args.seed), json.dumps(opt)],
                         capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT)
    if res.returncode and failures is not None:
        failures[name] = _gist(res.stderr)
        print(f"fit_speed: {name} failed, its row is left out: {failures[name]}", file=sys.stderr, flush=True)
        return None
    if res.returncode:
        sys.exit(f"fit_speed: the {mode} process failed:\n{res.stderr[-6000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"fit_speed: {mode} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def _gist(stderr: str) -> str:
    """A failed process's error in a line: its last exception line (``SomeError: ...``), and the first line after a
    Rust error's ``Caused by:`` (nutpie's reason)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", ln)]
    gist = errors[-1] if errors else (lines[-1] if lines else "no error output")
    if "Caused by:" in lines[:-1]:
        gist += f" ({lines[lines.index('Caused by:') + 1]})"
    return gist


def _quickstart(env: dict[str, str]) -> dict:
    """`scalinfer quickstart --json` in a fresh process: its fit's own seconds (``wall_s``), the process's wall
    (start-up, the prediction and the text included), and its convergence figures."""
    print("fit_speed: quickstart ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "scalinfer.cli", "quickstart", "--json"], capture_output=True,
                         text=True, env={**os.environ, **env}, cwd=ROOT)
    wall = time.perf_counter() - t0
    if res.returncode:
        sys.exit(f"fit_speed: the quickstart process failed:\n{res.stderr[-6000:]}")
    q = json.loads(res.stdout)
    print(f"fit_speed: quickstart done in {wall:.0f} s", file=sys.stderr, flush=True)
    return {"wall_s": q["fit_seconds"], "process_wall_s": wall, "rhat_max": q["r_hat_max"],
            "ess_bulk_min": q["ess_bulk_min"], "divergences": q["divergences"], "converged": q["converged"]}


def _versions() -> dict[str, str | None]:
    """The installed versions the figures depend on (the compilers' above all: jax 0.12.1 moved a cold fit by
    seconds, benchmarks/README.md), None for a package not installed."""
    out = {}
    for name in ("jax", "jaxlib", "numpyro", "nutpie", "pymc"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _median(runs) -> dict:
    """The run of median wall among an odd number of runs (the lower middle of an even number)."""
    runs = sorted(runs, key=lambda r: r["wall_s"])
    return runs[(len(runs) - 1) // 2]


def surface_benchmark(args) -> None:
    if not Path(args.data).exists():
        sys.exit(f"dataset not found: {args.data} (the Step Law CSV is read in place, never copied)")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fit_speed_") as tmp:
        def fresh(name: str) -> str:
            d = Path(tmp) / name
            d.mkdir()
            return str(d)

        def pytensor_env(name: str) -> dict[str, str]:  # empty PyTensor compile dir and numba cache
            return {"PYTENSOR_FLAGS": f"base_compiledir={fresh(name + '_pytensor')}",
                    "NUMBA_CACHE_DIR": fresh(name + "_numba")}

        def cold_warm(**opt) -> tuple[dict, dict, dict]:
            """`args.repeats` (cold, warm) pairs, each pair a new cache: the median cold and warm runs by wall, and
            every run's wall and ESS/s."""
            pairs = []
            for i in range(args.repeats):
                cache = fresh(f"{'default' if opt else 'plain'}_cache_{i}")
                pairs.append((_child("nuts", args, {"SCALINFER_CACHE": cache}, **opt),
                              _child("nuts", args, {"SCALINFER_CACHE": cache}, **opt)))
            spread = {}
            for j, k in enumerate(("cold", "warm")):
                spread[f"{k}_wall_s"] = [p[j]["wall_s"] for p in pairs]
                spread[f"{k}_ess_per_s"] = [p[j]["diag"]["ess_bulk_min"] / p[j]["timings"]["nuts_s"] for p in pairs]
            return _median(p[0] for p in pairs), _median(p[1] for p in pairs), spread

        map_point = str(Path(tmp) / "map_point.json")
        maps = []
        for i in range(args.repeats):  # the equivalence check after the first (PyTensor's and numba's caches new)
            env = {"SCALINFER_CACHE": fresh(f"map_cache_{i}"), **(pytensor_env("check") if i == 0 else {})}
            maps.append(_child("map", args, env, check=i == 0 and not args.no_check, map_out=map_point))
        mp = dict(_median(maps))  # the row: the median run, with the first run's check
        if "equivalence" in maps[0]:
            mp["equivalence"] = maps[0]["equivalence"]
        cold, warm, spread = cold_warm()
        warm64 = None if args.no_float64 else _child("nuts", args, {"SCALINFER_CACHE": fresh("f64_cache")},
                                                    dtype="float64", repeat=True)
        npie = _child("nutpie", args, pytensor_env("nutpie"), backend=args.backend, cores=args.cores)
        failures: dict[str, str] = {}  # peers' runs from scalinfer's MAP that refused to start (`_child`)
        npie_map = None if args.no_nutpie_from_map else _child(
            "nutpie", args, pytensor_env("nutpie_map"), failures, "nutpie_from_map", backend=args.backend,
            cores=args.cores, init=map_point)
        bj = None if args.no_blackjax else _child("blackjax", args, {"SCALINFER_CACHE": fresh("blackjax_cache")})
        ss_cold, ss_warm, ss_spread = cold_warm(default_model=True)  # the default model (size scatter)
        npie_ss = _child("nutpie", args, pytensor_env("nutpie_default"), backend=args.backend, cores=args.cores,
                         default_model=True)
        # nutpie on the default model from scalinfer's mode of it, as for the plain model: the twin's own start
        # leaves chains in poorer modes
        map_point_ss = str(Path(tmp) / "map_point_default.json")
        mp_ss = None if args.no_nutpie_from_map else _child(
            "map", args, {"SCALINFER_CACHE": fresh("map_default_cache")}, default_model=True, map_out=map_point_ss)
        npie_ss_map = None if args.no_nutpie_from_map else _child(
            "nutpie", args, pytensor_env("nutpie_default_map"), failures, "nutpie_default_model_from_map",
            backend=args.backend, cores=args.cores, default_model=True, init=map_point_ss)
        qs_pairs = []
        for i in range(args.repeats):  # the quickstart (its table and settings, data/manifest.json), cold and warm
            env = {"SCALINFER_CACHE": fresh(f"quickstart_cache_{i}")}
            qs_pairs.append((_quickstart(env), _quickstart(env)))
        qs_cold, qs_warm = (_median(p[j] for p in qs_pairs) for j in (0, 1))
    load_end = os.getloadavg()

    compile_est = cold["wall_s"] - warm["wall_s"]
    versions = _versions()
    eps = {"warm": warm["diag"]["ess_bulk_min"] / warm["timings"]["nuts_s"],
           "cold": cold["diag"]["ess_bulk_min"] / cold["timings"]["nuts_s"],
           "nutpie": npie["diag"]["ess_bulk_min"] / npie["sampling_s"]}
    rows = [
        ("scalinfer cold", cold["wall_s"], compile_est, cold["timings"]["nuts_s"], cold["diag"], eps["cold"], cold),
        ("scalinfer warm", warm["wall_s"], warm["xla_compile_s"], warm["timings"]["nuts_s"], warm["diag"],
         eps["warm"], warm),
        ("scalinfer MAP (cold)", mp["wall_s"], mp["xla_compile_s"], None, None, None, mp),
    ]
    if warm64:
        eps["warm_float64"] = warm64["diag"]["ess_bulk_min"] / warm64["timings"]["nuts_s"]
        rows.append(("scalinfer f64 (2nd fit)", warm64["wall_s"], warm64["xla_compile_s"], warm64["timings"]["nuts_s"],
                     warm64["diag"], eps["warm_float64"], warm64))
    eps["default_size_scatter_warm"] = ss_warm["diag"]["ess_bulk_min"] / ss_warm["timings"]["nuts_s"]
    eps["nutpie_default_model"] = npie_ss["diag"]["ess_bulk_min"] / npie_ss["sampling_s"]
    if npie_ss_map:
        eps["nutpie_default_model_from_map"] = npie_ss_map["diag"]["ess_bulk_min"] / npie_ss_map["sampling_s"]
    import _pymc_surface as P
    # nutpie's runs of the default model that converged (R-hat <= 1.01), each with its cold wall (from the mode:
    # plus the mode's cold wall, as a user of nutpie would have to find it) and its ESS/s; the means agree only if
    # both samplers found the posterior, and a ratio to a run that did not converge is not like for like, so the
    # comparisons are against these alone (where both converged, each ratio against the better of the two, as the
    # plain model's)
    peers_ss = [(r, r["wall_s"] + (mp_ss["wall_s"] if r is npie_ss_map else 0.0), eps[k])
                for r, k in ((npie_ss, "nutpie_default_model"), (npie_ss_map, "nutpie_default_model_from_map"))
                if r and r["diag"]["rhat_max"] <= 1.01]
    converged = ss_warm["diag"]["rhat_max"] <= 1.01 and bool(peers_ss)
    best_ss = max(peers_ss, key=lambda p: p[2]) if converged else None  # by ESS/s
    peer_wall_ss = min(w for _, w, _ in peers_ss) if converged else None
    agreement = P.posterior_agreement(ss_warm["means"], best_ss[0]["means"]) if converged else None
    rows += [
        ("default, size sc. cold", ss_cold["wall_s"], ss_cold["wall_s"] - ss_warm["wall_s"],
         ss_cold["timings"]["nuts_s"], ss_cold["diag"], ss_cold["diag"]["ess_bulk_min"] / ss_cold["timings"]["nuts_s"],
         ss_cold),
        ("default, size sc. warm", ss_warm["wall_s"], ss_warm["xla_compile_s"], ss_warm["timings"]["nuts_s"],
         ss_warm["diag"], eps["default_size_scatter_warm"], ss_warm),
        ("nutpie default model", npie_ss["wall_s"], npie_ss["compile_s"], npie_ss["sampling_s"], npie_ss["diag"],
         eps["nutpie_default_model"], npie_ss),
        ("nutpie cold", npie["wall_s"], npie["compile_s"], npie["sampling_s"], npie["diag"], eps["nutpie"], npie),
    ]
    if npie_ss_map:
        rows.append(("nutpie default fr. MAP", npie_ss_map["wall_s"], npie_ss_map["compile_s"],
                     npie_ss_map["sampling_s"], npie_ss_map["diag"], eps["nutpie_default_model_from_map"],
                     npie_ss_map))
    if npie_map:
        eps["nutpie_from_map"] = npie_map["diag"]["ess_bulk_min"] / npie_map["sampling_s"]
        rows.append(("nutpie from MAP (cold)", npie_map["wall_s"], npie_map["compile_s"], npie_map["sampling_s"],
                     npie_map["diag"], eps["nutpie_from_map"], npie_map))
    if bj:
        eps["blackjax"] = bj["diag"]["ess_bulk_min"] / bj["sampling_s"]
        rows.append(("blackjax cold", bj["wall_s"], bj["compile_s"], bj["sampling_s"], bj["diag"], eps["blackjax"], bj))

    print(f"surface on {args.data} ({cold['n_runs']} runs): {args.chains} chains x ({args.warmup} warmup + "
          f"{args.samples} draws); nutpie cores={args.cores}, backend {args.backend}")
    print(f"load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f} "
          f"(1 / 5 / 15 min) on {os.cpu_count()} CPUs; " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if "equivalence" in mp:
        e = mp["equivalence"]
        print(f"PyMC == NumPyro log density at {e['n_points']} points ({e['n_params']} unconstrained coordinates): "
              f"offset {max(abs(o) for o in e['offset']):.2g}, differences between points agree to "
              f"{e['max_rel_err_of_differences']:.1e} (relative), gradients to {e['max_rel_grad_err']:.1e}")
    head = (f"{'':22s} {'wall s':>8s} {'compile s':>9s} {'sampling s':>10s} {'min bulk ESS':>12s} {'ESS/s':>7s} "
            f"{'R-hat max':>9s} {'divergences':>11s} {'steps/draw':>10s} {'load':>10s}")
    print(head)
    print("-" * len(head))
    for name, wall, comp, samp, d, rate, r in rows:
        f = lambda v, fmt: format(v, fmt) if v is not None else "-"  # noqa: E731
        print(f"{name:22s} {wall:8.1f} {comp:9.1f} {f(samp, '10.1f'):>10s} "
              f"{f(d and d['ess_bulk_min'], '12.0f'):>12s} {f(rate, '7.2f'):>7s} {f(d and d['rhat_max'], '9.3f'):>9s} "
              f"{f(d and d['divergences'], '11d'):>11s} {f(r.get('n_steps_mean'), '10.0f'):>10s} "
              f"{r['load_before']:4.1f}->{r['load_after']:4.1f}")
    print(f"load average at end {load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f}")
    print(f"quickstart (`scalinfer quickstart`, its fit's own seconds; the process's wall in brackets), median of "
          f"{args.repeats}: cold {qs_cold['wall_s']:.1f} s ({qs_cold['process_wall_s']:.1f} s), warm "
          f"{qs_warm['wall_s']:.1f} s ({qs_warm['process_wall_s']:.1f} s); R-hat max {qs_cold['rhat_max']:.3f}, "
          f"bulk ESS min {qs_cold['ess_bulk_min']:.0f}, {qs_cold['divergences']} divergent")
    print(f"scalinfer rows: the median of {args.repeats} (cold, warm) pairs by wall; every run:")
    for name, sp in (("plain", spread), ("default", ss_spread)):
        print(f"  {name:8s} " + "; ".join(f"{k} {', '.join(f'{v:.1f}' for v in vals)}" for k, vals in sp.items()))
    nutpie_rhats = ", ".join(f"{name} {r['diag']['rhat_max']:.3f}" for name, r in
                             (("own start", npie_ss), ("from the MAP", npie_ss_map)) if r)
    if agreement:
        which = "from the MAP" if best_ss[0] is npie_ss_map else "own start"
        print(f"default model: scalinfer (size scatter integrated out, `scalinfer.models.surface.size_scatter`) and "
              f"the PyMC twin (centered levels; nutpie {which}): max |z| of the posterior means "
              f"{agreement['max_abs_z']:.2f} ({agreement['worst']}) over {agreement['n']} scalars; ratios against "
              f"nutpie's better converged run: ESS/s {eps['default_size_scatter_warm']:.1f} / {best_ss[2]:.1f}, "
              f"cold wall {ss_cold['wall_s']:.1f} / {peer_wall_ss:.1f} s (R-hat max of nutpie's runs: {nutpie_rhats})")
    else:
        print(f"default model: the posteriors are not compared (R-hat max scalinfer {ss_warm['diag']['rhat_max']:.3f}, "
              f"nutpie {nutpie_rhats}: a sampler that did not converge has no posterior mean to compare), nor are "
              "the ratios against nutpie's runs meaningful")
    print("compile s: scalinfer cold = cold wall - warm wall; MAP and warm = XLA compile s not from the cache; "
          "nutpie = model build + compile_pymc_model. sampling s: scalinfer = fit.timings['nuts_s'] (cold: "
          "includes compiling NUTS); nutpie = nutpie.sample. ESS/s = min bulk ESS / sampling s. nutpie from MAP: "
          "every chain starts at scalinfer's MAP (its wall excludes finding it).")
    for name, r in (("scalinfer warm", warm), ("nutpie", npie), ("nutpie from MAP", npie_map)):
        if r and "chain_mean_logp" not in r:
            print(f"{name}: leapfrog steps per warmup iteration {r['warmup_n_steps_mean']:.0f}")
        elif r:
            print(f"{name}: mean log density per chain {', '.join(f'{v:.0f}' for v in r['chain_mean_logp'])}; "
                  f"leapfrog steps per warmup iteration {r['warmup_n_steps_mean']:.0f}")
    # the headline ratios are against nutpie's better run: its own start, or every chain at our MAP (whose
    # cold wall then includes finding the MAP, as a user would have to)
    peer_eps = max(v for k, v in eps.items() if k in ("nutpie", "nutpie_from_map"))  # the plain model's runs
    peer_wall = min([npie["wall_s"]] + ([npie_map["wall_s"] + mp["wall_s"]] if npie_map else []))
    print(f"headline ratios against nutpie's better run: ESS/s {eps['warm']:.1f} / {peer_eps:.1f}, "
          f"cold wall {cold['wall_s']:.1f} / {peer_wall:.1f} s")
    for name, why in failures.items():
        print(f"left out, its process failed: {name}: {why}")
    report = {
        "ess_per_s_ratio_vs_nutpie": eps["warm"] / peer_eps,
        "cold_wall_ratio_vs_nutpie": cold["wall_s"] / peer_wall,
        "ess_per_s_ratio_vs_nutpie_own_start": eps["warm"] / eps["nutpie"],
        "cold_wall_ratio_vs_nutpie_own_start": cold["wall_s"] / npie["wall_s"],
        "cold_wall_s": cold["wall_s"], "warm_wall_s": warm["wall_s"], "map_wall_s": mp["wall_s"],
        "map_repeats_wall_s": [r["wall_s"] for r in maps],
        "default_cold_wall_s": ss_cold["wall_s"], "default_warm_wall_s": ss_warm["wall_s"],
        "quickstart_fit_s": qs_cold["wall_s"], "quickstart_fit_warm_s": qs_warm["wall_s"],
        "quickstart_wall_s": qs_cold["process_wall_s"],
        "quickstart_repeats": [{"cold": c, "warm": w} for c, w in qs_pairs],
        "default_size_scatter": {"cold_wall_s": ss_cold["wall_s"], "warm_wall_s": ss_warm["wall_s"],
                                 "ess_per_s_warm": eps["default_size_scatter_warm"],
                                 "steps_per_draw": ss_warm["n_steps_mean"],
                                 # each against nutpie's better converged run (own start, or from the MAP with
                                 # the MAP's cold wall added); null where none converged
                                 "ess_per_s_ratio_vs_nutpie": eps["default_size_scatter_warm"] / best_ss[2]
                                 if converged else None,
                                 "cold_wall_ratio_vs_nutpie": ss_cold["wall_s"] / peer_wall_ss if converged else None,
                                 "rhat_max": ss_warm["diag"]["rhat_max"],
                                 "nutpie_rhat_max": npie_ss["diag"]["rhat_max"],
                                 "nutpie_wall_s": npie_ss["wall_s"], "nutpie_steps_per_draw": npie_ss["n_steps_mean"],
                                 "nutpie_from_map_rhat_max": npie_ss_map["diag"]["rhat_max"] if npie_ss_map else None,
                                 "nutpie_from_map_wall_s": npie_ss_map["wall_s"] if npie_ss_map else None,
                                 "map_wall_s": mp_ss["wall_s"] if mp_ss else None,
                                 "posterior_agreement": agreement, "repeats": ss_spread},
        "repeats": args.repeats, "plain_repeats": spread,
        "compile_s_estimate": compile_est, "xla_compile_s_cold": cold["xla_compile_s"],
        "ess_per_s": eps, "nutpie_cold_wall_s": npie["wall_s"], "nutpie_compile_s": npie["compile_s"],
        "nutpie_sampling_s": npie["sampling_s"],
        "model": "surface", "data": str(args.data), "n_runs": cold["n_runs"], "chains": args.chains,
        "warmup": args.warmup, "samples": args.samples, "nutpie_cores": args.cores, "nutpie_backend": args.backend,
        "cpus": os.cpu_count(), "load_start": list(load_start), "load_end": list(load_end),
        "equivalence": mp.get("equivalence"), "versions": versions,
        "runs": {"scalinfer_cold": cold, "scalinfer_warm": warm, "scalinfer_map": mp,
                 "scalinfer_float64_second_fit": warm64, "nutpie_cold": npie,
                 "nutpie_from_map_cold": npie_map, "blackjax_cold": bj,
                 "default_size_scatter_cold": ss_cold, "default_size_scatter_warm": ss_warm,
                 "nutpie_default_model_cold": npie_ss, "scalinfer_map_default_model": mp_ss,
                 "nutpie_default_model_from_map_cold": npie_ss_map},
        "failed_runs": failures,
    }
    if npie_map:
        report["ess_per_s_ratio_vs_nutpie_from_map"] = eps["warm"] / eps["nutpie_from_map"]
    if bj:
        report["ess_per_s_ratio_blackjax_vs_nutpie"] = eps["blackjax"] / eps["nutpie"]
    print(json.dumps(report, default=float))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="surface",
                   help="surface (default): scalinfer against nutpie; any other: repeated fits of that model")
    p.add_argument("--data", default=None, help="the run table (default: Step Law's dense runs for surface, "
                   "data/simulated_chinchilla.csv otherwise)")
    p.add_argument("--format", default=None, help="the table's format (see scalinfer.load_runs), if not detected")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=None, help="warmup (tune) per chain (surface 1000, else 500)")
    p.add_argument("--samples", type=int, default=None, help="draws per chain (surface 1000, else 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cores", type=int, default=2, help="nutpie's cores (surface)")
    p.add_argument("--backend", default="numba", choices=("numba", "jax"), help="nutpie's backend (surface)")
    p.add_argument("--no-blackjax", action="store_true", help="skip the blackjax row (surface)")
    p.add_argument("--no-nutpie-from-map", action="store_true",
                   help="skip the nutpie rows that start every chain at scalinfer's MAP, of the plain and of the "
                   "default model (surface)")
    p.add_argument("--no-check", action="store_true", help="skip the PyMC/NumPyro log-density check (surface)")
    p.add_argument("--no-float64", action="store_true", help="skip the scalinfer float64-potential row (surface)")
    p.add_argument("--repeats", type=int, default=3,
                   help="(cold, warm) pairs per scalinfer model, each a new cache; rows are the median (surface)")
    args = p.parse_args()
    surface = args.model == "surface"
    default_size = 1000 if surface else 500
    args.warmup = default_size if args.warmup is None else args.warmup
    args.samples = default_size if args.samples is None else args.samples
    if surface:
        args.data = args.data or str(STEPLAW)
        args.format = args.format or "steplaw"
        surface_benchmark(args)
    else:
        args.data = args.data or str(ROOT / "data" / "simulated_chinchilla.csv")
        repeated_fits(args)


if __name__ == "__main__":
    main()
