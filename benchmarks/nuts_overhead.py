"""What a NUTS leapfrog step costs beyond the gradient: the same potential's leapfrog step in a bare loop, with
and without its value, against the leapfrog steps of NUTS transitions built by NumPyro's tree builder (which
`scalinfer.inference.nuts` runs, with a dense metric in whitened coordinates: the ``whitened`` row) and by
blackjax's.

The potential is the default `surface` model's on the quickstart's table (``data/calibration/runs.jsonl``, MoE runs;
``--table steplaw``: Step Law's 1,911 dense runs, read in place from ``../shared/datasets/steplaw``, the table of
`fit_speed.py`'s default-model rows), in the coordinates NUTS runs it in (the settings' optima pinned,
`Model.nuts_kwargs`, around the mode and scaled by the Laplace standard deviations), evaluated in float32 as a fit
does (`Model.potential_dtype`); the integrator is float64 with a dense inverse mass matrix, as in a fit. Each
program runs ``--leapfrogs`` steps per chain (the transitions' trees capped at depth 4, 15 steps, at a step size
small enough that they rarely turn), one chain per CPU device (``jax.pmap``), on 1 and on 4 devices (4 chains on
this machine's cores is what `scalinfer.fit` runs). Rows, per leapfrog step: wall time of the call over all chains'
steps, and the process's CPU time over them (medians of ``--repeats`` calls).

- ``leapfrog``: velocity Verlet steps in a ``fori_loop``; the potential's value is carried but never read, so XLA
  drops the part of the program only the value needs;
- ``leapfrog + value``: the same, the value summed (NUTS reads it for the energy of every step);
- ``NumPyro tree``: `numpyro.infer.hmc_util.build_tree` transitions, their momenta drawn as in a fit; and the
  same with the metric's diagonal only (the products by the dense inverse mass matrix in the kinetic energy and
  the U-turn checks are what it leaves out); and the same in coordinates u = A^-1 w, A A' the inverse mass
  matrix, with the identity metric (two products by A a step, in the potential and its gradient, instead, in the
  potential's float type: how `scalinfer.inference.nuts.nuts_kernel` runs a dense metric's transitions, each
  about its own start);
- ``blackjax tree``: ``blackjax.nuts.build_kernel()`` transitions (skipped where blackjax is not installed).

    .venv/bin/python benchmarks/nuts_overhead.py [--devices 1,4] [--leapfrogs 480] [--repeats 7] [--table steplaw]

The last line is one JSON object: ``{"table", "dim", "rows": {name: {"devices", "leapfrogs", "wall_us", "cpu_us"}},
"tree_over_value_cpu_us": {devices: NumPyro tree's CPU per step minus leapfrog + value's}}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPLAW = ROOT.parent / "shared" / "datasets" / "steplaw" / "dense_runs.csv"
DEPTH = 4  # trees of at most 15 leapfrog steps
STEP = 0.02  # small enough that trees rarely turn before the cap


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _counts(text: str) -> list[int]:
    return [_positive(c) for c in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=_counts, default=[1, 4],
                    help="CPU device counts to run on, comma-separated (default 1,4)")
    ap.add_argument("--leapfrogs", type=_positive, default=480,
                    help="leapfrog steps per chain per call (default 480)")
    ap.add_argument("--repeats", type=_positive, default=7, help="timed calls per program (default 7)")
    ap.add_argument("--table", choices=("quickstart", "steplaw"), default="quickstart",
                    help="the run table: the quickstart's (default) or Step Law's dense runs")
    args = ap.parse_args()
    counts = args.devices

    import scalinfer
    from scalinfer.runtime import configure

    configure(n_devices=max(counts), cache=False)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from numpyro.infer.hmc_util import IntegratorState, build_tree, euclidean_kinetic_energy, velocity_verlet
    from numpyro.infer.util import potential_energy

    from scalinfer.inference.compiled import join_kwargs, split_kwargs
    from scalinfer.inference.fit import _preconditioner as fit_preconditioner
    from scalinfer.inference.optimize import find_map
    from scalinfer.models import get_model

    if len(jax.devices()) < max(counts):
        sys.exit(f"nuts_overhead: {len(jax.devices())} CPU devices, --devices asks for {max(counts)}")
    if args.table == "steplaw":
        if not STEPLAW.exists():
            sys.exit(f"nuts_overhead: {STEPLAW} not found (Step Law's table is read in place, never copied)")
        runs = scalinfer.load_runs(STEPLAW, format="steplaw")
    else:
        runs = scalinfer.load_runs(ROOT / "data" / "calibration" / "runs.jsonl", where="arch != 'dense'")
    model = get_model("surface")
    data, constants = model.prepare(runs)
    kwargs = model.model_kwargs(data, constants)
    point = find_map(model.model, kwargs, model.init_values(data, constants))
    kwargs, values = model.nuts_kwargs(kwargs, point)
    point = find_map(model.model, kwargs, values, hold=point.held)
    pre = fit_preconditioner(point, True)  # w = (z - mode) / the Laplace standard deviations, as a fit's
    dynamic, static = split_kwargs(kwargs)
    dtype = np.dtype(model.potential_dtype or "float64")
    dynamic = jax.tree.map(lambda x: np.asarray(x).astype(dtype) if np.issubdtype(np.asarray(x).dtype, np.floating)
                           else np.asarray(x), dynamic)
    d = pre.dim
    inverse_mass = jnp.asarray(0.9 * np.identity(d) + 0.001)
    n_steps = args.leapfrogs

    def potential_of(data):
        full = join_kwargs(data, static)

        def potential(w):
            z = {k: v.astype(dtype) for k, v in pre.to_z(w).items()}
            return potential_energy(model.model, (), full, z).astype(w.dtype)

        return potential

    def start(potential, w0):
        vv_init, vv_update = velocity_verlet(potential, euclidean_kinetic_energy)
        s = vv_init(w0, None)
        momentum = jax.random.normal(jax.random.PRNGKey(1), (d,), w0.dtype)
        return vv_update, IntegratorState(s.z, momentum, s.potential_energy, s.z_grad)

    def leapfrog(w0, data):
        vv_update, s = start(potential_of(data), w0)
        s = jax.lax.fori_loop(0, n_steps, lambda i, s: vv_update(STEP, inverse_mass, s), s)
        return s.z, jnp.asarray(n_steps)

    def leapfrog_value(w0, data):
        vv_update, s = start(potential_of(data), w0)

        def body(i, c):
            s, total = c
            s = vv_update(STEP, inverse_mass, s)
            return s, total + s.potential_energy

        s, total = jax.lax.fori_loop(0, n_steps, body, (s, jnp.zeros((), w0.dtype)))
        return s.z, jnp.asarray(n_steps), total

    def numpyro_tree(w0, data, metric=inverse_mass, potential=None):
        vv_update, s = start(potential or potential_of(data), w0)

        def body(i, c):
            s, n, key = c
            key, k_momentum, k_tree = jax.random.split(key, 3)
            s = s._replace(r=jax.random.normal(k_momentum, (d,), w0.dtype))
            t = build_tree(vv_update, euclidean_kinetic_energy, s, metric, STEP, k_tree, max_tree_depth=DEPTH)
            return IntegratorState(t.z_proposal, s.r, t.z_proposal_pe, t.z_proposal_grad), n + t.num_proposals, key

        s, n, _ = jax.lax.fori_loop(0, n_steps // 2 ** DEPTH + 1, body, (s, jnp.asarray(0), jax.random.PRNGKey(0)))
        return s.z, n

    def blackjax_tree(w0, data):
        import blackjax

        potential = potential_of(data)
        kernel = blackjax.nuts.build_kernel()

        def logdensity(w):
            return -potential(w)

        def body(i, c):
            state, n, key = c
            key, k = jax.random.split(key)
            state, info = kernel(k, state, logdensity, STEP, inverse_mass, max_num_doublings=DEPTH)
            return state, n + info.num_integration_steps, key

        state, n, _ = jax.lax.fori_loop(0, n_steps // 2 ** DEPTH + 1, body,
                                        (blackjax.nuts.init(w0, logdensity), jnp.asarray(0), jax.random.PRNGKey(0)))
        return state.position, n

    def numpyro_tree_diagonal(w0, data):
        return numpyro_tree(w0, data, jnp.diag(inverse_mass))

    factor = jnp.linalg.cholesky(inverse_mass)  # w = A u: in u the metric is the identity

    def numpyro_tree_whitened(u0, data):
        factor_p = factor.astype(dtype)  # the product in the potential's float type, as `nuts_kernel`'s

        def potential(u):
            return potential_of(data)((factor_p @ u.astype(dtype)).astype(u.dtype))

        u, n = numpyro_tree(u0, data, jnp.ones(d, u0.dtype), potential)
        return factor @ u, n

    programs = {"leapfrog": leapfrog, "leapfrog + value": leapfrog_value, "NumPyro tree": numpyro_tree,
                "NumPyro tree, diagonal metric": numpyro_tree_diagonal,
                "NumPyro tree, whitened (u = A^-1 w)": numpyro_tree_whitened}
    try:
        import blackjax  # noqa: F401
        programs["blackjax tree"] = blackjax_tree
    except ImportError:
        print("nuts_overhead: blackjax not installed; its row skipped", file=sys.stderr)

    rows: dict[str, dict] = {}
    for n_dev in counts:
        w0 = jnp.zeros((n_dev, d))
        for name, fn in programs.items():
            run = jax.pmap(fn, in_axes=(0, None), devices=jax.devices()[:n_dev])
            out = jax.block_until_ready(run(w0, dynamic))  # compiles
            steps = int(np.asarray(out[1]).sum())
            walls, cpus = [], []
            for _ in range(args.repeats):
                t, c = time.perf_counter(), time.process_time()
                jax.block_until_ready(run(w0, dynamic))
                walls.append(time.perf_counter() - t)
                cpus.append(time.process_time() - c)
            rows[f"{name}, {n_dev} devices"] = {
                "devices": n_dev, "leapfrogs": steps, "wall_us": 1e6 * statistics.median(walls) / steps,
                "cpu_us": 1e6 * statistics.median(cpus) / steps}
            print(f"nuts_overhead: {name} on {n_dev} devices done", file=sys.stderr, flush=True)

    table = "Step Law's dense table" if args.table == "steplaw" else "the quickstart's table"
    print(f"\nper leapfrog step, the surface potential on {table} (d = {d}), medians of "
          f"{args.repeats} calls of {n_steps} steps per chain, one chain per device\n")
    print(f"{'program':46s} {'steps':>7s} {'wall us':>8s} {'CPU us':>7s}")
    for name, r in rows.items():
        print(f"{name:46s} {r['leapfrogs']:7d} {r['wall_us']:8.1f} {r['cpu_us']:7.1f}")
    over = {str(n): rows[f"NumPyro tree, {n} devices"]["cpu_us"] - rows[f"leapfrog + value, {n} devices"]["cpu_us"]
            for n in counts}
    rounded = {k: {kk: round(v, 2) if isinstance(v, float) else v for kk, v in r.items()} for k, r in rows.items()}
    print(json.dumps({"table": args.table, "dim": d, "rows": rounded,
                      "tree_over_value_cpu_us": {k: round(v, 2) for k, v in over.items()}}))


if __name__ == "__main__":
    main()
