r"""The warmup-stable-decay (WSD) learning-rate schedule and its decay branches: pure ``step -> value``.

With peak eta, warmup W, decay length K, total T, decay shape f and final fraction r (floor r eta)::

    eta(t) = eta t / W                                 0 <= t < W          (warmup)
           = eta                                       W <= t < T - K      (stable)
           = r eta + (1 - r) eta f((t - T + K) / K)    T - K <= t < T      (decay)
           = r eta                                     t >= T

    f(p) = 1 - p (linear),  (1 + cos(pi p)) / 2 (cosine),  1 - sqrt(p) (1-sqrt),  p in [0, 1].

A decay branch (docs/laws.md section 2) forks from the stable phase at F tokens and decays over K_F:
``eta_F(t) = eta`` for t < F, ``r eta + (1 - r) eta f((t - F) / K_F)`` on [F, F + K_F), ``r eta`` after.
The trainer measures t in tokens seen, so a batch that grows during the run keeps the schedule; the
functions take any one unit. Values are float32 (JAX arrays), as the train step uses them.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import optax

from scalinfer.errors import TrainError

__all__ = ["DECAY_SHAPES", "decay_fn", "decay_schedule", "wsd_schedule", "branch_schedule"]

DECAY_SHAPES = ("linear", "cosine", "1-sqrt")


def decay_fn(shape: str) -> Callable:
    """The decay shape f: progress p in [0, 1] -> factor in [1, 0] (f(0) = 1, f(1) = 0).

    Args:
        shape: ``linear`` (1 - p), ``cosine`` ((1 + cos(pi p)) / 2) or ``1-sqrt`` (1 - sqrt(p)).

    Returns:
        ``f(p)``, elementwise on floats or arrays.

    Raises:
        TrainError: ``shape`` is not one of `DECAY_SHAPES`.

    >>> [round(float(decay_fn(s)(0.25)), 4) for s in DECAY_SHAPES]
    [0.75, 0.8536, 0.5]
    """
    if shape == "linear":
        return lambda p: 1.0 - p
    if shape == "cosine":
        return lambda p: 0.5 * (1.0 + jnp.cos(jnp.pi * p))
    if shape == "1-sqrt":
        return lambda p: 1.0 - jnp.sqrt(p)
    raise TrainError(f"unknown decay shape {shape!r} (linear, cosine or 1-sqrt)")


def decay_schedule(peak: float, length: float, shape: str = "linear", final_fraction: float = 0.0,
                   start: float = 0.0) -> optax.Schedule:
    """The decay alone: ``peak`` until ``start``, then f down to ``final_fraction * peak`` at ``start + length``.

    ``eta(t) = r peak + (1 - r) peak f(clip((t - start) / length, 0, 1))``, and exactly ``r peak`` from
    ``start + length`` on.

    Args:
        peak: the value before and at ``start`` (the stable phase's LR).
        length: steps (or tokens) the decay lasts, > 0.
        shape: the decay shape (`decay_fn`).
        final_fraction: r, the final value as a fraction of ``peak``.
        start: where the decay begins.

    Returns:
        ``schedule(t) -> float32 array``.

    >>> lr = decay_schedule(0.5, 100, final_fraction=0.25, start=1000)
    >>> float(lr(0)), float(lr(1000)), float(lr(1050)), float(lr(1100))
    (0.5, 0.5, 0.3125, 0.125)
    """
    f = decay_fn(shape)
    final = peak * final_fraction

    def schedule(count):
        p = jnp.clip(jnp.asarray(count - start, jnp.float32) / max(length, 1e-30), 0.0, 1.0)
        value = final + (peak - final) * f(p)
        return jnp.where(p >= 1.0, final, value)  # exactly the final value at the end

    return schedule


def wsd_schedule(peak: float, total: float, warmup: float, decay: float,
                 shape: str = "linear", final_fraction: float = 0.0) -> optax.Schedule:
    """Warmup-stable-decay: linear from 0 over ``warmup``, ``peak`` until ``total - decay``, then ``shape``
    down to ``final_fraction * peak`` at ``total`` (the formula in the module docstring).

    Built with ``optax.join_schedules``. The value is exactly ``peak`` from the end of warmup to the start
    of the decay and exactly the floor from ``total`` on.

    Args:
        peak: the stable phase's LR.
        total: the run's length (steps or tokens; the trainer uses tokens).
        warmup: the warmup's length, >= 0.
        decay: the decay's length, >= 0, with ``warmup + decay <= total``.
        shape: the decay shape (`decay_fn`).
        final_fraction: the floor as a fraction of ``peak``.

    Returns:
        ``schedule(t) -> float32 array``.

    Raises:
        TrainError: ``warmup + decay`` exceeds ``total``, or an unknown ``shape``.

    >>> lr = wsd_schedule(peak=0.5, total=1000, warmup=100, decay=200, final_fraction=0.25)
    >>> float(lr(0)), float(lr(100)), float(lr(800)), float(lr(900)), float(lr(1000))
    (0.0, 0.5, 0.5, 0.3125, 0.125)
    """
    if not (0 <= warmup and 0 <= decay and warmup + decay <= total):
        raise TrainError(f"WSD schedule: warmup {warmup} + decay {decay} exceed the run's length {total}")
    decay_start = total - decay
    warm = (optax.linear_schedule(0.0, peak, int(warmup)) if warmup > 0 else optax.constant_schedule(peak))
    return optax.join_schedules(
        [warm, optax.constant_schedule(peak), decay_schedule(peak, decay, shape, final_fraction)],
        [warmup, decay_start])


def branch_schedule(peak: float, fork: float, decay: float, shape: str = "linear",
                    final_fraction: float = 0.0) -> optax.Schedule:
    """A decay branch forked from the stable phase at ``fork``: ``peak`` until ``fork``, then the WSD decay
    over ``decay`` (`decay_schedule` started at ``fork``).

    Args:
        peak: the stable phase's LR.
        fork: where the branch leaves the main run (steps or tokens seen).
        decay: the branch's decay length, > 0 (it ends at ``fork + decay``).
        shape: the decay shape (`decay_fn`).
        final_fraction: the floor as a fraction of ``peak``.

    Returns:
        ``schedule(t) -> float32 array``.

    >>> lr = branch_schedule(0.5, fork=400, decay=100, final_fraction=0.25)
    >>> float(lr(400)), float(lr(450)), float(lr(500))
    (0.5, 0.3125, 0.125)
    """
    return decay_schedule(peak, decay, shape, final_fraction, start=fork)
