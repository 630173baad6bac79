"""The train loop: a pure jitted train step, held-out evaluation, checkpoints, decay branches.

``train(config, out_dir)`` runs one configuration and returns its run-table records: one for the
main run and one per decay branch (docs/laws.md section 2: each branch forked from a stable-phase
checkpoint and decayed gives the final loss at another D). It owns the data, the checkpoints
and the logs; `train_step` and `eval_loss` are pure functions of arrays.

Files in ``out_dir``::

    config.json          the resolved configuration (a resume must match it)
    metrics.jsonl        one line per logged step, plus eval lines; branches: metrics-<branch>.jsonl
    diagnostics.jsonl    with diagnostics_every > 0, `scalinfer.train.diagnostics` every that many steps
                         (read_diagnostics); branches: diagnostics-<branch>.jsonl
    checkpoints/<step>/  periodic checkpoints (resume from the latest)
    stable/<step>/       stable-phase checkpoints the decay branches fork from
    runs.jsonl           the run table (or ``runs_table``), appended atomically

Resuming: rerun with the same ``out_dir`` (and config). The latest checkpoint restores params,
optimizer state, step, RNG key and data position, and the loss trajectory continues exactly as
if uninterrupted (a damaged latest checkpoint is moved aside with a warning and the one before is
used: `Checkpointer.restore_latest`; a damaged or missing stable-phase checkpoint of a branch still to
train is a `TrainError` saying how to recover). Records already in the run table are not redone. A
non-finite training loss stops the run: it is recorded as diverged (``loss: null``), never raised.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from scalinfer import runtime
from scalinfer.errors import TrainError
from scalinfer.laws import b_simple_from_grad_norms
from scalinfer.train import data as data_lib
from scalinfer.train import diagnostics as diag_lib
from scalinfer.train import model as model_lib
from scalinfer.train import parallel
from scalinfer.train.checkpoint import Checkpointer
from scalinfer.train.config import ModelConfig, TrainConfig, check, config_from_dict, config_to_dict, preset
from scalinfer.train.optimizer import make_optimizer
from scalinfer.train.records import MetricsLog, append_records, read_json, read_records, write_file
from scalinfer.train.token_plan import Branch, Plan, make_plan

__all__ = ["TrainState", "make_train_step", "make_eval_fn", "train", "run_id_of", "run_table_path", "tune_malloc"]

# Fields that do not change a run's results: a resume may change them.
_NON_RESULT_FIELDS = ("stop_after_steps", "progress", "log_every", "eval_every", "checkpoint_every",
                      "keep_checkpoints", "runs_table", "multihost", "coordinator_address", "num_processes",
                      "process_id", "diagnostics_every")
_EMA = 0.95  # B_simple: ratio of moving averages of |G|^2 and tr(Sigma), as the law's docstring asks
_NOISE_METRICS = ("grad_sq_small", "grad_sq_big", "grad_sq_true", "trace_cov", "b_simple")


class TrainState(NamedTuple):
    """Everything a step changes: params, optimizer state, step, RNG key data (uint32)."""

    params: Any
    opt_state: Any
    step: jax.Array
    rng: jax.Array


# ------------------------------------------------------------------------------------------
# Pure functions
# ------------------------------------------------------------------------------------------


def make_train_step(cfg: ModelConfig, optimizer: optax.GradientTransformation, micro_tokens: int,
                    diagnostics: bool = False):
    """``step(state, batch_AxBxL1, n_micro, lr) -> (state, metrics)``: accumulate the gradient
    over the first ``n_micro`` of the A micro-batches (the rest is padding), apply AdamW at
    learning rate ``lr``.

    ``n_micro`` is traced, so every batch size of a batch-size schedule runs the same compiled
    step (the batch is padded to the largest one). With ``n_micro`` >= 2 it also estimates the
    gradient noise scale (docs/laws.md section 5) from the mean squared norm of the micro-batch
    gradients (batch ``micro_tokens``) and the squared norm of their mean (batch
    ``n_micro * micro_tokens``): metrics ``grad_sq_small``, ``grad_sq_big``, ``grad_sq_true``
    (|G|^2), ``trace_cov`` (tr Sigma, per token) and ``b_simple`` (tokens); NaN when
    ``n_micro`` is 1.

    With ``diagnostics`` (static) the step is the same update and its metrics also hold
    ``diagnostics``, the dict of `scalinfer.train.diagnostics.summarize` (update sizes, parameter
    and activation RMS, max attention logit, router entropy and load).
    """
    grad_fn = jax.value_and_grad(model_lib.loss_fn, has_aux=True)

    def step(state: TrainState, batch_AxBxL1: jax.Array, n_micro: jax.Array, lr: jax.Array):
        A = batch_AxBxL1.shape[0]
        if cfg.router_jitter > 0:  # the only randomness of a step
            key, sub = jax.random.split(jax.random.wrap_key_data(state.rng))
            keys_A, rng = jax.random.split(sub, A), jax.random.key_data(key)
        else:
            keys_A, rng = None, state.rng

        def micro(i):
            batch_BxL1 = jax.lax.dynamic_index_in_dim(batch_AxBxL1, i, keepdims=False)
            k = None if keys_A is None else keys_A[i]
            (_, metrics), grads = grad_fn(state.params, batch_BxL1, cfg, k, True, diagnostics)
            acts = diag_lib.activation_stats(metrics.pop("aux")) if diagnostics else {}
            return grads, metrics, acts

        def body(i, carry):
            grad_sum, sq_sum, metric_sum, act_sum = carry
            grads, metrics, acts = micro(i)
            return (jax.tree.map(jnp.add, grad_sum, grads), sq_sum + optax.tree.norm(grads) ** 2,
                    jax.tree.map(jnp.add, metric_sum, metrics), diag_lib.accumulate(act_sum, acts, i))

        zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(micro, 0))
        grad_sum, sq_sum, metric_sum, act_sum = jax.lax.fori_loop(
            0, n_micro, body, (zeros[0], jnp.zeros((), jnp.float32), zeros[1], zeros[2]))
        n = n_micro.astype(jnp.float32)
        grads = jax.tree.map(lambda g: g / n.astype(g.dtype), grad_sum)
        metrics = jax.tree.map(lambda m: m / n, metric_sum)
        sq_big = optax.tree.norm(grads) ** 2
        metrics["grad_norm"] = jnp.sqrt(sq_big)
        if A > 1:
            sq_small = sq_sum / n
            gns = b_simple_from_grad_norms(sq_small, sq_big, micro_tokens, n * micro_tokens)
            nan_if_one = lambda v: jnp.where(n >= 2, v, jnp.nan)  # noqa: E731
            metrics.update(grad_sq_small=nan_if_one(sq_small), grad_sq_big=nan_if_one(sq_big),
                           grad_sq_true=nan_if_one(gns.grad_sq_norm), trace_cov=nan_if_one(gns.trace_cov),
                           b_simple=nan_if_one(gns.b_simple))
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        updates = jax.tree.map(lambda u: (lr * u).astype(u.dtype), updates)
        params = optax.apply_updates(state.params, updates)
        if diagnostics:
            metrics["diagnostics"] = diag_lib.summarize(diag_lib.average(act_sum, n), state.params, updates, params)
        return TrainState(params, opt_state, state.step + 1, rng), metrics

    return step


def make_eval_fn(cfg: ModelConfig):
    """``eval_loss(params, windows_NxBxL1) -> mean cross-entropy`` (nats/token) over all windows."""
    def eval_loss(params, windows_NxBxL1):
        def one(batch_BxL1):
            logits_BxLxV, _ = model_lib.forward(params, batch_BxL1[:, :-1], cfg)
            return jnp.sum(model_lib.cross_entropy(logits_BxLxV, batch_BxL1[:, 1:]))
        total = jnp.sum(jax.lax.map(one, windows_NxBxL1))
        return total / (windows_NxBxL1.shape[0] * windows_NxBxL1.shape[1] * (windows_NxBxL1.shape[2] - 1))
    return eval_loss


# ------------------------------------------------------------------------------------------
# The loop
# ------------------------------------------------------------------------------------------


def run_id_of(cfg: TrainConfig) -> str:
    """``name`` plus a hash of everything that changes the results."""
    d = config_to_dict(cfg)
    for k in _NON_RESULT_FIELDS:
        d.pop(k, None)
    if cfg.schedule_file:
        d["schedule_file"] = Path(cfg.schedule_file).read_text()
    digest = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:8]
    return f"{cfg.name}-{digest}"


def _check_resume_config(out: Path, cfg: TrainConfig) -> None:
    path = out / "config.json"
    now = config_to_dict(cfg)
    if path.exists():
        before = read_json(path, "the run's configuration",
                           "nothing was trained: restore it (the run's other files are intact) or use a new out_dir")
        diff = sorted(k for k in set(before) | set(now)
                      if k not in _NON_RESULT_FIELDS and before.get(k) != now.get(k))
        if diff:
            raise TrainError(f"{out} holds a run with another configuration (differs in {', '.join(diff)}); "
                             f"use a new out_dir")
    write_file(path, json.dumps(now, indent=2) + "\n", "the run's configuration",
               f"{'it is unchanged' if path.exists() else 'it was not written'} and nothing was trained: fix the "
               f"cause (a full disk? a read-only folder?) and rerun")


def _progress(cfg: TrainConfig, total: int, initial: int, desc: str):
    enabled = cfg.progress if cfg.progress is not None else sys.stderr.isatty()
    enabled = enabled and jax.process_index() == 0
    return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, disable=not enabled,
                dynamic_ncols=True, leave=False)


class _Runner:
    """State shared by the main run and the branches (compiled steps, data, devices)."""

    def __init__(self, cfg: TrainConfig, out: Path, plan: Plan):
        self.cfg, self.out, self.plan = cfg, out, plan
        m = cfg.model
        self.corpus = data_lib.load_corpus(cfg.data, m.vocab_size)
        self.sampler = data_lib.WindowSampler(self.corpus.train, m.seq_len, cfg.seed, m.vocab_size,
                                              self.corpus.description)
        self.mesh = parallel.make_mesh(cfg.mesh_expert)
        n_dev = jax.device_count()
        self.micro_seqs = cfg.micro_tokens // m.seq_len
        if self.micro_seqs % n_dev:
            raise TrainError(f"micro-batch of {self.micro_seqs} sequences does not split over {n_dev} devices "
                             f"(micro_batch_tokens / seq_len must be a multiple of the device count)")
        rows_per_dev = self.micro_seqs // n_dev
        group = m.moe_group_tokens or m.seq_len
        if m.is_moe and (rows_per_dev * m.seq_len) % group:
            raise TrainError(f"model.moe_group_tokens={group} does not divide the {rows_per_dev * m.seq_len} "
                             f"tokens of a micro-batch on one device")
        if m.is_moe and group % m.seq_len and m.seq_len % group:
            raise TrainError(f"model.moe_group_tokens={group} must divide or be a multiple of seq_len={m.seq_len}")

        params = model_lib.init_params(m, cfg.seed)
        self.optimizer = make_optimizer(m, cfg.optimizer, params, plan.steps)
        rep = parallel.replicated(self.mesh)
        rng = jax.random.key_data(jax.random.key(cfg.seed + 1))

        def init(params):
            return TrainState(params, self.optimizer.init(params), jnp.zeros((), jnp.int32), rng)

        shapes = jax.eval_shape(init, params)
        state_sharding = TrainState(parallel.param_shardings(shapes.params, self.mesh),
                                    parallel.param_shardings(shapes.opt_state, self.mesh), rep, rep)
        self.initial = jax.jit(init, out_shardings=state_sharding)(params)
        # Restores need only shapes, dtypes and shardings (the initial arrays get donated).
        self.abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
                                     self.initial)
        self.step_fn = jax.jit(make_train_step(m, self.optimizer, cfg.micro_tokens),
                               in_shardings=(state_sharding, parallel.batch_sharding(self.mesh), rep, rep),
                               out_shardings=(state_sharding, rep), donate_argnums=(0,))
        # The same update plus `scalinfer.train.diagnostics` on every diagnostics_every-th step (compiled
        # on its first use only).
        self.diag_step_fn = jax.jit(make_train_step(m, self.optimizer, cfg.micro_tokens, diagnostics=True),
                                    in_shardings=(state_sharding, parallel.batch_sharding(self.mesh), rep, rep),
                                    out_shardings=(state_sharding, rep), donate_argnums=(0,))
        # Every step's batch is padded to the largest batch of the run: one compiled step.
        self.max_micro = max(plan.batch_at(t) for t in (0, *plan.step_tokens)) // cfg.micro_tokens
        self.batch_sharding = parallel.batch_sharding(self.mesh)

        # Held-out set: whole micro-batches of the first held-out windows (the same set whatever
        # the device count, so runs on different meshes are comparable).
        chunk = self.micro_seqs
        n = max(1, cfg.eval_tokens // m.seq_len // chunk) * chunk
        windows = data_lib.eval_windows(self.corpus.eval, m.seq_len, n * m.seq_len, multiple=chunk)
        n = len(windows)
        self.eval_tokens = n * m.seq_len
        ev = windows.reshape(n // chunk, chunk, m.seq_len + 1)
        first, count = parallel.process_rows(chunk)
        self.eval_batch = parallel.put_batch(ev[:, first:first + count], self.batch_sharding, ev.shape)
        self.eval_fn = jax.jit(make_eval_fn(m), out_shardings=rep)

    def batch(self, position: int, batch_tokens: int) -> tuple[jax.Array, int]:
        """The global batch [A_max, micro_seqs, L + 1] whose first n micro-batches are windows
        position, position + 1, ... (the rest zeros), and n."""
        n = batch_tokens // self.cfg.micro_tokens
        first, count = parallel.process_rows(self.micro_seqs)
        rows = np.zeros((self.max_micro, count, self.cfg.model.seq_len + 1), np.int32)
        for a in range(n):
            rows[a] = self.sampler.windows(position + a * self.micro_seqs + first, count)
        shape = (self.max_micro, self.micro_seqs, self.cfg.model.seq_len + 1)
        return parallel.put_batch(rows, self.batch_sharding, shape), n

    def evaluate(self, params) -> float:
        return float(self.eval_fn(params, self.eval_batch))

    def run_steps(self, state: TrainState, meta: dict, end_tokens: int, lr_of, log: MetricsLog,
                  on_step=None, stop_after: int | None = None, bar=None,
                  diag_log: MetricsLog | None = None, on_step_due=None,
                  stop_requested: Callable[[], bool] | None = None) -> tuple[TrainState, dict, str]:
        """Train until ``end_tokens`` tokens are seen. Returns (state, meta, status) with status
        ``done``, ``diverged`` or ``stopped`` (after step ``stop_after``, or once ``stop_requested()``, asked
        before each step, says so; the state and ``meta`` are then those after the last step, settled).
        ``meta`` carries the data position, tokens seen, wall time and the B_simple moving averages. Steps
        whose number is a multiple of ``diagnostics_every`` run the diagnostics step and write a line to
        ``diag_log``.

        The host never waits for a step before it has dispatched the next (as nanodo's loop does): step k's
        metrics are fetched after step k + 1 is on its way, so the host's work (the next batch, the logs)
        overlaps the device's. The learning rates of all the steps are evaluated once, up front, in one call
        of the schedule (`_lr_table`, valid past 2^31 tokens), not one device round trip per step.
        ``on_step(state, meta)`` runs after a step whose number ``on_step_due(meta)`` accepts (every step
        without it), with that step's metrics
        fetched first (so a diverged step is never checkpointed or evaluated) and before the next step is
        dispatched (the step donates its input state). A diverged step is found one step late: the state
        returned with ``diverged`` is one step past it (no caller keeps it), ``meta`` is the diverged step's."""
        cfg = self.cfg
        seq_len = cfg.model.seq_len
        lrs, first = _lr_table(lr_of, self.plan.batch_at, meta["tokens"], end_tokens), meta["step"]
        due = on_step_due or (lambda mt: True)
        pending = None  # the dispatched step whose metrics are not fetched yet
        stopped = False
        mark = time.perf_counter()

        def settle(p) -> bool:
            """Fetch a dispatched step's metrics, log them; False if its loss is not finite."""
            nonlocal mark
            metrics = jax.device_get(p["metrics"])
            diag = metrics.pop("diagnostics", None)
            metrics = {k: float(v) for k, v in metrics.items() if not (k in _NOISE_METRICS and p["n_micro"] < 2)}
            now = time.perf_counter()
            step_time, mark = now - mark, now
            meta["wall_s"] += step_time
            at = {"step": p["step"], "tokens": p["tokens"]}
            if diag is not None and diag_log is not None:
                diag_log.write({**at, "lr": p["lr"], **diag_lib.to_record(diag)})
            if "b_simple" in metrics:
                for k in ("grad_sq_true", "trace_cov"):
                    meta[f"ema_{k}"] = _EMA * meta.get(f"ema_{k}", 0.0) + (1 - _EMA) * metrics[k]
                meta["ema_count"] = meta.get("ema_count", 0) + 1
                bias = 1 - _EMA ** meta["ema_count"]
                g2, tr = meta["ema_grad_sq_true"] / bias, meta["ema_trace_cov"] / bias
                metrics["b_simple_ema"] = tr / g2 if g2 > 0 else math.nan
            if not math.isfinite(metrics["loss"]):
                meta.update(step=p["step"], tokens=p["tokens"], position=p["position"])
                log.write({**at, "diverged": True, "lr": p["lr"], "loss": metrics["loss"]})
                return False
            meta["last_dropped_fraction"] = metrics["dropped_fraction"]
            if p["step"] % cfg.log_every == 0:
                log.write({**at, "lr": p["lr"], "batch_tokens": p["batch_tokens"], **metrics,
                           "step_time_s": step_time})
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{metrics['loss']:.3f}", lr=f"{p['lr']:.2e}", refresh=False)
            return True

        def finish(p) -> bool:
            """Settle `p` and run ``on_step`` after it if due (the state is then the one after `p`); the time
            ``on_step`` takes (checkpoints, evaluations) is not the steps' (``wall_s``, ``step_time_s``)."""
            nonlocal mark
            if not settle(p):
                return False
            if on_step is not None and due(meta):
                on_step(state, meta)
                mark = time.perf_counter()
            return True

        while meta["tokens"] < end_tokens:
            if pending is not None and on_step is not None and due(meta):
                # the state after the pending step is needed before the next step donates it: settle it now
                p, pending = pending, None
                if not finish(p):
                    return state, meta, "diverged"
            if stop_after is not None and meta["step"] >= stop_after:
                break
            if stop_requested is not None and stop_requested():
                stopped = True
                break
            batch_tokens = self.plan.batch_at(meta["tokens"])
            lr = float(lrs[meta["step"] - first])
            batch, n_micro = self.batch(meta["position"], batch_tokens)
            diag_due = cfg.diagnostics_every > 0 and (meta["step"] + 1) % cfg.diagnostics_every == 0
            state, metrics = (self.diag_step_fn if diag_due else self.step_fn)(state, batch, np.int32(n_micro),
                                                                               np.float32(lr))
            meta["step"] += 1
            meta["tokens"] += batch_tokens
            meta["position"] += batch_tokens // seq_len
            previous, pending = pending, {"metrics": metrics, "step": meta["step"], "tokens": meta["tokens"],
                                          "position": meta["position"], "lr": lr, "batch_tokens": batch_tokens,
                                          "n_micro": n_micro}
            if previous is not None and not settle(previous):  # (on_step was not due after it)
                return state, meta, "diverged"
        if pending is not None and not finish(pending):
            return state, meta, "diverged"
        if (stopped or stop_after is not None and meta["step"] >= stop_after) and meta["tokens"] < end_tokens:
            return state, meta, "stopped"
        return state, meta, "done"


def _lr_table(lr_of, batch_at, tokens: int, end_tokens: int) -> np.ndarray:
    """``lr_of(t)`` at the tokens ``t`` seen before each step from `tokens` to `end_tokens` (each step's batch
    ``batch_at(t)``), in one call of the schedule over all of them. Token counts pass the 2^31 of an int32 in
    any run past 2.1B tokens, so the schedule is evaluated on int64 counts, in float64, inside
    ``jax.enable_x64`` (scoped: the caller's setting is untouched); the step takes the value as a float32."""
    at = []
    t = tokens
    while t < end_tokens:
        at.append(t)
        t += batch_at(t)
    if not at:
        return np.zeros(0)
    with jax.enable_x64(True):
        return np.asarray(jax.vmap(lr_of)(jnp.asarray(at, dtype=jnp.int64)), float)


def tune_malloc() -> bool:
    """Keep freed memory in glibc's heap so that a train step does not page-fault (Linux, CPU).

    XLA:CPU allocates each step's temporary buffers (all the activations kept for the backward
    pass) with ``malloc`` from its worker threads. glibc serves requests that large with a fresh
    ``mmap`` and returns them with ``munmap``, so every step would touch its memory anew (page
    faults and kernel time in every step; the figures are in benchmarks/README.md). With one
    arena, no ``mmap`` and no trimming, the heap keeps its peak and the step reuses it. The cost:
    the process keeps its peak heap, and all threads share one malloc arena.

    Only takes effect before JAX starts its CPU backend (the worker threads keep the arena they
    started with), so `train` calls it first; returns whether it applied the settings. Skipped
    with ``SCALINFER_NO_MALLOC_TUNING=1``, when any ``MALLOC_*`` or ``GLIBC_TUNABLES`` variable
    is set (the user tunes malloc), on non-glibc systems, and when a backend already runs.
    """
    if os.environ.get("SCALINFER_NO_MALLOC_TUNING") == "1" or "GLIBC_TUNABLES" in os.environ \
            or any(k.startswith("MALLOC_") for k in os.environ) or not sys.platform.startswith("linux"):
        return False
    if runtime.backend_started():
        return False
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another libc
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
    return bool(mallopt(M_ARENA_MAX, 1) & mallopt(M_MMAP_MAX, 0) & mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1))


