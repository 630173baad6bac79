"""Running a sweep: workers that claim runs, train them, and merge after each (`run_sweep`, `run_one`).

Workers are separate processes (each a fresh JAX process, ``python -m scalinfer.cli.sweep``) that walk
the sweep in order and claim a run by taking an exclusive ``flock`` on ``runs/<run_id>/.lock``. The lock
dies with its process, so a killed worker leaves its run unclaimed and half done: a re-run skips finished
runs, resumes the interrupted one from its latest checkpoint (the trainer's exact resume) and adds no
duplicate record, because the merge keys every record by run id. The same claims make ``--only`` and
``--index`` safe to launch from any scheduler (one process per run, on many machines sharing ``DIR``).

Stopping: each worker runs in a process group of its own, and SIGINT (Ctrl-C) or SIGTERM to the parent is
passed on to every worker's group; on the first, a worker stops its run after the step in flight, saves a
checkpoint of that step (the trainer's ``stop_requested``) and claims no further run, so that a re-run loses
nothing; on a second, it stops at once (its run resumable from its latest checkpoint). The parent exits when
the workers have. A worker whose parent died without passing anything on (``kill -9``) notices within a second
(its parent process id changes), sends what it still prints to its log file, and stops as on a first signal.

Progress: with workers, the parent copies each worker's ``[sweep]`` lines to its log and, when stderr is a
terminal (or ``progress=True``), keeps a bar on stderr below them: runs done of the sweep's, running, failed,
elapsed time and an estimate of what is left (`_SweepProgress`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Iterator, Sequence

from tqdm import tqdm

from scalinfer.errors import ScalinferError, TrainError
from scalinfer.sweep.spec import Sweep, SweepRun, load_sweep
from scalinfer.sweep.store import (
    _ERROR, _RUN_INFO, _TABLE, SweepResult, _now, _recover_run_info, _run_info, merge, run_status,
)
from scalinfer.train.records import read_json, write_file

__all__ = ["run_one", "worker_loop", "run_sweep", "run_worker"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _claim(directory: Path) -> Iterator[bool]:
    """Try to take the run's lock without waiting; yields whether this process holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    fh = open(directory / ".lock", "a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        fh.truncate(0)  # who holds it, for people (the lock itself is the flock, released at exit)
        fh.write(f"{os.getpid()} {platform.node()} {_now()}\n")
        fh.flush()
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    finally:
        fh.close()


