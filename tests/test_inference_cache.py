"""Issue #8: the data are arguments of the compiled programs, so a fit of new data of the same shapes
compiles nothing new: in the same process the executables are reused, and after `jax.clear_caches()` (or in
a new process) they come from the persistent compilation cache (`scalinfer.runtime.configure`; the suite's
own folder, tests/conftest.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import scalinfer
from scalinfer.inference.compiled import split_kwargs
from scalinfer.models import get_model
from support.compile_log import CompileLog

SETTINGS = dict(model="chinchilla", chains=2, warmup=150, samples=150)
#: the programs a NUTS fit compiles (named after the functions `jax.jit`/`jax.pmap` wrap)
PROGRAMS = ("scalinfer_start", "scalinfer_potential", "scalinfer_nuts",
            "scalinfer_log_densities")


def _table(seed: int):
    m = get_model("chinchilla")
    return scalinfer.load_runs(m.simulate(m.true_params(), m.default_design(), seed=seed))


def _fit(seed: int):
    with CompileLog() as log:
        f = scalinfer.fit(_table(seed), seed=seed, **SETTINGS)
    return f, log


@pytest.mark.slow
def test_second_fit_of_new_data_compiles_nothing():
    first, log1 = _fit(101)
    second, log2 = _fit(102)
    assert any(p in name for name in log1.by_name for p in PROGRAMS) or log1.hits, "the first fit compiled nothing"
    assert log2.compiles == 0, f"the second fit compiled {log2.compiles} program(s): {sorted(log2.by_name)}"
    assert log2.hits == 0  # not even a cache lookup: the executables are reused in memory
    # new data, new answer (not a cached result)
    a, b = first.posterior["alpha"].values, second.posterior["alpha"].values
    assert a.shape == b.shape == (2, 150) and not np.allclose(a, b)
    # and a sound one: the reused program still samples. 1.2, not 1.01: with 2 chains x 150 draws R-hat is
    # itself noisy (alpha's R-hat over 12 simulated tables at these settings: 1.00-1.14, the A-alpha ridge)
    assert second.summary()["alpha"]["r_hat"] < 1.2
    assert abs(float(np.median(b)) - get_model("chinchilla").true_params()["alpha"]) < 0.1


@pytest.mark.skipif(os.environ.get("SCALINFER_NO_CACHE") == "1", reason="persistent cache turned off")
@pytest.mark.slow
def test_fit_after_clearing_jax_caches_hits_the_persistent_cache():
    import jax

    from scalinfer import runtime

    # the suite's own cache folder (conftest), never the user's: no other process writes into it
    assert jax.config.jax_compilation_cache_dir == str(runtime.cache_dir())
    assert runtime.cache_dir().is_relative_to(os.environ["SCALINFER_CACHE"])
    # every program persisted, however fast it compiles (`runtime.MIN_COMPILE_S`)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == runtime.MIN_COMPILE_S == 0.0
    # an earlier test may have left these programs in memory only (loaded, or compiled before the cache was on):
    # then the first fit would reuse them, write nothing, and the second miss. Compile (or load) afresh.
    jax.clear_caches()
    _fit(201)
    jax.clear_caches()
    _, log = _fit(202)
    ours = {name: events for name, events in log.by_name.items() if any(p in name for p in PROGRAMS)}
    assert {p for p in PROGRAMS if any(p in name for name in ours)} == set(PROGRAMS), sorted(log.by_name)
    misses = {name: [s for hit, s in events if not hit] for name, events in ours.items()}
    assert not any(misses.values()), f"compiled again instead of a persistent-cache hit: {misses}"


@pytest.mark.slow
def test_programs_compiled_ahead_are_the_ones_run():
    """`fit` compiles the mode search's and NUTS's programs in threads before the mode is known
    (`scalinfer.inference.fit._compile_ahead`); a call whose arguments' shapes or types differ from the ones
    lowered ahead would compile a second program. Settings no other test uses, so nothing is in memory yet."""
    with CompileLog() as log:
        f = scalinfer.fit(_table(7), model="chinchilla", chains=2, warmup=147, samples=53, seed=7)
    assert f.posterior.sizes["draw"] == 53
    # the mode search's program may be in memory already (earlier tests' tables have these shapes): at most one;
    # one program of constrained values for the mode's one row and the draws' 106 (`compiled.DRAW_ROWS`)
    for p in ("scalinfer_potential", "scalinfer_nuts", "scalinfer_constrain", "scalinfer_log_densities"):
        events = [e for name, ev in log.by_name.items() if p in name for e in ev]
        assert len(events) <= 1, f"{p}: {len(events)} compilations or cache hits: {log.by_name}"
    assert any("scalinfer_nuts" in name for name in log.by_name), "NUTS's program was not compiled"


def test_draws_run_in_chunks_of_one_program():
    """`constrain` and `log_densities` run any number of draws through one program of `DRAW_ROWS` rows, the last
    chunk padded: the values of 1, DRAW_ROWS and DRAW_ROWS + 3 draws are those of each draw alone (the same
    program on the same row: equal to rounding), and no second program is compiled for another count."""
    from scalinfer.inference.compiled import DRAW_ROWS, constrain, log_densities

    m = get_model("chinchilla")
    runs = _table(3)
    data, const = m.prepare(runs)
    kwargs = m.model_kwargs(data, const)
    rng = np.random.default_rng(0)
    n = DRAW_ROWS + 3
    z = {k: rng.normal(0.0, 0.3, (n, *np.shape(v))) for k, v in m.init_values(data, const).items()}
    whole = constrain(m.model, z, kwargs)
    with CompileLog() as log:
        for i in (0, n - 1):
            one = constrain(m.model, {k: v[i:i + 1] for k, v in z.items()}, kwargs)
            for k in whole:
                np.testing.assert_allclose(whole[k][i], one[k][0], rtol=1e-12)
        samples = {k: whole[k].reshape(1, n, *np.shape(whole[k])[1:]) for k in z}
        lik, prior = log_densities(m.model, samples, kwargs)
        lik1, prior1 = log_densities(m.model, {k: v[:, n - 1:] for k, v in samples.items()}, kwargs)
        lik2, _ = log_densities(m.model, {k: v[:, :DRAW_ROWS] for k, v in samples.items()}, kwargs)
    assert all(v.shape[:2] == (1, n) for v in (*lik.values(), *prior.values()))
    for k in lik:
        np.testing.assert_allclose(lik[k][0, n - 1], lik1[k][0, 0], rtol=1e-12)
        np.testing.assert_allclose(lik[k][0, :DRAW_ROWS], lik2[k][0], rtol=1e-12)
    for k in prior:
        np.testing.assert_allclose(prior[k][0, n - 1], prior1[k][0, 0], rtol=1e-12)
    assert not any("scalinfer_constrain" in name for name in log.by_name), log.by_name
    assert sum(len(ev) for name, ev in log.by_name.items() if "scalinfer_log_densities" in name) <= 1


@pytest.mark.parametrize("value, dynamic", [
    (np.zeros(3), True), (1.5, True), (np.float64(2.0), True), (None, True),
    (3, False), (True, False), ("t", False), (np.int64(4), False), (np.array(5), False),
])
def test_split_kwargs(value, dynamic):
    dyn, static = split_kwargs({"x": value})
    assert ("x" in dyn) == dynamic and (dict(static).get("x") is not None) == (not dynamic)


def test_same_programs():
    """`same_programs`: the same static part and dynamic parts of the same tree, shapes and dtypes. New values of
    the same shapes (the surface model's pins of the optima) keep the programs; an argument that goes from None to
    an array (its pinned loss levels), a new shape or a new static value does not."""
    from scalinfer.inference.compiled import same_programs

    base = {"x": np.zeros(3), "pin": None, "n": 2}
    assert same_programs(base, {"x": np.ones(3), "pin": None, "n": 2})
    assert not same_programs(base, {"x": np.zeros(3), "pin": np.zeros(3), "n": 2})
    assert not same_programs(base, {"x": np.zeros(4), "pin": None, "n": 2})
    assert not same_programs(base, {"x": np.zeros(3, np.float32), "pin": None, "n": 2})
    assert not same_programs(base, {"x": np.zeros(3), "pin": None, "n": 3})


def test_equal_models_share_their_programs():
    """Every fit with model options builds a new (frozen, equal) model object, and Python compares bound
    methods by the identity of their instance: programs are keyed on the instance's equality, or each such
    fit would compile and keep a program of its own (what stopped a 100-table calibration run after ~30)."""
    from scalinfer.inference.compiled import program

    builds = []

    @program
    def build(model_fn, static):
        builds.append(model_fn)
        return object()

    surface = get_model("surface")
    a, b = surface.with_options(size_scatter=True), surface.with_options(size_scatter=True)
    assert a is not b and a.model != b.model  # what Python says of the bound methods
    assert build(a.model, ()) is build(b.model, ()) and len(builds) == 1
    build(surface.with_options(size_scatter=False).model, ())
    assert len(builds) == 2  # another model, another program


def test_release_if_crowded_drops_the_programs(monkeypatch):
    """Near the OS's limit on memory maps scalinfer's compiled programs are dropped (JAX's persistent cache
    brings them back); well below it nothing happens. The caller's own programs stay: tests/test_runtime.py."""
    from scalinfer.inference import compiled

    if not os.path.exists("/proc/sys/vm/max_map_count"):
        pytest.skip("no /proc here: the release is a no-op")

    @compiled.program
    def build(model_fn, static):
        return object()

    build(len, ())
    cache = compiled._CACHES[-1]
    monkeypatch.setattr(compiled, "_count_lines", lambda path: 10)
    assert not compiled.release_if_crowded() and len(cache) == 1
    monkeypatch.setattr(compiled, "_count_lines", lambda path: 10**9)
    assert compiled.release_if_crowded() and len(cache) == 0


def _forget_programs():
    """What a new process starts without: scalinfer's programs in memory and JAX's caches (the persistent cache
    and the program store stay, as on disk)."""
    import jax

    from scalinfer.inference import compiled

    with compiled._LOCK:
        for cache in compiled._CACHES:
            cache.clear()
    jax.clear_caches()


@pytest.mark.skipif(os.environ.get("SCALINFER_NO_CACHE") == "1", reason="persistent cache turned off")
@pytest.mark.slow
def test_stored_programs_are_read_back_not_traced(monkeypatch, capsys, tmp_path):
    """Where the persistent cache is on, a fit's programs are stored (`compiled.StoredProgram`): a new process reads
    them back instead of tracing the model again, and they draw exactly what the traced ones drew. A damaged
    stored program is traced again and replaced, with a note."""
    from jax import export

    from scalinfer.inference import compiled

    store = compiled.program_store()
    assert store is not None and store.is_relative_to(os.environ["SCALINFER_CACHE"])  # the suite's own folder
    # a folder of this test's own: the suite's is shared with the workers running beside it
    monkeypatch.setattr(compiled, "program_store", lambda: tmp_path)
    _forget_programs()  # programs an earlier test left in memory would not be stored here
    first = scalinfer.fit(_table(401), seed=401, **SETTINGS)
    stored = sorted(tmp_path.iterdir())
    assert len(stored) >= 4, f"the fit stored {len(stored)} programs"  # start, mode search, NUTS, constrain, ...

    _forget_programs()
    traced = []
    with monkeypatch.context() as m:
        m.setattr(export, "export", lambda fn, *a, **k: traced.append(fn) or pytest.fail("traced again"))
        again = scalinfer.fit(_table(401), seed=401, **SETTINGS)
    assert not traced
    np.testing.assert_array_equal(again.posterior["alpha"].values, first.posterior["alpha"].values)

    for path in stored:
        path.write_bytes(b"not a program")
    _forget_programs()
    third = scalinfer.fit(_table(401), seed=401, **SETTINGS)
    assert "unreadable" in capsys.readouterr().err
    np.testing.assert_array_equal(third.posterior["alpha"].values, first.posterior["alpha"].values)
    for path in stored:  # replaced by programs that read back
        export.deserialize(bytearray(path.read_bytes()))


def test_only_programs_named_by_their_inputs_are_stored():
    """A stored program is read back by its name: the model (class, options), the static arguments, the settings and
    scalinfer's sources. Where those do not say everything the program depends on, nothing is stored: a model
    outside scalinfer (its code is not in the digest), a closure, a non-dataclass owner, an object as a setting."""
    from scalinfer.inference import compiled

    surface = get_model("surface")

    def build(model_fn, static):
        return None

    a = compiled._stored_name(build, surface.with_options(size_scatter=True).model, (("k", 1),), ())
    b = compiled._stored_name(build, surface.with_options(size_scatter=False).model, (("k", 1),), ())
    assert a and b and a != b  # the options are in the name
    assert a == compiled._stored_name(build, surface.with_options(size_scatter=True).model, (("k", 1),), ())
    assert a != compiled._stored_name(build, surface.with_options(size_scatter=True).model, (("k", 2),), ())
    assert compiled._stored_name(build, surface.model, (), (object(),)) is None

    def local_model():
        return None

    assert compiled._stored_name(build, local_model, (), ()) is None  # a test's own model (and a closure)

    class NotADataclass:
        def model(self):
            return None

    assert compiled._stored_name(build, NotADataclass().model, (), ()) is None


def _sine(x):
    import jax.numpy as jnp

    return jnp.sin(x)


def _sine_program(monkeypatch, on_compile):
    """`_sine` as a `compiled.program` at optimization level 1, every XLA compilation (``Lowered.compile``) first
    calling `on_compile` with its compiler options."""
    import jax

    from scalinfer.inference import compiled

    original = jax.stages.Lowered.compile

    def compile_(self, compiler_options=None, **kw):
        on_compile(compiler_options)
        return original(self, compiler_options=compiler_options, **kw)

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile_)

    @compiled.program(optimization_level=1)
    def build(model_fn, static):
        return jax.jit(model_fn)

    return build(_sine, ())


