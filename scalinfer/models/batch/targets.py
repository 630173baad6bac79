r"""Steps to a target loss from loss curves: the pure conversion behind every batch model.

The batch models read steps-to-target tables: per model size N, batch size B and target loss L*, the
optimizer steps S (and tokens E = B S) a run needed to first reach L*. Loss curves (per-step records
at several batch sizes, as the trainer writes them) give such a table for *any* target loss:

- a run whose loss first falls to L* between records k-1 and k reached it at

  .. math:: \log S = \log s_{k-1} + (\log s_k - \log s_{k-1})
            \frac{\ell_{k-1} - L^*}{\ell_{k-1} - \ell_k}

  (linear interpolation of the loss in log steps between the two records; linear in steps when
  s_{k-1} = 0; ``interpolate=False`` takes s_k, the first record at or below L*, as Zhang et al. do);
- a run that never reaches L* is **censored**: it needed more than its last recorded step
  (``steps_to_target`` NaN, ``steps`` = that last step). Censored cells bound B_min from above in
  the models: a batch that cannot reach the target within the run's steps is evidence that B is
  near or below the smallest batch that can reach it at all;
- a run already at or below L* at its first record reached it at an unknown earlier step: the cell
  is returned with status ``"before_first_record"`` and `curves_to_table` excludes it with that
  reason (nothing is dropped silently).

Records with a non-finite loss (a diverged run) are skipped when looking for the crossing; a run that
diverges before reaching L* is censored at its last finite record.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError, RunTableError
from scalinfer.runs.schema import RunTable, validate

__all__ = ["steps_to_target_from_curves", "default_target_losses", "curves_to_table", "STATUSES"]

STATUSES = ("reached", "censored", "before_first_record")
_CURVE_COLUMNS = ("run_id", "step", "N", "loss", "batch_tokens")


def _check_curves(curves: pd.DataFrame, where: str) -> None:
    missing = [c for c in _CURVE_COLUMNS if c not in curves.columns]
    if missing:
        raise ModelError(f"{where}: loss curves need column(s) {', '.join(missing)} "
                         f"(have: {', '.join(map(str, curves.columns))})")
    for col in ("N", "batch_tokens", "step"):
        v = curves[col].to_numpy(float)
        bad = ~np.isfinite(v) | (v < 0 if col == "step" else v <= 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ModelError(f"{where}: row {i} (run {curves['run_id'].iloc[i]!r}), column {col!r}: "
                             f"{v[i]!r} is not a {'non-negative' if col == 'step' else 'positive'} number")
    per_run = curves.groupby("run_id", sort=False)[["N", "batch_tokens"]].nunique()
    varying = per_run[(per_run > 1).any(axis=1)]
    if len(varying):
        raise ModelError(f"{where}: run {varying.index[0]!r} changes N or batch_tokens along its curve; "
                         "one curve must have one model size and one batch size")


def default_target_losses(curves: pd.DataFrame, k: int = 4) -> np.ndarray:
    """`k` target losses that the runs of each model size can inform (nats/token).

    Per model size, from the highest loss that every run of that size reaches (the largest
    per-run minimum) down towards the lowest loss any run of that size reaches, leaving out the last
    10% of that range (reached by one run only). The union over sizes is thinned to `k` values
    evenly spaced in log loss. Some cells are then censored, as they should be: they carry the
    information about B_min.

    Parameters
    ----------
    curves : pandas.DataFrame
        Loss curves with columns ``run_id``, ``step``, ``N``, ``loss``, ``batch_tokens``.
    k : int
        Number of targets.

    Returns
    -------
    numpy.ndarray
        Target losses in nats/token, descending.
    """
    _check_curves(curves, "curves")
    if k < 1:
        raise ModelError(f"k must be at least 1, got {k}")
    lows, highs = [], []
    finite = curves[np.isfinite(curves["loss"].to_numpy(float))]
    for _, size in finite.groupby("N"):
        per_run_min = size.groupby("run_id")["loss"].min()
        hi, lo = float(per_run_min.max()), float(per_run_min.min())
        highs.append(hi)
        lows.append(lo + 0.1 * (hi - lo))
    hi, lo = max(highs), min(lows)
    if not hi > lo:
        return np.array([hi])
    return np.exp(np.linspace(np.log(hi), np.log(lo), k))


def _crossing(step: np.ndarray, loss: np.ndarray, target: float, interpolate: bool) -> tuple[float, str]:
    """(steps to reach `target`, status) for one curve sorted by step, finite losses only."""
    below = np.flatnonzero(loss <= target)
    if len(below) == 0:
        return np.nan, "censored"
    k = int(below[0])
    if k == 0:
        return np.nan, "before_first_record"
    if not interpolate:
        return float(step[k]), "reached"
    s0, s1, l0, l1 = step[k - 1], step[k], loss[k - 1], loss[k]
    frac = (l0 - target) / (l0 - l1)  # in (0, 1]: l0 > target >= l1
    if s0 <= 0:
        return float(s0 + frac * (s1 - s0)), "reached"
    return float(np.exp(np.log(s0) + frac * (np.log(s1) - np.log(s0)))), "reached"


def steps_to_target_from_curves(curves: pd.DataFrame, target_losses: Sequence[float] | float,
                                interpolate: bool = True) -> pd.DataFrame:
    """Steps (and tokens) each curve needed to first reach each target loss. Pure.

    Parameters
    ----------
    curves : pandas.DataFrame
        One row per (run, record): ``run_id``, ``step`` (optimizer steps), ``N`` (parameters),
        ``loss`` (nats/token), ``batch_tokens`` (tokens per step, constant along a run); ``group``
        is carried over when present.
    target_losses : float or sequence of float
        Target losses L* in nats/token.
    interpolate : bool
        Interpolate the crossing between records (linear in log steps); else the first record at or
        below the target.

    Returns
    -------
    pandas.DataFrame
        One row per (run, target): ``run_id`` (``"<run>@L<target>"``), ``source_run``, ``N``,
        ``batch_tokens``, ``target_loss``, ``steps_to_target`` (NaN unless reached),
        ``tokens_to_target`` (= steps_to_target * batch_tokens), ``steps`` (last recorded step: the
        run length, the censoring bound), ``D`` (= steps * batch_tokens), ``status`` (one of
        `STATUSES`), and ``group`` when the curves have it.

    Raises
    ------
    ModelError
        If a column is missing or a value is not a valid size, step or batch.
    """
    _check_curves(curves, "curves")
    targets = np.atleast_1d(np.asarray(target_losses, dtype=float))
    if targets.size == 0 or not np.all(np.isfinite(targets) & (targets > 0)):
        raise ModelError(f"target losses must be positive finite numbers (nats/token), got {targets.tolist()}")
    rows = []
    for run_id, run in curves.groupby("run_id", sort=False):
        run = run.sort_values("step")
        loss = run["loss"].to_numpy(float)
        step = run["step"].to_numpy(float)
        ok = np.isfinite(loss)
        last_step = float(step[ok][-1]) if ok.any() else float(step[-1])
        batch = float(run["batch_tokens"].iloc[0])
        for target in targets:
            s, status = _crossing(step[ok], loss[ok], float(target), interpolate)
            row = {"run_id": f"{run_id}@L{target:.6g}", "source_run": run_id, "N": float(run["N"].iloc[0]),
                   "batch_tokens": batch, "target_loss": float(target), "steps_to_target": s,
                   "tokens_to_target": s * batch, "steps": last_step, "D": last_step * batch,
                   "status": status}
            if "group" in run.columns:
                row["group"] = run["group"].iloc[0]
            rows.append(row)
    return pd.DataFrame(rows)


def curves_to_table(runs: RunTable, target_losses: Sequence[float] | float | None = None,
                    interpolate: bool = True) -> RunTable:
    """A curves `RunTable` -> a validated steps-to-target `RunTable`.

    Cells reached before a run's first record are excluded with that reason; cells never reached are
    kept as censored (``steps_to_target`` NaN, bound ``steps``). ``target_losses=None`` uses
    `default_target_losses`.
    """
    if runs.kind != "curves":
        raise ModelError(f"{runs.source} is a {runs.kind!r} table, not loss curves")
    if target_losses is None:
        target_losses = default_target_losses(runs.df)
    table = steps_to_target_from_curves(runs.df, target_losses, interpolate=interpolate)
    early = table["status"] == "before_first_record"
    excluded = table.loc[early].assign(
        row=table.loc[early, "run_id"],
        reason="target reached at or before the run's first record (its steps are unknown)")
    kept = table.loc[~early].reset_index(drop=True)
    if len(kept) == 0:
        raise ModelError(f"{runs.source}: every run reached every target at its first record; "
                         "choose lower target losses")
    meta = {**runs.meta, "derived_from": f"curves of {runs.source}",
            "target_losses": ",".join(f"{t:.6g}" for t in np.atleast_1d(target_losses))}
    try:
        return validate(kept, f"{runs.source} (steps to target)", "steps_to_target", meta,
                        row_offset=None, excluded=excluded)
    except RunTableError as e:
        raise ModelError(f"steps-to-target table derived from {runs.source} is invalid: {e}") from None
