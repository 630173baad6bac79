"""Stopping training on a signal with nothing lost (``scalinfer train``, ``scalinfer sweep --only/--index``).

The first SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption) asks the trainer to stop after the step in
flight and save a checkpoint of it (`scalinfer.train.train`'s ``stop_requested``); a second acts at once.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["stop_on_signal"]


@contextlib.contextmanager
def stop_on_signal(enabled: bool = True) -> Iterator[list[signal.Signals]]:
    """While the block runs, the first SIGINT or SIGTERM is appended to the yielded list (the run stops at its
    next step boundary) and announced on stderr, and the previous handlers are put back, so that a second
    signal acts as it would have. Handlers are put back on exit too. Nothing is installed when not
    ``enabled``, off the main thread, or for a signal the process ignores."""
    received: list[signal.Signals] = []
    previous: dict[signal.Signals, object] = {}

    def restore():
        while previous:
            s, h = previous.popitem()
            signal.signal(s, signal.SIG_DFL if h is None else h)

    def handler(signum, frame):
        received.append(signal.Signals(signum))
        restore()
        print(f"\n{received[0].name}: stopping after the current step and saving a checkpoint (once more to stop at "
              f"once, losing the steps since the latest checkpoint)", file=sys.stderr, flush=True)

    if enabled and threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(s) is not signal.SIG_IGN:
                previous[s] = signal.signal(s, handler)
    try:
        yield received
    finally:
        restore()