def test_a_programs_compiler_options_hold_ahead_and_on_a_first_call(monkeypatch):
    """A program declared with an optimization level (`compiled.program`'s ``optimization_level``: the mode
    search's, at 1) compiles every executable with it, whether compiled ahead (``lower(...).compile()``) or by a
    first call with new shapes, and each executable once: the call must not fall back to a jitted function that
    XLA would compile again at its default level."""
    seen = []
    fn = _sine_program(monkeypatch, seen.append)
    level1 = {"xla_backend_optimization_level": 1}
    x = np.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(fn(x), np.sin(x), rtol=1e-12)  # a first call: compiled here, with the options
    fn(x)
    assert seen == [level1]
    y = np.linspace(0.0, 1.0, 7)
    fn.lower(y).compile()  # compiled ahead for other shapes, then called
    np.testing.assert_allclose(fn(y), np.sin(y), rtol=1e-12)
    assert seen == [level1, level1]
    assert fn.resolve(y) is fn.resolve(y)  # the executable itself, kept


def test_a_call_waits_for_its_program_compiling_in_another_thread(monkeypatch):
    """`scalinfer.fit` compiles programs in threads ahead of their first call (`LoweredProgram.compile`); a call
    that comes while one of its shapes still compiles must wait for that executable, not compile a second one
    (a duplicate compilation on the fit's critical path). The compilation is held open by an event, so the call
    is certain to come during it."""
    import threading

    started, release, seen = threading.Event(), threading.Event(), []

    def held_open(options):
        seen.append(threading.current_thread().name)
        started.set()
        release.wait(30)

    fn = _sine_program(monkeypatch, held_open)
    x = np.linspace(0.0, 1.0, 9)
    worker = threading.Thread(target=fn.lower(x).compile, name="ahead")
    worker.start()
    assert started.wait(30)
    result = {}
    caller = threading.Thread(target=lambda: result.update(y=fn(x)), name="caller")
    caller.start()
    caller.join(0.3)
    assert caller.is_alive(), "the call did not wait for the compilation under way"
    release.set()
    worker.join(30)
    caller.join(30)
    np.testing.assert_allclose(result["y"], np.sin(x), rtol=1e-12)
    assert seen == ["ahead"], f"compiled by {seen}"
