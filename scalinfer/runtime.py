"""JAX's process-wide settings, in one place: CPU devices for parallel chains, float64, the persistent
compilation cache, and joining a multi-host job.

Library functions never change these behind the caller's back. A fit computes in float64 inside
``jax.enable_x64(True)``, which restores the caller's setting on return (`float64`); it does not ask for
devices (with fewer devices than chains, `chain_method_for` warns and the chains run batched on one) and
does not turn the persistent cache on. A program that wants them process-wide asks once, before it runs any
JAX code, as the ``scalinfer`` command and the trainer do (in the manner of NumPyro's
``set_host_device_count`` and ``enable_x64``)::

    import scalinfer.runtime
    scalinfer.runtime.configure(n_devices=4)  # 4 CPU devices (one per chain), float64, the compile cache

or sets ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` before starting Python.

Environment: ``SCALINFER_CACHE`` (the cache folder, see `cache_root`), ``SCALINFER_NO_CACHE=1`` (no
persistent compilation cache).
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

from scalinfer.errors import ScalinferError

__all__ = ["configure", "cache_root", "cache_dir", "backend_started", "float64", "chain_method_for",
           "MIN_COMPILE_S"]

#: programs that compile faster than this (seconds) are not written to the persistent cache. 0: every program is,
#: since loading a small one takes a few ms where compiling it again takes 10-120 ms in every process (a fit's start
#: program, the JAX arrays its data become; benchmarks/README.md, "fit_speed.py")
MIN_COMPILE_S = 0.0

F = TypeVar("F", bound=Callable[..., Any])


def cache_root() -> Path:
    """scalinfer's cache folder (safe to delete): ``$SCALINFER_CACHE``, else ``$XDG_CACHE_HOME/scalinfer``,
    else ``~/.cache/scalinfer``. It holds the compiled programs (`cache_dir`), the traced ones
    (`scalinfer.inference.compiled.program_store`) and the trainer's corpora."""
    if os.environ.get("SCALINFER_CACHE"):
        return Path(os.environ["SCALINFER_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scalinfer"


def cache_dir() -> Path:
    """Where `configure` keeps compiled XLA programs between processes: ``cache_root() / "jax"``."""
    return cache_root() / "jax"


def backend_started() -> bool:
    """Whether JAX has started its backends (after which the number of CPU devices is fixed).

    JAX has no public query for this. It refuses a *changed* ``jax_num_cpu_devices`` once a backend runs
    (a ``RuntimeError``), and takes it before; so this asks for one device more and puts the old value back.
    """
    import jax

    n = jax.config.jax_num_cpu_devices
    try:
        jax.config.update("jax_num_cpu_devices", n + 1)
    except RuntimeError:
        return True
    jax.config.update("jax_num_cpu_devices", n)
    return False


def configure(n_devices: int | None = None, x64: bool = True, cache: bool = True, multihost: bool = False,
              coordinator_address: str | None = None, num_processes: int | None = None,
              process_id: int | None = None) -> None:
    """Set JAX's process-wide settings for scalinfer. Call it before running any JAX code; idempotent.

    Parameters
    ----------
    n_devices : at least this many CPU devices (``jax_num_cpu_devices``), one per parallel NUTS chain; a
        larger count asked for earlier stays. Takes effect only before JAX starts its backend (later, a
        `RuntimeWarning` says so if there are fewer) and not where ``XLA_FLAGS`` already sets
        ``--xla_force_host_platform_device_count`` (the user's choice). None leaves the count as it is.
    x64 : turn float64 on for the whole process (``jax_enable_x64``); False leaves it as it is. Fits compute
        in float64 either way (`float64`).
    cache : turn on JAX's persistent compilation cache in `cache_dir`, keeping every program (`MIN_COMPILE_S`),
        and with it the store of traced programs (`scalinfer.inference.compiled.program_store`); not where a
        cache folder is configured already (the user's ``jax_compilation_cache_dir`` or
        ``JAX_COMPILATION_CACHE_DIR``), nor with ``SCALINFER_NO_CACHE=1``, nor in a multi-process job on CPU
        (`multihost` on the CPU backend: under jax 0.12.1 its processes deadlock in a collective when they run an
        executable read back from the cache; each launch compiles).
        A folder that cannot be created turns it off with a note on stderr.
    multihost : join the multi-process job (``jax.distributed.initialize``), once per process, before JAX
        starts its backend. On CPU the processes' collectives are gloo's (over TCP), JAX's default, unless the
        user chose another implementation (``jax_cpu_collectives_implementation``).
    coordinator_address, num_processes, process_id : passed to ``jax.distributed.initialize`` (process 0's
        ``host:port``, the number of processes, this one's index); None lets JAX take them from
        ``JAX_COORDINATOR_ADDRESS`` or the cluster's environment (Slurm, Open MPI, Kubernetes, Cloud TPU).
    """
    import jax

    if n_devices is not None:
        if isinstance(n_devices, bool) or not isinstance(n_devices, int) or n_devices < 1:
            raise ScalinferError(f"n_devices must be a positive number of CPU devices, got {n_devices!r}")
        if ("--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", "")
                and jax.config.jax_num_cpu_devices < n_devices):
            try:
                jax.config.update("jax_num_cpu_devices", n_devices)
            except RuntimeError:  # the backend runs: the count is fixed
                if jax.local_device_count() < n_devices:
                    warnings.warn(
                        f"scalinfer: JAX started before configure(n_devices={n_devices}) and keeps its "
                        f"{jax.local_device_count()} device(s); call it before running any JAX code",
                        RuntimeWarning, stacklevel=2)
    if multihost:
        _join_cluster(coordinator_address, num_processes, process_id)
    if x64:
        jax.config.update("jax_enable_x64", True)  # N ~ 1e12 to fractional powers is unsafe in float32
    # a multi-process job on CPU compiles in every launch: under jax 0.12.1 its processes deadlock in their first
    # collective (gloo's) when they run an executable read back from the persistent cache (tests/test_multiprocess.py)
    cpu_job = multihost and jax.default_backend() == "cpu"
    if (cache and not cpu_job and not jax.config.jax_compilation_cache_dir
            and os.environ.get("SCALINFER_NO_CACHE") != "1"):
        try:
            d = cache_dir()
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a read-only home is no reason to fail
            print(f"scalinfer: compilation cache disabled ({e})", file=sys.stderr)
        else:
            jax.config.update("jax_compilation_cache_dir", str(d))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_S)


