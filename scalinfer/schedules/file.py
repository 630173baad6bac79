"""Batch-size (and LR) schedule files: format ``scalinfer.schedule/1``.

A schedule file tells the trainer how the global batch grows with the tokens seen, and optionally
which WSD learning-rate schedule to use (`scalinfer.schedules.wsd`). The batch-size scheduler
(`scalinfer.schedules.batch`) writes it (`write_schedule`); ``scalinfer train`` reads it (config
``schedule_file``). JSON::

    {
      "format": "scalinfer.schedule/1",
      "batch": [
        {"from_tokens": 0,   "batch_tokens": 8192},
        {"from_tokens": 2e6, "batch_tokens": 16384}
      ],
      "lr": {
        "peak": 3e-3,
        "warmup_tokens": 1e5,
        "decay_start_tokens": 4e6,
        "total_tokens": 5e6,
        "decay_shape": "linear",
        "final_fraction": 0.0
      }
    }

Rules (checked by `validate_schedule`, each violation a `TrainError` naming the file and field):

- ``format`` is exactly ``"scalinfer.schedule/1"``;
- ``batch`` is a non-empty list of stages; the first starts at ``from_tokens`` 0, ``from_tokens``
  strictly increase, ``batch_tokens`` are positive integers (the trainer also needs each to be a
  multiple of its micro-batch);
- a stage applies from the first optimizer step that starts with at least ``from_tokens`` tokens
  seen (so a switch takes effect at a step boundary);
- ``lr`` is optional: ``peak`` > 0; 0 <= ``warmup_tokens`` <= ``decay_start_tokens`` <=
  ``total_tokens``, ``total_tokens`` > 0; ``decay_shape`` one of linear, cosine, 1-sqrt;
  0 <= ``final_fraction`` <= 1 (default 0). When present it replaces the trainer's peak LR, warmup,
  decay and total tokens;
- unknown keys are errors (a typo must not be silently ignored).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

from scalinfer._io import atomic_write_text
from scalinfer.errors import TrainError
from scalinfer.schedules.wsd import DECAY_SHAPES

__all__ = ["FORMAT", "BatchStage", "LrSchedule", "Schedule", "load_schedule", "validate_schedule",
           "write_schedule"]

FORMAT = "scalinfer.schedule/1"


@dataclasses.dataclass(frozen=True)
class BatchStage:
    """From ``from_tokens`` tokens seen on, the global batch is ``batch_tokens`` tokens."""

    from_tokens: float
    batch_tokens: int


@dataclasses.dataclass(frozen=True)
class LrSchedule:
    """A WSD learning-rate schedule in tokens."""

    peak: float
    warmup_tokens: float
    decay_start_tokens: float
    total_tokens: float
    decay_shape: str = "linear"
    final_fraction: float = 0.0


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A parsed schedule file."""

    batch: tuple[BatchStage, ...]
    lr: LrSchedule | None = None

    def batch_tokens_at(self, tokens_seen: float) -> int:
        """The global batch (tokens) of a step that starts with ``tokens_seen`` tokens seen."""
        current = self.batch[0].batch_tokens
        for stage in self.batch:
            if tokens_seen >= stage.from_tokens:
                current = stage.batch_tokens
        return current

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": FORMAT, "batch": [dataclasses.asdict(s) for s in self.batch]}
        if self.lr is not None:
            d["lr"] = dataclasses.asdict(self.lr)
        return d


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TrainError(f"{where}: {v!r} is not a finite number")
    return float(v)


