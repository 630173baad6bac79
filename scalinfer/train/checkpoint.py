"""Checkpoints with orbax: the train state (params, optimizer state, step, RNG key) as arrays, and
the loop's bookkeeping (data position, tokens seen, wall time...) as JSON, saved together.

Orbax writes each step into a temporary folder and renames it when complete, so a run killed
while saving (even by ``kill -9``) leaves the previous checkpoint intact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

__all__ = ["Checkpointer"]


class Checkpointer:
    """A folder of step checkpoints.

    Parameters
    ----------
    directory : where the step folders go (created if missing).
    keep : how many of the most recent checkpoints to keep (None = all).
    """

    def __init__(self, directory: str | Path, keep: int | None = 2):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                               enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
        """Save ``state`` (a pytree of arrays) and ``meta`` (JSON-ready) as ``step``."""
        if step in self._manager.all_steps():
            return
        self._manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
        self._manager.wait_until_finished()

    def restore(self, step: int, like: Any) -> tuple[Any, dict[str, Any]]:
        """Restore ``step`` into the shapes, dtypes and shardings of ``like`` (arrays or
        ``jax.ShapeDtypeStruct`` with shardings)."""
        abstract = jax.tree.map(
            lambda a: a if isinstance(a, jax.ShapeDtypeStruct) else ocp.utils.to_shape_dtype_struct(a), like)
        out = self._manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
        return out["state"], dict(out["meta"])

    def close(self) -> None:
        self._manager.close()
