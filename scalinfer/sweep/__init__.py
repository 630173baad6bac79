"""Calibration sweeps: design one (`plan`), describe it in a file (`spec`), run it (`runner`), merge it (`store`).

``make_plan(PlanSpec(...)).to_toml()`` writes the sweep file of a calibration design; ``run_sweep(FILE, DIR)``
trains its runs with parallel workers into the sweep folder ``DIR`` and merges their records into
``DIR/runs.jsonl``; ``merge(DIR)`` and ``export(DIR, DEST)`` rebuild and copy the results.
"""

from scalinfer.sweep.plan import (
    CalibrationPlan, PlanSpec, SizeSpec, aligned_decay_points, check_plan_configs, dense_counterpart, lr_grid,
    make_plan, parse_size, prior_law,
)
from scalinfer.sweep.runner import run_one, run_sweep, run_worker, worker_loop
from scalinfer.sweep.spec import Sweep, SweepRun, expand_sweep, load_sweep, parse_sweep
from scalinfer.sweep.store import RunStatus, SweepResult, export, merge, run_status

__all__ = [
    "PlanSpec", "SizeSpec", "CalibrationPlan", "make_plan", "check_plan_configs", "parse_size", "dense_counterpart",
    "prior_law", "lr_grid", "aligned_decay_points",
    "Sweep", "SweepRun", "parse_sweep", "load_sweep", "expand_sweep",
    "RunStatus", "SweepResult", "run_status", "merge", "export",
    "run_one", "worker_loop", "run_sweep", "run_worker",
]