def _join_cluster(coordinator_address: str | None, num_processes: int | None, process_id: int | None) -> None:
    import jax

    if jax.distributed.is_initialized():
        return
    if jax.config.jax_cpu_collectives_implementation is None:  # no collectives: CPU processes could not reduce
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id)
    except Exception as e:  # the message of the cluster detection is what the user needs
        raise ScalinferError(f"multihost=true but jax.distributed.initialize() failed: {e}") from None


def float64(fn: F) -> F:
    """Decorator: run `fn` with JAX in float64 (inside ``jax.enable_x64(True)``, which restores the caller's
    setting on return) and hand back its JAX arrays as NumPy arrays, so that they stay float64 outside.

    For the laws at N ~ 1e12 raised to fractional powers, which float32 cannot carry."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import jax
        import numpy as np

        with jax.enable_x64(True):
            out = fn(*args, **kwargs)
            return jax.tree.map(lambda x: np.asarray(x) if isinstance(x, jax.Array) else x, out)

    return wrapper  # type: ignore[return-value]


def chain_method_for(chains: int) -> str:
    """``parallel`` when there is a device per chain, else ``vectorized`` (the chains batched on one device),
    with a warning that says why (NumPyro would silently run `parallel` sequentially)."""
    import jax

    n = jax.local_device_count()
    if chains <= 1:
        return "vectorized"
    if n >= chains:
        return "parallel"
    warnings.warn(
        f"scalinfer: {chains} chains but JAX has only {n} device(s); the chains run batched on one. Call "
        f"scalinfer.runtime.configure(n_devices={chains}) before running any JAX code, or set "
        f"XLA_FLAGS=--xla_force_host_platform_device_count={chains}.", RuntimeWarning, stacklevel=3)
    return "vectorized"
