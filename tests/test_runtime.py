"""scalinfer.runtime: process-wide JAX settings change only when the caller asks (`configure`); a library fit
leaves them as it found them; scalinfer drops only its own compiled programs; no private JAX or NumPyro
internals in the package."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import scalinfer
from scalinfer import runtime
from scalinfer.errors import ScalinferError
from scalinfer.models import get_model
from support.compile_log import CompileLog

PACKAGE = Path(scalinfer.__file__).resolve().parent
ROOT = PACKAGE.parent


def _runs(seed: int = 1):
    m = get_model("chinchilla")
    return scalinfer.load_runs(m.simulate(m.true_params(), m.default_design(), seed=seed))


def _python(code: str, tmp_path: Path, **env: str) -> dict:
    """Run `code` in a fresh Python (no XLA_FLAGS, the suite's cache folder) and return its last line's JSON."""
    environ = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")}
    environ.update(SCALINFER_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), **env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=environ)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _config() -> dict[str, str]:
    return {k: repr(v) for k, v in jax.config.values.items()}


def test_fit_leaves_jax_config_as_it_found_it():
    """With float64 off in the caller's process, a fit still computes in float64 (the same mode as with it
    on) and leaves every `jax.config` value as it was."""
    on = scalinfer.fit(_runs(), model="chinchilla", method="map")
    jax.config.update("jax_enable_x64", False)
    try:
        before = _config()
        off = scalinfer.fit(_runs(), model="chinchilla", method="map")
        pred = off.predict(N=7e10, D=1.4e12)
        after = _config()
    finally:
        jax.config.update("jax_enable_x64", True)
    assert after == before, {k: (before[k], after.get(k)) for k in before if after.get(k) != before[k]}
    assert off.posterior["alpha"].dtype == np.float64
    for k in on.posterior.data_vars:
        np.testing.assert_allclose(off.posterior[k].values, on.posterior[k].values, rtol=1e-9, err_msg=k)
    assert np.asarray(pred.draws["loss"]).dtype == np.float64


FRESH_FIT = """
import json, warnings
import jax
import scalinfer
from scalinfer.models import get_model
m = get_model("chinchilla")
runs = scalinfer.load_runs(m.simulate(m.true_params(), m.default_design(), seed=1))
before = {k: repr(v) for k, v in jax.config.values.items()}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    f = scalinfer.fit(runs, model="chinchilla", method="nuts", chains=2, warmup=30, samples=30)
after = {k: repr(v) for k, v in jax.config.values.items()}
print(json.dumps({"changed": {k: [before[k], after.get(k)] for k in before if after.get(k) != before[k]},
                  "x64": jax.config.jax_enable_x64, "cache": jax.config.jax_compilation_cache_dir,
                  "devices": jax.local_device_count(), "dtype": str(f.posterior["alpha"].dtype),
                  "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]}))
"""


@pytest.mark.slow
def test_a_fit_in_a_fresh_process_configures_nothing(tmp_path):
    """As in a notebook that did not call `configure`: float64 inside the fit only, no devices asked for, no
    persistent cache; the 2 chains run one after the other, with a warning that says how to run them in
    parallel."""
    out = _python(FRESH_FIT, tmp_path)
    assert out["changed"] == {} and out["x64"] is False and out["cache"] is None and out["devices"] == 1, out
    assert out["dtype"] == "float64"
    assert any("scalinfer.runtime.configure(n_devices=2)" in w for w in out["warnings"]), out["warnings"]
    assert not (tmp_path / "cache").exists()


CONFIGURE = """
import json, warnings
import jax
from scalinfer import runtime
fresh = not runtime.backend_started()
runtime.configure(3)
runtime.configure(2)  # at least 2: the 3 asked for before stay
runtime.configure(3)  # idempotent
import jax.numpy as jnp
x = jnp.ones(2) / 3
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    runtime.configure(8)  # too late: the backend runs
print(json.dumps({"fresh": fresh, "started": runtime.backend_started(), "devices": jax.local_device_count(),
                  "dtype": str(x.dtype), "cache": jax.config.jax_compilation_cache_dir,
                  "expected_cache": str(runtime.cache_dir()),
                  "min_s": jax.config.jax_persistent_cache_min_compile_time_secs,
                  "late": [str(w.message) for w in caught]}))
"""


def test_configure_sets_what_the_caller_asks(tmp_path):
    out = _python(CONFIGURE, tmp_path)
    assert out["fresh"] and out["started"] and out["devices"] == 3 and out["dtype"] == "float64", out
    assert out["cache"] == out["expected_cache"] == str(tmp_path / "cache" / "jax")
    assert out["min_s"] == runtime.MIN_COMPILE_S
    assert len(out["late"]) == 1 and "keeps its 3 device(s)" in out["late"][0]


KEEPS = """
import json, jax
from scalinfer import runtime
runtime.configure(x64=False)
print(json.dumps({"cache": jax.config.jax_compilation_cache_dir, "x64": jax.config.jax_enable_x64,
                  "n": jax.config.jax_num_cpu_devices}))
"""


def test_configure_keeps_the_users_cache_folder_and_precision(tmp_path):
    mine = str(tmp_path / "my-jax-cache")
    out = _python(KEEPS, tmp_path, JAX_COMPILATION_CACHE_DIR=mine)
    assert out == {"cache": mine, "x64": False, "n": -1}


def test_configure_rejects_a_bad_device_count():
    with pytest.raises(ScalinferError, match="n_devices"):
        runtime.configure(0)


def test_release_if_crowded_keeps_the_callers_programs(monkeypatch):
    """Near the memory-map limit scalinfer drops its own programs, never the caller's: a function the user
    compiled runs again without compiling (not even a persistent-cache lookup)."""
    from scalinfer.inference import compiled

    if not os.path.exists("/proc/sys/vm/max_map_count"):
        pytest.skip("no /proc here: the release is a no-op")

    @jax.jit
    def users(x):
        return jnp.sin(x) * 2.0 + 1.0

    x = np.linspace(0.0, 1.0, 7)
    users(x).block_until_ready()
    monkeypatch.setattr(compiled, "_count_lines", lambda path: 10**9)
    assert compiled.release_if_crowded()
    with CompileLog() as log:
        users(x).block_until_ready()
    assert log.compiles == 0 and log.hits == 0, log.by_name


def _matches(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if rx.search(line):
                out.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    return out


def test_no_private_jax_in_the_package():
    assert not _matches(r"\bjax\._src\b"), _matches(r"\bjax\._src\b")


def test_no_process_wide_jax_settings_outside_runtime():
    """`scalinfer.runtime` is the one module that calls ``jax.config.update``, ``jax.clear_caches`` or
    ``jax.distributed.initialize`` (docstrings may still show them)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "runtime.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "update", "clear_caches", "initialize"):
                name = ast.unparse(node.func)
                if name in ("jax.config.update", "config.update", "jax.clear_caches", "jax.distributed.initialize"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not found, found


def _numpyro_private(path: Path) -> list[str]:
    """NumPyro's private names in a module: an underscored module or name imported from NumPyro, an underscored
    attribute of NumPyro, or the fields of NumPyro's HMC adaptation state (``adapt_state``) read or written."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "numpyro":
            if any(part.startswith("_") for part in node.module.split(".")) \
                    or any(a.name.startswith("_") for a in node.names):
                out.append(f"{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            out += [f"{node.lineno}: import {a.name}" for a in node.names
                    if a.name.split(".")[0] == "numpyro" and any(p.startswith("_") for p in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if ast.unparse(node.value).split(".")[0] == "numpyro":
                out.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, (ast.Attribute, ast.keyword)) and getattr(node, "attr", getattr(node, "arg", None)) \
                == "adapt_state":
            out.append(f"{node.lineno}: adapt_state")
    return [f"{path.relative_to(ROOT)}:{x}" for x in out]


def test_no_private_numpyro_in_the_package():
    found = [x for path in sorted(PACKAGE.rglob("*.py")) for x in _numpyro_private(path)]
    assert not found, found
