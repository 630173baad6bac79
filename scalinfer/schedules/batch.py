r"""Batch-size schedules from a batch posterior (docs/laws.md section 5), in the schedule file format (`.file`).

A dynamic batch grows with the tokens seen, following B_opt (the batch that reaches a loss with the fewest
tokens) at the loss the run is expected to have reached, clipped below by B_min (the smallest batch that can
reach it at all) and above by what the hardware takes. The batch-size paper raises B every 125B tokens,
2M -> 4M -> 5M -> 6M tokens, with the LR unchanged, then decays as usual.

How each batch is chosen (`batch_schedule`):

1. the stable phase [0, decay_start) is cut every ``every`` tokens into segments;
2. at each segment's middle T_k (tokens seen; the middle rather than the start, because at T = 0 no loss
   has been reached yet), the expected loss L_k is the posterior median of the loss on the token-efficient
   path, the L whose fewest tokens E_min(N, L) equal T_k (`loss_at_tokens` of the model: for
   ``batch-floor`` L(T) = L_inf + (K / T)^(alpha / (1 + alpha)), its own loss-vs-tokens law; for
   ``batch-wsd`` the inverse of its E_min power law in L*);
3. the segment's batch is the posterior median of B_opt at (N, L_k), clipped below by the posterior median
   of B_min there and above by ``max_batch`` (`segment_batches`, pure), then rounded to a multiple of
   ``multiple_of`` tokens (the trainer needs whole sequences);
4. from ``decay_start`` on the batch stays at its last stable value: the laws describe a constant LR, not
   the decay.

Assumptions, stated in every schedule's ``assumptions``: the run is on the token-efficient path (each
batch its B_opt), so the loss reached after T tokens is the loss whose E_min is T; the loss-vs-tokens law
is the fit's own (``batch-openai`` has no B_opt and cannot make a schedule).

The learning-rate part is a WSD schedule (warmup, constant peak, decay; `.wsd`) in tokens; the peak comes
from ``lr_peak`` or, when the fitted runs all used one LR, from them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from scalinfer.errors import ModelError
from scalinfer.models.base import LossCurve
from scalinfer.schedules import file as schedule_file
from scalinfer.schedules.wsd import DECAY_SHAPES

__all__ = ["Segment", "BatchSchedule", "segment_batches", "segment_bounds", "batch_schedule", "write_schedule"]


@dataclasses.dataclass(frozen=True)
class Segment:
    """One piece of the batch schedule.

    Attributes
    ----------
    from_tokens, to_tokens : float
        Tokens seen at its start and end.
    at_tokens : float
        Where the batch was chosen (its middle; tokens).
    loss : float
        Posterior-median loss expected at ``at_tokens`` (nats/token); NaN in the decay segment.
    batch_opt, batch_min : float
        Posterior medians of B_opt and B_min at (N, loss) (tokens per step).
    batch_target : float
        ``clip(batch_opt, batch_min, max_batch)`` (tokens per step).
    batch_tokens : int
        ``batch_target`` rounded to a multiple of the schedule's ``multiple_of`` (what the trainer uses).
    """

    from_tokens: float
    to_tokens: float
    at_tokens: float
    loss: float
    batch_opt: float
    batch_min: float
    batch_target: float
    batch_tokens: int


@dataclasses.dataclass(frozen=True)
class BatchSchedule:
    """A batch-size schedule with its WSD learning-rate schedule, and where it came from."""

    N: float
    D: float
    model: str
    segments: tuple[Segment, ...]
    lr: dict[str, Any] | None
    max_batch: float | None
    multiple_of: int
    assumptions: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    def stages(self) -> list[dict[str, Any]]:
        """The batch stages of the trainer's file: consecutive segments with one batch merged."""
        out: list[dict[str, Any]] = []
        for s in self.segments:
            if out and out[-1]["batch_tokens"] == s.batch_tokens:
                continue
            out.append({"from_tokens": float(s.from_tokens), "batch_tokens": int(s.batch_tokens)})
        return out

    def to_trainer_dict(self) -> dict[str, Any]:
        """The schedule in the schedule file's format ``scalinfer.schedule/1`` (`scalinfer.schedules.file`)."""
        d: dict[str, Any] = {"format": schedule_file.FORMAT, "batch": self.stages()}
        if self.lr is not None:
            d["lr"] = dict(self.lr)
        return d

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` answer: the trainer's file under ``schedule``, then the details."""
        def clean(v):
            return None if isinstance(v, float) and not math.isfinite(v) else v
        return {"schedule": self.to_trainer_dict(), "N": self.N, "D": self.D, "model": self.model,
                "max_batch": self.max_batch, "multiple_of": self.multiple_of,
                "segments": [{k: clean(v) for k, v in dataclasses.asdict(s).items()} for s in self.segments],
                "assumptions": list(self.assumptions), "warnings": list(self.warnings)}


def segment_bounds(D: float, every: float, decay_start: float) -> np.ndarray:
    """Segment starts: 0, every, 2 every, ... below `decay_start`, then `decay_start` (tokens). Pure."""
    if not (D > 0 and every > 0 and 0 < decay_start <= D):
        raise ModelError(f"need D > 0, every > 0 and 0 < decay_start <= D (got D={D:g}, every={every:g}, "
                         f"decay_start={decay_start:g})")
    starts = np.arange(0.0, decay_start, every)
    return np.append(starts, decay_start) if decay_start < D else starts


def segment_batches(batch_opt: np.ndarray, batch_min: np.ndarray, max_batch: float | None = None,
                    multiple_of: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(target, rounded) batch of each segment: B_opt clipped to [B_min, max_batch], then rounded. Pure.

    Parameters
    ----------
    batch_opt, batch_min : numpy.ndarray
        B_opt and B_min per segment (tokens per step).
    max_batch : float or None
        Largest batch the hardware takes (tokens per step); None for no limit.
    multiple_of : int
        The rounded batch is a positive multiple of this (tokens), at most ``max_batch`` rounded down.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``clip(batch_opt, batch_min, max_batch)`` (float) and its rounding (int64).
    """
    target = np.maximum(np.asarray(batch_opt, float), np.asarray(batch_min, float))
    if max_batch is not None:
        target = np.minimum(target, max_batch)
    if not np.all(np.isfinite(target) & (target > 0)):
        raise ModelError(f"the posterior gives no finite positive batch for some segment ({target.tolist()}): the "
                         "target loss there is at or below the fitted floor; give a smaller D or --max-batch")
    rounded = np.maximum(np.round(target / multiple_of), 1) * multiple_of
    if max_batch is not None:
        cap = max(math.floor(max_batch / multiple_of), 1) * multiple_of
        rounded = np.minimum(rounded, cap)
    return target, rounded.astype(np.int64)


def _lr_peak(fit, lr_peak: float | None) -> tuple[float | None, list[str]]:
    if lr_peak is not None:
        if not (math.isfinite(lr_peak) and lr_peak > 0):
            raise ModelError(f"the peak learning rate must be a positive number, got {lr_peak}")
        return float(lr_peak), []
    runs = fit.runs
    if "lr" in runs.columns:
        lrs = np.unique(runs["lr"].to_numpy(float)[np.isfinite(runs["lr"].to_numpy(float))])
        if lrs.size == 1:
            return float(lrs[0]), [f"peak LR {lrs[0]:g} taken from the fitted runs (all used it)"]
    return None, ["no learning-rate schedule: the fitted runs do not share one peak LR; give --lr to add one "
                  "(the trainer then keeps its own LR settings)"]


def batch_schedule(fit, N: float, D: float, max_batch: float | None = None, every: float | None = None,
                   lr_peak: float | None = None, warmup_fraction: float = 0.01, decay_fraction: float = 0.2,
                   decay_shape: str = "linear", final_fraction: float = 0.0, multiple_of: int = 1) -> BatchSchedule:
    """A batch-size schedule for a run of `N` parameters on `D` tokens, from a batch fit.

    Parameters
    ----------
    fit : scalinfer.Fit
        A ``batch-floor`` or ``batch-wsd`` fit (``batch-openai`` has no B_opt).
    N : float
        Parameters of the run (as the fit counts them).
    D : float
        Tokens of the run.
    max_batch : float, optional
        Largest batch the hardware takes (tokens per step).
    every : float, optional
        Tokens between batch changes (default: an eighth of the stable phase).
    lr_peak : float, optional
        Peak learning rate (default: the fitted runs' LR when they share one, else no LR schedule).
    warmup_fraction, decay_fraction : float
        Warmup and decay as fractions of D (defaults 1% and 20%: WSD's usual short warmup and a 10-20% decay).
    decay_shape : str
        ``linear``, ``cosine`` or ``1-sqrt``.
    final_fraction : float
        LR at the end as a fraction of the peak.
    multiple_of : int
        Batches are rounded to a multiple of this many tokens (e.g. sequence length x micro-batches).

    Returns
    -------
    BatchSchedule
    """
    model = fit.model
    if not isinstance(model, LossCurve):
        raise ModelError(f"model {model.name!r} has no token-optimal batch B_opt (under it tokens fall monotonically "
                         "as the batch shrinks), so it cannot make a batch schedule: fit batch-floor or batch-wsd")
    for name, v in (("N", N), ("D", D)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ModelError(f"{name} must be a positive number, got {v!r}")
    if max_batch is not None and not (math.isfinite(max_batch) and max_batch > 0):
        raise ModelError(f"max_batch must be a positive number of tokens, got {max_batch!r}")
    if not (0 <= warmup_fraction < 1 and 0 <= decay_fraction < 1 and warmup_fraction + decay_fraction < 1):
        raise ModelError(f"warmup and decay fractions must be in [0, 1) and leave a stable phase "
                         f"(got {warmup_fraction}, {decay_fraction})")
    if decay_shape not in DECAY_SHAPES:
        raise ModelError(f"decay shape {decay_shape!r} is not one of {', '.join(DECAY_SHAPES)}")
    if not 0 <= final_fraction <= 1:
        raise ModelError(f"final_fraction must be in [0, 1], got {final_fraction}")
    if int(multiple_of) != multiple_of or multiple_of < 1:
        raise ModelError(f"multiple_of must be a positive integer number of tokens, got {multiple_of!r}")
    decay_start = D * (1.0 - decay_fraction)
    every = decay_start / 8.0 if every is None else float(every)
    if not (math.isfinite(every) and every > 0):
        raise ModelError(f"every must be a positive number of tokens, got {every!r}")
    starts = segment_bounds(D, every, decay_start)
    stable = starts < decay_start
    ends = np.append(starts[1:], D)
    mids = 0.5 * (starts + ends)[stable]

    draws, constants = fit.draws(), fit.constants
    loss = np.median(model.loss_at_tokens(draws, constants, N, mids), axis=0)
    if not np.all(np.isfinite(loss)):
        raise ModelError("the expected loss along the run is not finite for some segment; the fit cannot place it")
    pred = model.predict(draws, constants, N=np.full(loss.shape, float(N)), target_loss=loss)
    b_opt = np.median(pred["batch_opt"], axis=0)
    b_min = np.median(pred["batch_min"], axis=0)
    target, rounded = segment_batches(b_opt, b_min, max_batch, int(multiple_of))
    segments = [Segment(float(s), float(e), float(m), float(lo), float(bo), float(bm), float(t), int(r))
                for s, e, m, lo, bo, bm, t, r in zip(starts[stable], ends[stable], mids, loss, b_opt, b_min,
                                                     target, rounded)]
    if not stable.all():  # the decay: keep the last stable batch
        last = segments[-1]
        segments.append(Segment(float(decay_start), float(D), float("nan"), float("nan"), float("nan"),
                                float("nan"), last.batch_target, last.batch_tokens))
    peak, notes = _lr_peak(fit, lr_peak)
    lr = None if peak is None else {
        "peak": peak, "warmup_tokens": float(D * warmup_fraction), "decay_start_tokens": float(decay_start),
        "total_tokens": float(D), "decay_shape": decay_shape, "final_fraction": float(final_fraction)}
    assumptions = (
        f"expected loss after T tokens: the loss whose fewest tokens E_min(N, L) equal T ({model.name}'s own law), "
        "i.e. a run that stays on the token-efficient path",
        "each segment's batch: posterior-median B_opt at the posterior-median expected loss at the segment's middle, "
        "clipped below by the posterior-median B_min and above by max_batch",
        "from the start of the LR decay the batch stays at its last stable value (the laws are for a constant LR)",
    )
    extra = list(notes)
    ext = model.extrapolation(constants, N=N)
    if "N_ratio" in ext and float(np.max(ext["N_ratio"])) > 1.0:
        extra.append(f"N is {float(np.max(ext['N_ratio'])):.3g}x the largest fitted model size: an extrapolation")
    if max_batch is not None and np.any(target >= max_batch):
        extra.append(f"the batch is capped at max_batch = {max_batch:g} tokens in {int(np.sum(target >= max_batch))} "
                     "segment(s)")
    return BatchSchedule(N=float(N), D=float(D), model=model.name, segments=tuple(segments), lr=lr,
                         max_batch=max_batch, multiple_of=int(multiple_of), assumptions=assumptions,
                         warnings=tuple(extra) + tuple(fit.warnings()))


def write_schedule(schedule: BatchSchedule, path: str | os.PathLike) -> Path:
    """Write the schedule file, validated and atomically (`scalinfer.schedules.file.write_schedule`)."""
    return schedule_file.write_schedule(path, schedule.to_trainer_dict())
