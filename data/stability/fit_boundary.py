"""Fit each arm of the stability study (QK-norm off, on) with the ``surface`` model; writes
data/stability/fits/qk_off.nc and qk_on.nc, which notebooks/stability.ipynb reads.

One fit per arm: its finished runs at every size (runs.jsonl, ``qk_norm`` false or true), all at batch 256
and one D: the surface model's ``fixed_batch`` design, one setting per size, the population prior, size scatter
off (each size is one setting). A run that diverged (non-finite training loss) or ended above 1.3x its size's
best loss (``divergence_ratio``) is censored; `scalinfer.decide.divergence_model` then fits the logistic
P(diverge | log(lr / lr*_s)) to the censored-or-not outcome of every run, per posterior draw of each size's
best LR lr*_s. NUTS with the settings notebooks/module_lr.ipynb's fits use (data/module_lr/fit_valleys.py
says why: MAP/Laplace fails on a valley of a few points, short fixed-batch chains do not converge).

    PYTHONPATH=. nice -n 10 .venv/bin/python data/stability/fit_boundary.py
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ARMS = {"qk_off": False, "qk_on": True}
SETTINGS = dict(chains=4, warmup=1000, samples=500, target_accept=0.95, seed=0, size_scatter=False)


def arm_runs(qk_norm: bool) -> pd.DataFrame:
    """The finished runs of one arm (QK-norm off or on)."""
    runs = pd.read_json(HERE / "runs.jsonl", lines=True)
    return runs[runs["qk_norm"] == qk_norm].reset_index(drop=True)


def main() -> None:
    import scalinfer
    import scalinfer.runtime

    scalinfer.runtime.configure(n_devices=SETTINGS["chains"])
    (HERE / "fits").mkdir(exist_ok=True)
    for arm, qk in ARMS.items():
        df = arm_runs(qk)
        if df["lr"].nunique() < 3:  # a sweep cut short: nothing to fit yet
            print(f"{arm}: {len(df)} runs landed, at {df['lr'].nunique()} LRs: not fitted", flush=True)
            (HERE / "fits" / f"{arm}.nc").unlink(missing_ok=True)
            continue
        t0 = time.perf_counter()
        fit = scalinfer.fit(scalinfer.load_runs(df), model="surface", **SETTINGS)
        fit.save(HERE / "fits" / f"{arm}.nc")
        print(f"{arm}: {fit} ({len(df)} runs, sizes {sorted(df['name'].str.split('-').str[0].unique())}) in "
              f"{time.perf_counter() - t0:.0f} s; settings {SETTINGS}", flush=True)
        for w in fit.warnings():
            print(f"  warning: {w}", flush=True)


if __name__ == "__main__":
    main()
