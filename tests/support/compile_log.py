"""Counting XLA compilations and persistent-cache hits, through JAX's public monitoring listeners."""

from __future__ import annotations

from typing import Any

import jax.monitoring as mon

__all__ = ["CompileLog"]


class CompileLog:
    """Within a ``with`` block, count XLA compilations (``compiles``, with their seconds ``compile_s``) and
    persistent compilation cache hits (``hits``), per compiled function name in ``by_name``.

    Example::

        with CompileLog() as log:
            f()
        log.compiles, log.hits
    """

    COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
    HIT_EVENT = "/jax/compilation_cache/cache_hits"

    def __init__(self):
        self.compiles = 0
        self.hits = 0
        self.compile_s = 0.0
        self.by_name: dict[str, list[tuple[bool, float]]] = {}
        self._pending_hit = False

    def _on_event(self, event: str, **kw: Any) -> None:
        if event == self.HIT_EVENT:
            self._pending_hit = True

    def _on_duration(self, event: str, secs: float, **kw: Any) -> None:
        if event != self.COMPILE_EVENT:
            return
        hit, self._pending_hit = self._pending_hit, False
        if hit:
            self.hits += 1
        else:
            self.compiles += 1
            self.compile_s += secs
        self.by_name.setdefault(str(kw.get("fun_name", "?")), []).append((hit, secs))

    def __enter__(self) -> CompileLog:
        mon.register_event_listener(self._on_event)
        mon.register_event_duration_secs_listener(self._on_duration)
        return self

    def __exit__(self, *exc: Any) -> None:
        mon.unregister_event_listener(self._on_event)
        mon.unregister_event_duration_listener(self._on_duration)