def run_one(run: SweepRun, out: str | os.PathLike, delete_checkpoints: bool = False,
            log=sys.stderr, skip_failed_since: float | None = None,
            stop_requested: Callable[[], bool] | None = None) -> str:
    """Run (or resume) one configuration of a sweep in this process, if no other process holds it.

    Returns ``done`` (finished now or before), ``busy`` (another process holds its claim), ``failed``
    (the trainer raised: the message goes to ``runs/<run_id>/error.txt`` and the run stays resumable)
    or ``stopped`` (``stop_after_steps`` or ``stop_requested``, passed to the trainer, ended it early, with a
    checkpoint). Diverged runs are ``done``: the trainer records them as censored observations. With
    ``skip_failed_since`` (a ``time.time()``), a run that already failed after that moment is not tried again
    (``failed``): the workers of one sweep invocation try a failing run once, the next invocation retries it.
    """
    from scalinfer.train.loop import train

    d = run.directory(out)
    if run_status(run, out).state == "done":
        _recover_run_info(run, d)
        return "done"
    err = d / _ERROR
    if skip_failed_since is not None and err.exists() and err.stat().st_mtime >= skip_failed_since:
        return "failed"
    with _claim(d) as held:
        if not held:
            return "busy"
        if run_status(run, out).state == "done":  # finished by another process while we waited
            return "done"
        (d / _ERROR).unlink(missing_ok=True)
        started, t0 = _now(), time.perf_counter()
        print(f"[sweep] {run.index}: {run.name} ({run.run_id}) started", file=log, flush=True)
        try:
            records = train(run.config, d, stop_requested=stop_requested)
        except Exception as e:  # noqa: BLE001 - recorded, reported, and resumable
            msg = f"{type(e).__name__}: {e}".splitlines()[0]
            write_file(d / _ERROR, msg + "\n\n" + traceback.format_exc(), "the error report",
                       f"the run failed with {msg}")
            print(f"[sweep] {run.index}: {run.name} failed: {msg}", file=log, flush=True)
            return "failed"
        wall = time.perf_counter() - t0
        if not records:
            why = "asked to stop" if stop_requested is not None and stop_requested() else "stop_after_steps"
            print(f"[sweep] {run.index}: {run.name} stopped early ({why}; checkpoint saved); resumable",
                  file=log, flush=True)
            return "stopped"
        info_path = d / _RUN_INFO
        previous = read_json(info_path, "the sweep's record of the run's earlier attempts",
                             f"the run finished and its records are in {d / _TABLE}; delete the file and the next "
                             f"`scalinfer sweep` of this file writes a recovered one") if info_path.exists() else {}
        # a resumed run adds this attempt to the earlier ones (a recovered file's unknowns count as none)
        info = _run_info(run, records, started=previous.get("started") or started, finished=_now(),
                         wall_s=round((previous.get("wall_s") or 0.0) + wall, 3),
                         attempts=(previous.get("attempts") or 0) + 1, host=platform.node(), pid=os.getpid())
        write_file(info_path, json.dumps(info, indent=2) + "\n", "the sweep's record of the run",
                   f"the run finished and its records are in {d / _TABLE} (merged with the others), but this "
                   f"attempt's wall time and host are not recorded; the next `scalinfer sweep` of this file "
                   f"writes a recovered one (until then `export` leaves the run out): fix the cause (a full "
                   f"disk?)")
        if delete_checkpoints:
            for sub in ("checkpoints", "stable"):
                shutil.rmtree(d / sub, ignore_errors=True)
        losses = ", ".join("diverged" if r.get("diverged") else f"{r['loss']:.4f}" for r in records)
        print(f"[sweep] {run.index}: {run.name} done in {wall:.1f} s (loss {losses})", file=log, flush=True)
    return "done"


def worker_loop(sweep: Sweep, out: str | os.PathLike, runs: Sequence[SweepRun] | None = None,
                delete_checkpoints: bool = False, log=sys.stderr, since: float | None = None,
                stop_requested: Callable[[], bool] | None = None) -> dict[str, str]:
    """Claim and run the sweep's unfinished runs one after another (in this process); merge after each.

    Returns run name -> outcome (see `run_one`) for every run this worker touched or found busy. Once
    ``stop_requested()`` says so (a worker's stop signal, or its parent gone), the run in progress stops after
    its step in flight with a checkpoint, and no further run is claimed.
    """
    outcomes: dict[str, str] = {}
    for run in runs if runs is not None else sweep.runs:
        if stop_requested is not None and stop_requested():
            break
        outcome = run_one(run, out, delete_checkpoints, log, skip_failed_since=since, stop_requested=stop_requested)
        outcomes[run.name] = outcome
        if outcome in ("done", "failed", "stopped"):
            merge(out, sweep)
    return outcomes


