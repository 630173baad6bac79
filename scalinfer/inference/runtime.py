"""JAX runtime set-up for fitting: CPU devices for parallel chains, float64, the persistent compilation cache.

These must happen before JAX starts its backend (devices) or before the first compilation (cache), so
`prepare_runtime` is called at the top of every fit, and by the CLI before anything else.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

__all__ = ["prepare_runtime", "cache_dir", "chain_method_for"]

_DONE = False


def cache_dir() -> Path:
    """Where compiled XLA programs are kept between runs (safe to delete; override with SCALINFER_CACHE)."""
    base = os.environ.get("SCALINFER_CACHE") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / ("" if "SCALINFER_CACHE" in os.environ else "scalinfer") / "jax"


def prepare_runtime(n_devices: int = 4) -> None:
    """Ask for `n_devices` CPU devices (one per chain) if JAX has not started yet, turn on float64 and the
    persistent compilation cache. Idempotent."""
    global _DONE
    import jax
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
            # virtual CPU devices are cheap; ask for enough for the default 4 chains even if the first fit
            # of the session uses fewer
            jax.config.update("jax_num_cpu_devices", max(n_devices, 4, os.cpu_count() or 1))
    if _DONE:
        return
    jax.config.update("jax_enable_x64", True)  # N ~ 1e12 to fractional powers is unsafe in float32
    if os.environ.get("SCALINFER_NO_CACHE") != "1":
        try:
            d = cache_dir()
            d.mkdir(parents=True, exist_ok=True)
            jax.config.update("jax_compilation_cache_dir", str(d))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        except OSError as e:  # a read-only home is no reason to fail a fit
            print(f"scalinfer: compilation cache disabled ({e})", file=sys.stderr)
    _DONE = True


def chain_method_for(chains: int) -> str:
    """``parallel`` when there is a device per chain, else ``sequential``, with a warning that says why
    (NumPyro would silently run `parallel` sequentially)."""
    import jax

    n = jax.local_device_count()
    if chains <= 1:
        return "sequential"
    if n >= chains:
        return "parallel"
    warnings.warn(
        f"scalinfer: {chains} chains but JAX has only {n} device(s) (it started before scalinfer could ask "
        f"for more); chains run one after another. Import scalinfer before running any JAX code, or set "
        f"XLA_FLAGS=--xla_force_host_platform_device_count={chains}.", RuntimeWarning, stacklevel=3)
    return "sequential"
