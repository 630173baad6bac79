"""Fit each module group's LR valley with the ``surface`` model; writes data/module_lr/fits/<group>.nc.

One fit per module group (``embedding``, ``hidden``, ``router``, ``lm_head``): that group's 18 runs plus the
three base runs (x1), with the LR on the group's axis, ``lr = base LR x multiplier``, so that the model's
LR valley is the valley of that group's LR with every other group at the base. The design is the surface
model's ``fixed_batch`` (every run at 256 tokens), one setting per size (one D), the population prior; runs
with a loss above 1.3x their size's best are censored (``divergence_ratio``).

NUTS, not MAP/Laplace: on a 7-point valley per size the mode drives the noise floor ``sigma0`` to 0 (the
valley interpolates the points), so the Hessian there is not positive definite and the Laplace approximation
fails (scalinfer.fit(..., method="laplace") raises). Size scatter off: each size is one setting here, so
the size's own level and the setting's scatter are the same thing twice; with both, the embedding fit had 27
divergent transitions of 2,000 (none without). The chains are longer
than the default, at a higher target acceptance, because short fixed-batch chains do not converge (2 x (300
+ 300) on the hidden group: R-hat 1.14); the fit's warnings, printed, say how these did.
notebooks/module_lr.ipynb reads the fits (fitting them there would take minutes).

    PYTHONPATH=. nice -n 10 .venv/bin/python data/module_lr/fit_valleys.py [GROUP ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
GROUPS = ("embedding", "hidden", "router", "lm_head")
SETTINGS = dict(chains=4, warmup=1000, samples=500, target_accept=0.95, seed=0, size_scatter=False)


def group_runs(group: str) -> pd.DataFrame:
    """The base runs and `group`'s runs, ``lr`` = base LR x the group's multiplier (``lr_base``: the base)."""
    runs = pd.read_json(HERE / "runs.jsonl", lines=True)
    summary = pd.read_csv(HERE / "summary.csv").rename(columns={"group": "module"})
    df = runs.merge(summary[["run_id", "module", "multiplier"]], on="run_id", validate="one_to_one")
    df = df[df["module"].isin(["base", group])].copy()
    df["lr_base"] = df["lr"]
    df["lr"] = df["lr_base"] * df["multiplier"]
    return df.reset_index(drop=True)


def main(groups: list[str]) -> None:
    import scalinfer
    import scalinfer.runtime

    scalinfer.runtime.configure(n_devices=SETTINGS["chains"])
    (HERE / "fits").mkdir(exist_ok=True)
    for group in groups:
        t0 = time.perf_counter()
        fit = scalinfer.fit(scalinfer.load_runs(group_runs(group)), model="surface", **SETTINGS)
        fit.save(HERE / "fits" / f"{group}.nc")
        print(f"{group}: {fit} in {time.perf_counter() - t0:.0f} s; settings {SETTINGS}", flush=True)
        for w in fit.warnings():
            print(f"  warning: {w}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(GROUPS))