def _install_sweep_file(sweep: Sweep, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    target = out / "sweep.toml"
    if sweep.text and (not target.exists() or target.read_text() != sweep.text):
        write_file(target, sweep.text, "the sweep file's copy", "nothing was run: fix the cause (a full disk? a "
                   "read-only folder?) and rerun")


def run_sweep(path: str | os.PathLike, out: str | os.PathLike, workers: int = 1, only: str | None = None,
              index: int | None = None, delete_checkpoints: bool = False, log=sys.stderr,
              progress: bool | None = None, stop_requested: Callable[[], bool] | None = None) -> SweepResult:
    """Run a sweep file into folder ``out`` (see the module docstring) and merge the results.

    Parameters
    ----------
    path : the sweep TOML file.
    out : the sweep folder (created; reused to resume).
    workers : parallel worker processes, each a fresh JAX process claiming runs in order.
    only : run just the run with this run id or name, in this process (for schedulers).
    index : run just the run at this 0-based position, in this process (e.g. ``$SLURM_ARRAY_TASK_ID``).
    delete_checkpoints : remove a run's checkpoints once all its records are written.
    log : where the ``[sweep]`` lines go (each worker's are also in ``out/logs/worker-K.log``).
    progress : with workers, a bar on stderr of the runs done, running and failed (`_SweepProgress`); None
        (default): only when stderr is a terminal.
    stop_requested : with ``only`` or ``index`` (the run trains in this process), a callable asked before
        each step: once it returns True the run stops with a checkpoint of its last step (`run_one`);
        `scalinfer.train.stop_on_signal` gives one that Ctrl-C sets. Workers get their stop requests from
        signals (the module docstring).

    Returns
    -------
    SweepResult : the merged table, each run's state, and workers that died.
    """
    sweep = load_sweep(path)
    out = Path(out)
    if workers < 1:
        raise TrainError(f"--workers must be >= 1 (got {workers})")
    if only is not None and index is not None:
        raise TrainError("give either --only or --index, not both")
    _install_sweep_file(sweep, out)
    if only is not None or index is not None:
        if index is not None and not 0 <= index < len(sweep.runs):
            raise TrainError(f"--index {index} is outside the sweep's runs 0..{len(sweep.runs) - 1}")
        run = sweep.find(only) if only is not None else sweep.runs[index]
        outcome = run_one(run, out, delete_checkpoints, log, stop_requested=stop_requested)
        if outcome == "busy":
            raise TrainError(f"run {run.name} ({run.run_id}) is being run by another process (its lock "
                             f"{run.directory(out) / '.lock'} is held)")
        return merge(out, sweep)

    pending = [r for r in sweep.runs if run_status(r, out).state != "done"]
    failures: list[str] = []
    if pending:
        n = min(workers, len(pending))
        cmd = [sys.executable, "-m", "scalinfer.cli.sweep", "--sweep", str(out / "sweep.toml"),
               "--out", str(out), "--since", repr(time.time())]
        cmd += ["--delete-checkpoints"] if delete_checkpoints else []
        print(f"[sweep] {sweep.name}: {len(pending)} of {len(sweep.runs)} runs to do, {n} worker(s)",
              file=log, flush=True)
        # each worker leads a process group of its own: a Ctrl-C in the terminal reaches this process alone,
        # which passes it on once (`_passing_on`), and a worker's own children (if any) get it too
        procs = [subprocess.Popen(cmd + ["--worker-id", str(k)], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, bufsize=1, process_group=0)
                 for k in range(n)]
        with _passing_on(procs) as received, _SweepProgress(len(sweep.runs), len(sweep.runs) - len(pending),
                                                            sweep.name, progress) as bar:
            try:
                _relay(procs, out / "logs", log, bar)
            except KeyboardInterrupt:
                if not received:  # interrupted another way than by a signal `_passing_on` saw
                    _signal_workers(procs, signal.SIGINT)
                for p in procs:
                    p.wait()
                raise
        if received:  # the workers have stopped and their last lines are relayed
            if received[0] == signal.SIGINT:
                raise KeyboardInterrupt
            signal.raise_signal(received[0])  # SIGTERM: now this process's own handler (default: exit)
        for k, p in enumerate(procs):
            if p.returncode < 0:
                failures.append(f"worker {k} (pid {p.pid}) was killed by signal {-p.returncode}")
            elif p.returncode not in (0, 3):
                failures.append(f"worker {k} (pid {p.pid}) exited with code {p.returncode}")
    res = merge(out, sweep)
    return dataclasses.replace(res, worker_failures=tuple(failures))


def _signal_workers(procs: Sequence[subprocess.Popen], signum: int) -> None:
    """Send `signum` to the process group of each worker still running."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signum)


@contextlib.contextmanager
def _passing_on(procs: Sequence[subprocess.Popen]) -> Iterator[list[int]]:
    """While the workers run, SIGINT and SIGTERM to this process are sent on to the workers' process groups
    (each one: a worker stops after its step in flight on the first, at once on the next); yields the list of
    the signals received. This process keeps relaying the workers' lines until they have stopped (the caller
    then acts on the signal), except on a second SIGINT, which raises KeyboardInterrupt here at once. The
    previous handlers come back on exit. Signal handlers can only be set in the main thread: elsewhere nothing
    is passed on (workers still stop when this process dies: `_ParentWatch`)."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum, frame):
        received.append(signum)
        _signal_workers(procs, signum)
        if len(received) == 1:
            print(f"[sweep] {signal.Signals(signum).name}: the workers stop after their current step and save a "
                  f"checkpoint (Ctrl-C again to stop them at once)", file=sys.stderr, flush=True)
        if signum == signal.SIGINT and received.count(signal.SIGINT) > 1:
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, handler) for s in _STOP_SIGNALS}
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)


