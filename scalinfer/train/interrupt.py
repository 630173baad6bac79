"""Stopping training on a signal with nothing lost: `stop_on_signal` and its `StopRequest`.

The first SIGINT (Ctrl-C, or a notebook's "interrupt kernel") or SIGTERM (a scheduler's preemption) asks the
trainer to stop after the step in flight and save a checkpoint of it (`scalinfer.train.train`'s
``stop_requested``); a second acts at once. ``scalinfer train`` and ``scalinfer sweep --only/--index`` run under
it; in Python or a notebook::

    from scalinfer.train import stop_on_signal, train

    with stop_on_signal() as stop:
        records = train(cfg, "runs/x", stop_requested=stop)
    if stop.signal is not None:        # stopped early: [] returned, rerun the same call to resume
        ...
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["StopRequest", "stop_on_signal"]


class StopRequest:
    """A stop asked for by a signal. Calling it answers whether one arrived (``train``'s ``stop_requested``);
    ``signal`` is the first signal received, or None."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None

    def __call__(self) -> bool:
        return self.signal is not None


@contextlib.contextmanager
def stop_on_signal(enabled: bool = True) -> Iterator[StopRequest]:
    """While the block runs, the first SIGINT or SIGTERM is recorded in the yielded `StopRequest` (a run given
    it as ``stop_requested`` stops at its next step boundary) and announced on stderr, and the previous handlers
    are put back, so that a second signal acts as it would have (a KeyboardInterrupt for SIGINT). Handlers are
    put back on exit too. Nothing is installed when not ``enabled``, off the main thread (signal handlers can
    only be set there), or for a signal the process ignores."""
    stop = StopRequest()
    previous: dict[signal.Signals, object] = {}

    def restore():
        while previous:
            s, h = previous.popitem()
            signal.signal(s, signal.SIG_DFL if h is None else h)

    def handler(signum, frame):
        stop.signal = signal.Signals(signum)
        restore()
        print(f"\n{stop.signal.name}: stopping after the current step and saving a checkpoint (once more to stop at "
              f"once, losing the steps since the latest checkpoint)", file=sys.stderr, flush=True)

    if enabled and threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(s) is not signal.SIG_IGN:
                previous[s] = signal.signal(s, handler)
    try:
        yield stop
    finally:
        restore()