def validate_schedule(obj: Any, source: str = "schedule") -> Schedule:
    """Check a decoded schedule (see the module docstring) and return a `Schedule`."""
    if not isinstance(obj, dict):
        raise TrainError(f"{source}: a schedule is a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - {"format", "batch", "lr"})
    if unknown:
        raise TrainError(f"{source}: unknown key(s) {', '.join(map(repr, unknown))} "
                         f"(expected format, batch, lr)")
    if obj.get("format") != FORMAT:
        raise TrainError(f"{source}: 'format' is {obj.get('format')!r}, expected {FORMAT!r}")
    stages = obj.get("batch")
    if not isinstance(stages, list) or not stages:
        raise TrainError(f"{source}: 'batch' must be a non-empty list of stages")
    batch = []
    for i, s in enumerate(stages):
        where = f"{source}: batch[{i}]"
        if not isinstance(s, dict) or set(s) != {"from_tokens", "batch_tokens"}:
            raise TrainError(f"{where} must have exactly the keys from_tokens, batch_tokens (got {s!r})")
        start = _number(s["from_tokens"], f"{where}.from_tokens")
        size = _number(s["batch_tokens"], f"{where}.batch_tokens")
        if not (size > 0 and size.is_integer()):
            raise TrainError(f"{where}.batch_tokens: {s['batch_tokens']!r} is not a positive integer")
        if i == 0 and start != 0:
            raise TrainError(f"{where}.from_tokens: the first stage must start at 0, not {start:g}")
        if i > 0 and not start > batch[-1].from_tokens:
            raise TrainError(f"{where}.from_tokens: {start:g} does not increase "
                             f"(previous stage starts at {batch[-1].from_tokens:g})")
        batch.append(BatchStage(start, int(size)))
    lr = None
    if obj.get("lr") is not None:
        d = obj["lr"]
        where = f"{source}: lr"
        required = {"peak", "warmup_tokens", "decay_start_tokens", "total_tokens"}
        allowed = required | {"decay_shape", "final_fraction"}
        if not isinstance(d, dict):
            raise TrainError(f"{where} must be an object")
        if missing := sorted(required - set(d)):
            raise TrainError(f"{where} is missing {', '.join(missing)}")
        if unknown := sorted(set(d) - allowed):
            raise TrainError(f"{where} has unknown key(s) {', '.join(unknown)}")
        vals = {k: _number(d[k], f"{where}.{k}") for k in required}
        shape = d.get("decay_shape", "linear")
        final = _number(d.get("final_fraction", 0.0), f"{where}.final_fraction")
        if not vals["peak"] > 0:
            raise TrainError(f"{where}.peak: {vals['peak']:g} must be > 0")
        if not vals["total_tokens"] > 0:
            raise TrainError(f"{where}.total_tokens: {vals['total_tokens']:g} must be > 0")
        if not 0 <= vals["warmup_tokens"] <= vals["decay_start_tokens"] <= vals["total_tokens"]:
            raise TrainError(f"{where}: need 0 <= warmup_tokens <= decay_start_tokens <= total_tokens "
                             f"(got {vals['warmup_tokens']:g}, {vals['decay_start_tokens']:g}, "
                             f"{vals['total_tokens']:g})")
        if shape not in DECAY_SHAPES:
            raise TrainError(f"{where}.decay_shape: {shape!r} is not one of {', '.join(DECAY_SHAPES)}")
        if not 0 <= final <= 1:
            raise TrainError(f"{where}.final_fraction: {final:g} must be in [0, 1]")
        lr = LrSchedule(decay_shape=shape, final_fraction=final, **vals)
    return Schedule(tuple(batch), lr)


def load_schedule(path: str | os.PathLike) -> Schedule:
    """Read and validate a schedule file."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise TrainError(f"schedule file {path} does not exist") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise TrainError(f"schedule file {path} is not valid JSON: {e}") from None
    return validate_schedule(obj, str(path))


def write_schedule(path: str | os.PathLike, schedule: Schedule | dict[str, Any]) -> Path:
    """Validate and write a schedule file atomically (`scalinfer._io.atomic_write_text`: a fsynced temp file
    in the same folder, then ``os.replace``); a failed write is a `TrainError` naming the file and the reason.

    ``schedule`` is a `Schedule` or a dict in the file format (``format`` may be omitted).
    """
    if isinstance(schedule, Schedule):
        obj = schedule.to_dict()
    else:
        obj = {"format": FORMAT, **schedule}
    validate_schedule(obj, str(path))
    try:
        return atomic_write_text(path, json.dumps(obj, indent=2) + "\n")
    except OSError as e:
        raise TrainError(f"cannot write the schedule file {path} ({e.strerror or e}); it is as it was: fix the "
                         f"cause (a full disk? a read-only folder?) and write it again") from e