class _SweepProgress:
    """A bar on stderr over a sweep's runs: done of all (those done before this invocation included), running,
    failed, elapsed and an estimate of what is left, kept up to date from the workers' ``[sweep]`` lines
    (`run_one` writes them: ``[sweep] INDEX: NAME (RUN_ID) started``, ``... done in ...``, ``... failed: ...``,
    ``... stopped early ...``). `write` puts a line on the log above the bar. Off (a plain writer) unless
    `enabled`, or, when `enabled` is None, unless stderr is a terminal."""

    _LINE = re.compile(r"\[sweep\] (\d+): .*?(?: \(\S+\) (started)$| (done) in | (failed): | (stopped) early)")

    def __init__(self, total: int, done: int, name: str, enabled: bool | None = None):
        show = sys.stderr is not None and sys.stderr.isatty() if enabled is None else bool(enabled)
        self.bar = tqdm(total=total, initial=done, desc=f"sweep {name}", unit="run", file=sys.stderr,
                        disable=not show, dynamic_ncols=True, leave=True)
        self.running: set[int] = set()
        self.failed = 0

    def __enter__(self) -> _SweepProgress:
        self._show()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()

    def _show(self) -> None:
        self.bar.set_postfix_str(f"{len(self.running)} running, {self.failed} failed")

    def saw(self, line: str) -> None:
        """Count the event a worker's ``[sweep]`` line reports, if any."""
        m = self._LINE.match(line.strip())
        if not m:
            return
        index, event = int(m.group(1)), next(g for g in m.groups()[1:] if g)
        if event == "started":
            self.running.add(index)
        else:
            self.running.discard(index)
            self.failed += event == "failed"
            if event == "done":
                self.bar.update(1)
        self._show()

    def write(self, text: str, log) -> None:
        """`text` (a line) to `log`, above the bar when both are on the same stream."""
        if self.bar.disable:
            print(text, end="", file=log, flush=True)
        else:
            tqdm.write(text, file=log, end="")
            log.flush()


