"""Schedules: the WSD learning-rate schedule, the schedule file, and batch-size schedules from a fit.

Modules: `wsd` (the WSD LR schedule and its decay branches, pure ``step -> value`` functions;
`DECAY_SHAPES`), `file` (the schedule file ``scalinfer.schedule/1`` the trainer reads: `Schedule`,
`load_schedule`, `validate_schedule`, `write_schedule`), `batch` (batch-size schedules from a batch
posterior: `batch_schedule`). The trainer, the plots and the CLI import them from here.
"""
