"""Devices: one ``Mesh`` with axes ``("data", "expert")`` over every device JAX sees.

Batches are split along their sequence axis over both mesh axes (data parallel on all devices);
the routed experts' weights are split along the expert axis over ``"expert"`` (size 1 by default,
i.e. replicated), everything else is replicated. XLA's SPMD partitioner inserts the gradient
all-reduce (and, with an expert axis, the all-to-all of the dispatch). One CPU is a 1 x 1 mesh and
runs the same code. Several hosts: set ``multihost = true`` (and, without a cluster manager,
``coordinator_address``, ``num_processes``, ``process_id``) and launch one process per host; `train`
joins the job (`scalinfer.runtime.configure`) before any device is touched, and each process feeds
only its own rows of every batch (README, "Training on a cluster").
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from scalinfer.errors import TrainError

__all__ = ["make_mesh", "param_shardings", "batch_sharding", "replicated",
           "put_batch", "process_rows"]

_EXPERT_WEIGHTS = ("w_gate", "w_up", "w_down")


def make_mesh(expert: int = 1) -> Mesh:
    n = jax.device_count()
    if n % expert:
        raise TrainError(f"mesh_expert={expert} does not divide the {n} devices")
    devices = np.asarray(jax.devices()).reshape(n // expert, expert)
    return Mesh(devices, ("data", "expert"))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def param_shardings(tree, mesh: Mesh):
    """Shardings for params, or for any tree keyed like them (the optimizer state): routed
    experts split over ``"expert"`` along their E axis ([L, E, ...]); the rest replicated."""
    def spec(path, leaf):
        name = getattr(path[-1], "key", None)
        if name in _EXPERT_WEIGHTS and leaf.ndim == 4 and leaf.shape[1] % mesh.shape["expert"] == 0:
            return NamedSharding(mesh, P(None, "expert"))
        return NamedSharding(mesh, P())
    return jax.tree_util.tree_map_with_path(spec, tree)


def batch_sharding(mesh: Mesh, ndim: int = 3, axis: int = 1) -> NamedSharding:
    """Sequences (axis ``axis`` of the batch) split over every device."""
    spec = [None] * ndim
    spec[axis] = ("data", "expert")
    return NamedSharding(mesh, P(*spec))


def process_rows(n_rows: int) -> tuple[int, int]:
    """(first row, number of rows) of a batch axis of ``n_rows`` fed by this process."""
    count = jax.process_count()
    if n_rows % jax.device_count():
        raise TrainError(f"a batch of {n_rows} sequences does not split over {jax.device_count()} devices")
    per = n_rows // count
    return jax.process_index() * per, per


def put_batch(local_rows: np.ndarray, sharding: NamedSharding, global_shape: tuple[int, ...]) -> jax.Array:
    """Assemble the global batch from this process's rows."""
    return jax.make_array_from_process_local_data(sharding, local_rows, global_shape)
