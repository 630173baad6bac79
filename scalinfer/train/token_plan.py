"""The trainer's plan: the batch (tokens per step) and learning rate at every token count, and the decay branches.

`make_plan` resolves a `TrainConfig` (and its schedule file, `scalinfer.schedules.file`) into token counts:
the tokens seen after every step of the main run (the batch may grow with a batch-size schedule), the WSD
learning rate in tokens (`scalinfer.schedules.wsd`), and the decay branches forked from the stable phase
(docs/laws.md section 2). It runs no JAX computation and reads no file but the schedule file.
"""

from __future__ import annotations

import dataclasses

from scalinfer.errors import TrainError
from scalinfer.schedules.file import Schedule, load_schedule
from scalinfer.schedules.wsd import branch_schedule, wsd_schedule
from scalinfer.train.config import TrainConfig

__all__ = ["Branch", "Plan", "make_plan"]


@dataclasses.dataclass(frozen=True)
class Branch:
    """A decay branch: forked after ``fork_step`` (``fork_tokens`` seen), decayed over
    ``decay_tokens``."""

    name: str
    point: float
    fork_step: int
    fork_tokens: int
    decay_tokens: int

    @property
    def end_tokens(self) -> int:
        return self.fork_tokens + self.decay_tokens


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the run will do, in tokens (see `make_plan`)."""

    lr_peak: float
    total_tokens: int
    warmup_tokens: int
    decay_tokens: int
    decay_shape: str
    final_fraction: float
    schedule: Schedule | None
    constant_batch: int | None
    step_tokens: tuple[int, ...]   # tokens seen after each main-run step
    branches: tuple[Branch, ...]

    def batch_at(self, tokens: int) -> int:
        return self.constant_batch if self.schedule is None else self.schedule.batch_tokens_at(tokens)

    @property
    def steps(self) -> int:
        return len(self.step_tokens)

    def lr_main(self):
        """The main run's WSD learning rate as a function of tokens seen (`scalinfer.schedules.wsd`)."""
        return wsd_schedule(self.lr_peak, self.total_tokens, self.warmup_tokens, self.decay_tokens,
                            self.decay_shape, self.final_fraction)

    def lr_branch(self, branch: Branch):
        """A decay branch's learning rate as a function of tokens seen: the main run's peak until its fork,
        then the main run's decay shape and floor over ``branch.decay_tokens`` (`branch_schedule`)."""
        return branch_schedule(self.lr_peak, branch.fork_tokens, branch.decay_tokens, self.decay_shape,
                               self.final_fraction)

    def label(self) -> str:
        s = f"wsd-{self.decay_shape}"
        return s + "+batch-schedule" if self.schedule is not None else s


def _tokens_of(value: int | float, total: int, what: str) -> float:
    """A fraction (float <= 1) of ``total``, or an absolute token count."""
    return value * total if isinstance(value, float) and value <= 1 else float(value)


def make_plan(cfg: TrainConfig) -> Plan:
    """Resolve the config (and its schedule file) into token counts per step and branch."""
    opt = cfg.optimizer
    schedule = load_schedule(cfg.schedule_file) if cfg.schedule_file else None
    micro = cfg.micro_tokens
    if schedule is not None:
        for i, s in enumerate(schedule.batch):
            if s.batch_tokens % micro:
                raise TrainError(f"{cfg.schedule_file}: batch[{i}].batch_tokens={s.batch_tokens} is not a "
                                 f"multiple of micro_batch_tokens={micro}")
    if schedule is not None and schedule.lr is not None:
        lr = schedule.lr
        peak, total, shape, final = lr.peak, int(lr.total_tokens), lr.decay_shape, lr.final_fraction
        warmup, decay = int(lr.warmup_tokens), int(lr.total_tokens - lr.decay_start_tokens)
        constant = None
    else:
        peak, shape, final = opt.lr, opt.decay_shape, opt.final_fraction
        constant = None if schedule is not None else cfg.batch_tokens
        total = cfg.total_tokens
        if constant is not None:
            total = total // constant * constant
            if total == 0:
                raise TrainError(f"total_tokens={cfg.total_tokens} is less than one batch ({constant} tokens)")

        def length(v, what):
            if isinstance(v, float):
                return int(round(v * total))
            if constant is None:
                raise TrainError(f"optimizer.{what}={v} is in steps, but the batch size changes during the "
                                 f"run: give it as a fraction (e.g. {what}=0.1) or put lr in the schedule file")
            return v * constant
        warmup, decay = length(opt.warmup, "warmup"), length(opt.decay, "decay")
        if warmup + decay > total:
            raise TrainError(f"optimizer.warmup ({warmup} tokens) + optimizer.decay ({decay} tokens) exceed "
                             f"the run's {total} tokens")

    step_tokens, tokens = [], 0
    batch_at = (lambda t: constant) if constant is not None else schedule.batch_tokens_at
    while tokens < total:
        tokens += batch_at(tokens)
        step_tokens.append(tokens)

    branches = []
    decay_start = total - decay
    for i, point in enumerate(cfg.decay_points):
        at = _tokens_of(point, total, "decay_points")
        fork_step = next((s + 1 for s, t in enumerate(step_tokens) if t >= at), None)
        fork_tokens = step_tokens[fork_step - 1] if fork_step else None
        if fork_step is None or fork_tokens < warmup or fork_tokens > decay_start:
            raise TrainError(
                f"decay_points[{i}]={point!r} forks at {at:.0f} tokens, outside the stable phase "
                f"[{warmup}, {decay_start}] tokens of the main run")
        if isinstance(opt.decay, float) and not (schedule is not None and schedule.lr is not None):
            frac = opt.decay
            decay_i = int(round(frac / (1 - frac) * fork_tokens)) if frac < 1 else fork_tokens
        else:
            decay_i = int(round(decay * fork_tokens / total)) if constant is None else decay
        decay_i = max(decay_i, 1)
        branches.append(Branch(f"decay{fork_tokens}", point, fork_step, fork_tokens, decay_i))
    names = [b.name for b in branches]
    if len(set(names)) != len(names):
        raise TrainError(f"decay_points {list(cfg.decay_points)} fork two branches at the same step")
    return Plan(peak, total, warmup, decay, shape, final, schedule, constant, tuple(step_tokens),
                tuple(branches))
