"""The trainer: a small JAX Mixture-of-Experts LM that produces calibration runs.

``train(config, out_dir) -> records`` runs one configuration and appends its run-table records;
``scalinfer train --config FILE.toml [key=value ...] --out DIR [--preset NAME]`` is the command.
Modules: `config` (dataclasses, presets), `model` and `moe` (the network), `mup`, `optimizer`
(AdamW, per-module LRs), `data`, `checkpoint`, `parallel` (mesh and shardings), `token_plan`
(tokens per step, LR and decay branches of a run), `loop` (train step, loop), `records`,
`coord_check` (muP coordinate check), `diagnostics` (update sizes, activation RMS, attention
logits, router entropy and load every ``diagnostics_every`` steps; `read_diagnostics`), `interrupt`
(`stop_on_signal`: Ctrl-C or SIGTERM stops a run after its step in flight, with a checkpoint). The LR
schedule and the schedule file live in `scalinfer.schedules`; sweeps in `scalinfer.sweep`.
"""

from scalinfer.train.config import (
    PRESETS, DataConfig, LrMultipliers, ModelConfig, MupConfig, OptimizerConfig, TrainConfig,
    apply_overrides, load_config, preset,
)
from scalinfer.train.interrupt import StopRequest, stop_on_signal
from scalinfer.train.loop import TrainState, make_eval_fn, make_train_step, train
from scalinfer.train.model import flops_per_token, forward, init_params, loss_fn, param_counts
from scalinfer.train.optimizer import make_optimizer
from scalinfer.train.token_plan import make_plan

__all__ = [
    "train", "stop_on_signal", "StopRequest", "TrainConfig", "ModelConfig", "MupConfig", "OptimizerConfig",
    "DataConfig", "LrMultipliers", "PRESETS", "preset", "load_config", "apply_overrides",
    "init_params", "forward", "loss_fn", "param_counts", "flops_per_token",
    "make_optimizer", "make_train_step", "make_eval_fn", "make_plan", "TrainState",
]
