r"""From a run table to the surface model's arrays: settings, model sizes, centering, diverged runs.

Runs are grouped in *settings* s = (N, D[, group]) (`settings_of`) and settings in model sizes, one per distinct
N (`sizes_of`). Every log is centered on the middle of the data (m) and log N, log D also scaled by their
half-range (h), so :math:`\tilde n = (\log N - m_N)/h_N` and :math:`\tilde d` lie in [-1, 1]; m_y is the median
of the settings' best log losses.

A run is *diverged* (`diverged_mask`) when marked ``diverged``, when its loss is not finite, or when its finite
loss exceeds ``divergence_ratio`` times the best converged loss of its setting. Its loss, had it converged, is
only known to exceed a level c_i (`censor_levels`):

- a run marked diverged or without a finite loss: its setting's best converged loss (else the table's). What is
  known is that its LR did not give the setting's best run, not how far up the valley's wall it lies:
  divergence is an instability of the optimizer at that LR, not a loss. (A level read from a neighbouring run,
  e.g. the highest-LR converged run below it, would claim that the valley rises between the two LRs, a claim
  about the loss that the divergence does not make.)
- a run diverged by its recorded loss (above the ratio, on either wall of the valley): the loss of the highest-LR
  converged run below it at the same setting and batch, else its setting's best converged loss. That is less than
  the threshold it crossed (``divergence_ratio`` times the best): the far-off runs, where the valleys' shape is
  least exact, say only that the valley rises there, so that they do not set its far-field steepness.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.models.base import Arrays, tried_ranges
from scalinfer.runs.schema import RunTable

__all__ = ["DIVERGENCE_RATIO", "RUN_ARRAYS", "pad_runs", "prepare_runs", "diverged_mask", "censor_levels",
           "flagged_mask", "require_lr_and_batch", "settings_of", "sizes_of"]

#: the largest finite loss, relative to the best converged loss of its setting, still counted as converged
DIVERGENCE_RATIO = 1.3


def prepare_runs(runs: RunTable, divergence_ratio: float, n_kind: str | None, size_scatter: bool | None
                 ) -> tuple[Arrays, dict[str, float]]:
    """The model's data arrays and constants (see `Surface.prepare`). ``size_scatter`` None is resolved here, once:
    on with two or more model sizes; the constant ``size_scatter`` (0 or 1) is how a fit (and a reloaded one)
    knows it."""
    df = runs.df.reset_index(drop=True)
    if n_kind is not None:
        col = {"total": "N_total", "active": "N_active"}[n_kind]
        if col not in df.columns or df[col].isna().any():
            raise ModelError(f"{runs.source}: n_kind={n_kind!r} needs column {col!r} on every run")
        df = df.assign(N=df[col])
    require_lr_and_batch(df, runs.source, "the surface model")
    s_idx, settings = settings_of(df)
    size_s = sizes_of(settings)
    loss = df["loss"].to_numpy(float)
    diverged = diverged_mask(df, s_idx, divergence_ratio)
    if diverged.all():
        raise ModelError(f"{runs.source}: every run diverged; the surface needs converged runs")
    log_lr, log_b = np.log(df["lr"].to_numpy(float)), np.log(df["batch_tokens"].to_numpy(float))
    log_N, log_D = np.log(settings["N"].to_numpy(float)), np.log(settings["D"].to_numpy(float))
    m_N, h_N = _mid_half(log_N)
    m_D, h_D = _mid_half(log_D)
    m_lr, _ = _mid_half(log_lr)
    m_b, _ = _mid_half(log_b)
    flagged = flagged_mask(df)
    level = censor_levels(loss, diverged, flagged, s_idx, log_lr, log_b)
    best = _best_per_setting(loss, diverged, s_idx, len(settings))
    m_y = float(np.median(np.log(best[np.isfinite(best)])))
    ok, cens = ~diverged, diverged
    data = {
        "n_s": (log_N - m_N) / h_N, "d_s": (log_D - m_D) / h_D, "size_s": size_s.astype(np.int32),
        "n_size": (np.unique(log_N) - m_N) / h_N,
        "s_obs": s_idx[ok].astype(np.int32),
        "x_obs": log_lr[ok] - m_lr, "z_obs": log_b[ok] - m_b, "log_loss": np.log(loss[ok]) - m_y,
        "s_cens": s_idx[cens].astype(np.int32),
        "x_cens": log_lr[cens] - m_lr, "z_cens": log_b[cens] - m_b,
        "log_level": np.log(level[cens]) - m_y, "diverged_obs": np.ones(int(cens.sum()), dtype=np.int32),
    }
    n_flagged = int(flagged.sum())
    constants = {
        "m_N": m_N, "h_N": h_N, "m_D": m_D, "h_D": h_D, "m_lr": m_lr, "m_b": m_b, "m_y": m_y,
        "max_N": float(np.exp(log_N.max())), "max_D": float(np.exp(log_D.max())),
        "min_N": float(np.exp(log_N.min())), "min_D": float(np.exp(log_D.min())),
        "min_lr": float(np.exp(log_lr.min())), "max_lr": float(np.exp(log_lr.max())),
        "min_batch": float(np.exp(log_b.min())), "max_batch": float(np.exp(log_b.max())),
        "n_settings": float(len(settings)), "n_sizes": float(size_s.max() + 1), "n_censored": float(cens.sum()),
        "size_scatter": float(size_scatter if size_scatter is not None else size_s.max() >= 1),
        **{f"size_N_{m}": float(v) for m, v in enumerate(np.exp(np.unique(log_N)))},
        "n_censored_by_ratio": float(cens.sum() - n_flagged), "divergence_ratio": divergence_ratio,
        "n_kind_active": float(n_kind == "active"),
        **tried_ranges(df),  # the LRs and batches tried at each size, for the answers' warnings
    }
    return data, constants


#: the surface's per-run arrays of the converged (``obs``) and the diverged (``cens``) runs
RUN_ARRAYS = {"obs": ("s_obs", "x_obs", "z_obs", "log_loss"),
              "cens": ("s_cens", "x_cens", "z_cens", "log_level", "diverged_obs")}


def pad_runs(kwargs: dict[str, Any], rows: int) -> dict[str, Any]:
    """The surface model's keyword arguments with the converged and the diverged runs' arrays each padded to
    `rows` (index 0, value 0; 1 for ``diverged_obs``) and masked (``obs_mask``, ``cens_mask``: the padding adds
    nothing to the density). Every data set of one design then has the same shapes: one compiled program for all
    (e.g. simulated data sets, whose counts of censored runs differ: benchmarks/sbc.py). Raises `ModelError` when
    a part has more than `rows` runs."""
    out = dict(kwargs)
    for part, names in RUN_ARRAYS.items():
        n = len(kwargs[names[0]])
        if n > rows:
            raise ModelError(f"cannot pad {n} {part} runs to {rows} rows")
        for k in names:
            a = np.asarray(kwargs[k])
            out[k] = np.concatenate([a, np.full(rows - n, 1 if k == "diverged_obs" else 0, a.dtype)])
        out[f"{part}_mask"] = np.arange(rows) < n
    return out


def flagged_mask(df: pd.DataFrame) -> np.ndarray:
    """Runs that say nothing of their loss: marked ``diverged``, or without a finite loss."""
    return df["diverged"].to_numpy(bool) | ~np.isfinite(df["loss"].to_numpy(float))


def diverged_mask(df: pd.DataFrame, s_idx: np.ndarray, divergence_ratio: float = DIVERGENCE_RATIO) -> np.ndarray:
    """Runs treated as diverged: flagged (`flagged_mask`), or loss > divergence_ratio x setting best."""
    loss = df["loss"].to_numpy(float)
    flagged = flagged_mask(df)
    best = _best_per_setting(loss, flagged, s_idx, int(s_idx.max()) + 1)
    return flagged | (loss > divergence_ratio * best[s_idx])


def _mid_half(v: np.ndarray) -> tuple[float, float]:
    """Middle and half-range of `v`; half-range 1 when `v` has no spread (the slope is then the prior's)."""
    lo, hi = float(np.min(v)), float(np.max(v))
    half = 0.5 * (hi - lo)
    return 0.5 * (lo + hi), (half if half > 1e-9 else 1.0)


def _best_per_setting(loss, diverged, s_idx, S) -> np.ndarray:
    best = np.full(S, np.inf)
    ok = ~diverged & np.isfinite(loss)
    np.minimum.at(best, s_idx[ok], loss[ok])
    return best


def censor_levels(loss, diverged, flagged, s_idx, log_lr, log_b) -> np.ndarray:
    """Censoring level (nats/token) of each diverged run, NaN elsewhere (the module docstring): for a run
    `flagged` (marked diverged, or without a finite loss) its setting's best converged loss; for one diverged by
    its recorded loss, the loss of the highest-LR converged run below it at the same setting and batch, else the
    setting's best; where the setting has no converged run, the best of all."""
    ok = ~diverged & np.isfinite(loss)
    best = _best_per_setting(loss, diverged, s_idx, int(s_idx.max()) + 1)
    overall = float(np.min(loss[ok]))
    level = np.full(len(loss), np.nan)
    for i in np.flatnonzero(diverged):
        same = ok & (s_idx == s_idx[i]) & np.isclose(log_b, log_b[i]) & (log_lr < log_lr[i])
        if same.any() and not flagged[i]:
            level[i] = loss[np.flatnonzero(same)[np.argmax(log_lr[same])]]
        else:
            level[i] = best[s_idx[i]] if np.isfinite(best[s_idx[i]]) else overall
    return level


def require_lr_and_batch(df: pd.DataFrame, source: str, who: str) -> None:
    """A `ModelError` naming the first run without a finite ``lr`` or ``batch_tokens``."""
    for col in ("lr", "batch_tokens"):
        bad = np.flatnonzero(~np.isfinite(df[col].to_numpy(float)))
        if len(bad):
            raise ModelError(f"{source}: {who} needs {col!r} on every run; {len(bad)} run(s) lack it "
                             f"(first: run {df['run_id'].iloc[bad[0]]!r})")


def settings_of(df: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Index of each run's setting (N, D and ``group`` when the table has one) and the settings table."""
    keys = ["N", "D"] + (["group"] if "group" in df.columns and df["group"].notna().any() else [])
    key_df = df[keys].copy()
    if "group" in keys:
        key_df["group"] = key_df["group"].astype(str)
    codes = key_df.groupby(keys, sort=True).ngroup().to_numpy()
    settings = key_df.assign(_s=codes).drop_duplicates("_s").sort_values("_s").drop(columns="_s")
    return codes, settings.reset_index(drop=True)


def sizes_of(settings: pd.DataFrame) -> np.ndarray:
    """Index of each setting's model size: its distinct N (one architecture per N, as in Step Law's grids)."""
    return settings.groupby("N", sort=True).ngroup().to_numpy()