def run_table_path(cfg: TrainConfig, out_dir: str | Path) -> Path:
    """Where `train` appends the run's records: ``runs_table``, relative to ``out_dir`` unless absolute."""
    return Path(cfg.runs_table) if Path(cfg.runs_table).is_absolute() else Path(out_dir) / cfg.runs_table


def _fresh_meta() -> dict[str, Any]:
    return {"step": 0, "tokens": 0, "position": 0, "wall_s": 0.0}


def train(config: TrainConfig | dict, out_dir: str | Path,
          stop_requested: Callable[[], bool] | None = None) -> list[dict[str, Any]]:
    """Train one configuration (resuming from ``out_dir`` if it holds a checkpoint).

    ``config`` is a `TrainConfig` or a nested dict laid out like the TOML file (an optional
    ``"preset"`` key names the defaults, else ``tiny``). Returns the run-table records of the main
    run and of each decay branch (all of them, also those written by an earlier, interrupted
    invocation), or ``[]`` when the run stopped before its end: after ``stop_after_steps``, or at the
    first step boundary where ``stop_requested()`` (a callable, asked before each step) returns True:
    `scalinfer.train.stop_on_signal` gives one that a Ctrl-C, a notebook's interrupt or a SIGTERM sets, as
    ``scalinfer train`` uses it. The main run then saves a checkpoint of its last step, so that a rerun
    resumes where it stopped; a decay branch stopped so is trained again from its fork by the rerun
    (branches keep no checkpoints). Records are appended to ``out_dir/runs.jsonl`` (or ``runs_table``).

    Examples
    --------
    >>> records = train({"preset": "cal-xs", "optimizer": {"lr": 3e-3}, "decay_points": [0.5]},
    ...                 "runs/cal-xs-lr3e-3")                                     # doctest: +SKIP
    >>> from scalinfer.train import stop_on_signal
    >>> with stop_on_signal() as stop:   # Ctrl-C: stop after the step in flight, with a checkpoint
    ...     records = train({"preset": "cal-xs"}, "runs/cal-xs", stop_requested=stop)  # doctest: +SKIP
    """
    if isinstance(config, dict):
        d = dict(config)
        base = preset(d.pop("preset", "tiny"))
        config = config_from_dict(d, base, where="train(config)")
    if not isinstance(config, TrainConfig):
        raise TrainError(f"train() needs a TrainConfig or a dict, got {type(config).__name__}")
    cfg = config
    check(cfg)
    tune_malloc()
    # the persistent compilation cache (every run of a sweep shares its shapes, so only the first compiles)
    # and the multi-host job; the device count and float precision stay the caller's
    runtime.configure(x64=False, multihost=cfg.multihost, coordinator_address=cfg.coordinator_address,
                      num_processes=cfg.num_processes, process_id=cfg.process_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan = make_plan(cfg)
    run_id = run_id_of(cfg)
    primary = jax.process_index() == 0
    if primary:
        _check_resume_config(out, cfg)
    table = run_table_path(cfg, out)
    done = {r.get("run_id"): r for r in read_records(table)}
    ids = [run_id] + [f"{run_id}-{b.name}" for b in plan.branches]
    if all(i in done for i in ids):
        return [done[i] for i in ids]

    runner = _Runner(cfg, out, plan)
    ckpt = Checkpointer(out / "checkpoints", keep=cfg.keep_checkpoints)
    stable = Checkpointer(out / "stable", keep=None)
    records: list[dict[str, Any]] = []

    def emit(rec):
        if primary:
            append_records(table, [rec])
        records.append(rec)
        done[rec["run_id"]] = rec

    try:
        state, meta = runner.initial, _fresh_meta()
        status = "done"
        if run_id not in done:
            restored = ckpt.restore_latest(runner.abstract)  # a damaged latest falls back to the one before
            if restored is not None:
                state, meta = restored
            log = MetricsLog(out / "metrics.jsonl", resume_step=meta["step"] if restored is not None else None,
                             enabled=primary)
            diag_log = MetricsLog(out / "diagnostics.jsonl", resume_step=meta["step"] if restored is not None
                                  else None, enabled=primary and cfg.diagnostics_every > 0)
            fork_steps = {b.fork_step: b for b in plan.branches}

            def fork_due(mt):
                return mt["step"] in fork_steps

            def checkpoint_due(mt):
                return bool(cfg.checkpoint_every) and mt["step"] % cfg.checkpoint_every == 0

            def eval_due(mt):
                return bool(cfg.eval_every) and mt["step"] % cfg.eval_every == 0 and mt["tokens"] < plan.total_tokens

            def on_step_due(mt):  # the steps after which on_step needs the state (the others overlap)
                return fork_due(mt) or checkpoint_due(mt) or eval_due(mt)

            def on_step(st, mt):
                if fork_due(mt):
                    stable.save(mt["step"], st, dict(mt))
                if checkpoint_due(mt):
                    ckpt.save(mt["step"], st, dict(mt))
                if eval_due(mt):
                    log.write({"step": mt["step"], "tokens": mt["tokens"], "eval_loss": runner.evaluate(st.params)})

            with _progress(cfg, plan.steps, meta["step"], cfg.name) as bar:
                state, meta, status = runner.run_steps(
                    state, meta, plan.total_tokens, plan.lr_main(), log, on_step, cfg.stop_after_steps, bar,
                    diag_log, on_step_due, stop_requested)
            diag_log.close()
            if status == "stopped":
                ckpt.save(meta["step"], state, dict(meta))
                log.close()
                return []
            if status == "done":
                ckpt.save(meta["step"], state, dict(meta))
                loss = runner.evaluate(state.params)
                log.write({"step": meta["step"], "tokens": meta["tokens"], "eval_loss": loss})
            else:
                loss = math.nan
            log.close()
            emit(_record(cfg, plan, runner, run_id, meta, loss, status == "diverged" or not math.isfinite(loss)))

        for b in plan.branches:
            bid = f"{run_id}-{b.name}"
            if bid in done:
                continue
            if b.fork_step not in stable.steps():
                main = done.get(run_id, {})
                if main.get("diverged") and (main.get("diverged_at_step") or 0) <= b.fork_step:
                    # the main run diverged before this fork: a censored observation at this D too
                    dmeta = {"step": 0, "tokens": 0, "wall_s": 0.0}
                    emit(_record(cfg, plan, runner, bid, dmeta, math.nan, True, branch=b, main_id=run_id))
                    continue
                # the main run passed the fork but its checkpoint is gone: recording the branch as diverged
                # would be a false observation, so stop and say how to recover
                raise TrainError(f"{out / 'stable'}: the stable-phase checkpoint at step {b.fork_step}, from which "
                                 f"decay branch {b.name!r} forks, is missing; the main run passed that step, so the "
                                 f"branch cannot be trained. To retrain the run and its branches, remove {out} (and "
                                 f"run {run_id!r}'s records from {table} if it lives elsewhere) and rerun")
            bstate, bmeta = stable.restore(
                b.fork_step, runner.abstract,
                remedy=f"decay branch {b.name!r} forks from it, so it cannot be trained. To retrain the run and its "
                       f"branches, remove {out} (and run {run_id!r}'s records from {table} if it lives elsewhere) "
                       f"and rerun")
            blog = MetricsLog(out / f"metrics-{b.name}.jsonl", resume_step=None, enabled=primary)
            bdiag = MetricsLog(out / f"diagnostics-{b.name}.jsonl", resume_step=None,
                               enabled=primary and cfg.diagnostics_every > 0)
            with _progress(cfg, None, 0, b.name) as bar:
                bstate, bmeta, bstatus = runner.run_steps(bstate, bmeta, b.end_tokens, plan.lr_branch(b), blog,
                                                          bar=bar, diag_log=bdiag, stop_requested=stop_requested)
            bdiag.close()
            if bstatus == "stopped":  # a rerun trains the branch again from its fork
                blog.close()
                return []
            loss = runner.evaluate(bstate.params) if bstatus == "done" else math.nan
            blog.write({"step": bmeta["step"], "tokens": bmeta["tokens"], "eval_loss": loss})
            blog.close()
            emit(_record(cfg, plan, runner, bid, bmeta, loss, not math.isfinite(loss), branch=b, main_id=run_id))
    finally:
        ckpt.close()
        stable.close()
    return [done[i] for i in ids]


def _record(cfg: TrainConfig, plan: Plan, runner: _Runner, run_id: str, meta: dict, loss: float,
            diverged: bool, branch: Branch | None = None, main_id: str | None = None) -> dict[str, Any]:
    m, o = cfg.model, cfg.optimizer
    counts = model_lib.param_counts(m)
    planned = branch.end_tokens if branch is not None else plan.total_tokens
    D = meta["tokens"] if not diverged else planned
    steps = meta["step"] if not diverged else None
    schedule = plan.label() + (f"/decay@{branch.fork_tokens}" if branch is not None else "")
    rec = {
        "run_id": run_id, "N": counts.non_embedding, "N_total": counts.non_embedding,
        "N_active": counts.non_embedding_active, "D": int(D),
        "loss": None if diverged or not math.isfinite(loss) else loss,
        "lr": plan.lr_peak,
        "batch_tokens": meta["tokens"] / meta["step"] if meta["step"] else plan.batch_at(0),
        "steps": steps, "diverged": bool(diverged), "seed": cfg.seed,
        "group": cfg.group or m.arch, "arch": m.arch, "schedule": schedule, "seq_len": m.seq_len,
        "dataset": runner.corpus.description.split(":")[0],
        "name": cfg.name, "d_model": m.d_model, "n_layers": m.n_layers, "n_heads": m.n_heads,
        "d_head": m.d_head, "d_ff": m.d_ff, "n_experts": m.n_experts, "top_k": m.top_k,
        "shared_expert": m.shared_expert, "capacity_factor": m.capacity_factor, "qk_norm": m.qk_norm,
        "vocab_size": m.vocab_size, "mup": m.mup is not None,
        "mup_router": m.mup.router if m.mup else None,
        "params_total": counts.total, "params_active": counts.active,
        "flops_per_token": model_lib.flops_per_token(m),
        "warmup_tokens": plan.warmup_tokens, "decay_tokens": branch.decay_tokens if branch else plan.decay_tokens,
        "decay_shape": plan.decay_shape, "final_fraction": plan.final_fraction,
        "weight_decay": o.weight_decay, "weight_decay_timescale": o.weight_decay_timescale,
        "b1": o.b1, "b2": o.b2, "clip_grad_norm": o.clip_grad_norm,
        "eval_tokens": runner.eval_tokens, "dropped_fraction": meta.get("last_dropped_fraction"),
        "b_simple_ema": (meta["ema_trace_cov"] / meta["ema_grad_sq_true"]
                         if meta.get("ema_grad_sq_true", 0) > 0 else None),
        "n_devices": jax.device_count(), "wall_time_s": meta.get("wall_s", 0.0),
    }
    if diverged:
        rec["diverged_at_tokens"] = meta["tokens"]
        rec["diverged_at_step"] = meta["step"]
    if branch is not None:
        rec["branch_of"] = main_id
        rec["fork_tokens"] = branch.fork_tokens
    if plan.schedule is not None:
        rec["batch_schedule"] = [dataclasses.asdict(s) for s in plan.schedule.batch]
    return rec