def _relay(procs: list[subprocess.Popen], log_dir: Path, log, bar: _SweepProgress | None = None) -> None:
    """Append each worker's stderr to ``log_dir/worker-K.log`` and copy its ``[sweep]`` lines to ``log``
    (above `bar`, which counts them), until every worker exits."""
    import selectors

    log_dir.mkdir(parents=True, exist_ok=True)
    files = [open(log_dir / f"worker-{k}.log", "a") for k in range(len(procs))]
    sel = selectors.DefaultSelector()
    for k, p in enumerate(procs):
        sel.register(p.stderr, selectors.EVENT_READ, k)
    open_streams = len(procs)
    try:
        while open_streams:
            for key, _ in sel.select():
                line = key.fileobj.readline()
                if not line:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                files[key.data].write(line)
                files[key.data].flush()
                if line.startswith("[sweep]"):
                    if bar is None:
                        print(f"[w{key.data}] {line}", end="", file=log, flush=True)
                    else:
                        bar.saw(line)
                        bar.write(f"[w{key.data}] {line}", log)
    finally:
        sel.close()
        for f in files:
            f.close()
        for p in procs:
            p.wait()
            if p.stderr is not None:  # the pipe read above: closed here, not left to the garbage collector
                p.stderr.close()


class _ParentWatch:
    """A worker's watch on the process that started it (a daemon thread polling `os.getppid`).

    When the parent is gone (it died without stopping the worker: ``kill -9``), the worker's stderr, a pipe
    nobody reads any more, is pointed at `log_path`, and `orphaned` turns True: `worker_loop`'s stop request,
    so the run in progress stops after its step in flight with a checkpoint and no further run is claimed."""

    def __init__(self, log_path: Path, poll_s: float = 0.5):
        self.parent = os.getppid()
        self.log_path, self.poll_s = log_path, poll_s
        self.orphaned = False
        threading.Thread(target=self._watch, name="scalinfer-parent-watch", daemon=True).start()

    def _watch(self) -> None:
        while os.getppid() == self.parent:
            time.sleep(self.poll_s)
        with contextlib.suppress(OSError):
            self.log_path.parent.mkdir(exist_ok=True)
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            os.dup2(fd, sys.stderr.fileno())
            os.close(fd)
        print(f"[sweep] worker {os.getpid()}: the sweep's parent process is gone; stopping after the current "
              f"step, with a checkpoint", file=sys.stderr, flush=True)
        self.orphaned = True


def run_worker(sweep_path: str | os.PathLike, out: str | os.PathLike, worker_id: int = 0,
               delete_checkpoints: bool = False, since: float | None = None) -> int:
    """One worker process's work (``python -m scalinfer.cli.sweep`` parses its arguments): load the sweep file
    and `worker_loop` over its runs in folder ``out``, watching its parent (see the module docstring: the first
    SIGINT or SIGTERM, or the parent's death, stops the run in progress after its step in flight with a
    checkpoint; a second signal stops the worker at once).

    Returns the worker's exit code: 0 when every run it touched is done (or busy in another worker), 3 when
    some failed or stopped, 2 on a bad sweep file (reported as a ``[sweep]`` line on stderr), 130 on Ctrl-C,
    SIGTERM or the parent's death.
    """
    received: list[int] = []

    def at_once(signum, frame):
        raise KeyboardInterrupt

    def first(signum, frame):
        received.append(signum)
        for s in _STOP_SIGNALS:
            signal.signal(s, at_once)

    in_main = threading.current_thread() is threading.main_thread()  # where a handler can be set
    # SIGINT too: a worker started from a process that ignores it (a background job of a non-interactive shell,
    # a test runner's worker) inherits SIG_IGN, and would ignore the Ctrl-C its parent passes on
    previous = {s: signal.signal(s, first) for s in _STOP_SIGNALS} if in_main else {}
    watch = _ParentWatch(Path(out) / "logs" / f"worker-{worker_id}.log")
    try:
        sweep = load_sweep(sweep_path)
        outcomes = worker_loop(sweep, out, delete_checkpoints=delete_checkpoints, since=since,
                               stop_requested=lambda: bool(received) or watch.orphaned)
    except ScalinferError as e:
        print(f"[sweep] worker {worker_id}: error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        for s, h in previous.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)
    if received or watch.orphaned:
        return 130
    return 0 if all(v == "done" or v == "busy" for v in outcomes.values()) else 3
