"""NUTS: the chain loop (`sampler`) and its warmup's adaptation (`adaptation`).

`run_nuts` is what `scalinfer.fit` calls; the pieces it is built from are exported for tests and for
composing other samplers: `nuts_kernel` (one transition), `window_adaptation` and its parts, each a pure
``(init, update, final)`` triple over a `NamedTuple` state.
"""

from scalinfer.inference.nuts.adaptation import (
    ADAPT, SHRINK_BELOW, WINDOW_DRAWS, DualAveragingState, NutsConfig, NutsParameters, WelfordState,
    WindowAdaptationState, dual_averaging, mass_matrix, pooled_moments, regularized_mass_matrix, shrunk_covariance,
    shrunk_windows, step_size, terminal_window, welford_covariance, window_adaptation)
from scalinfer.inference.nuts.sampler import (
    CHAIN_METHODS, MAX_DELTA_ENERGY, PROGRESS_CHUNKS, STAT_FIELDS, ChainState, NutsStats, Preconditioner, chain_keys,
    lower_nuts, nuts_kernel, run_nuts)

__all__ = ["run_nuts", "lower_nuts", "chain_keys", "CHAIN_METHODS", "nuts_kernel", "Preconditioner", "ChainState",
           "NutsStats", "STAT_FIELDS", "MAX_DELTA_ENERGY", "PROGRESS_CHUNKS", "NutsConfig", "NutsParameters",
           "DualAveragingState", "WelfordState", "WindowAdaptationState", "dual_averaging", "step_size",
           "welford_covariance", "pooled_moments", "mass_matrix", "regularized_mass_matrix", "shrunk_covariance",
           "shrunk_windows", "terminal_window", "window_adaptation", "ADAPT", "SHRINK_BELOW", "WINDOW_DRAWS"]
