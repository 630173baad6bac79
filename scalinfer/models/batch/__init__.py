"""The batch-size models (docs/laws.md section 5), on steps-to-target tables or loss curves.

=================  ==========================================================================================
attribute          model
=================  ==========================================================================================
``OPENAI``         ``batch-openai``: S = S_min (1 + B_crit / B) (`scalinfer.models.batch.openai`)
``WSD``            ``batch-wsd``: the batch-size paper's piecewise E(S) (`scalinfer.models.batch.wsd`)
``FLOOR``          ``batch-floor``: L(S; B) = L_inf + a S^-alpha + c / B (`scalinfer.models.batch.floor`)
=================  ==========================================================================================

`steps_to_target_from_curves` (pure) turns loss curves into the steps-to-target table the first two fit;
the floor model fits curves directly or the same tables, so LOO can compare all three on one table.
"""

from scalinfer.models.batch.floor import FLOOR, BatchFloor
from scalinfer.models.batch.openai import OPENAI, BatchOpenAI
from scalinfer.models.batch.targets import curves_to_table, default_target_losses, steps_to_target_from_curves
from scalinfer.models.batch.wsd import WSD, BatchWSD

__all__ = ["OPENAI", "WSD", "FLOOR", "BatchOpenAI", "BatchWSD", "BatchFloor", "steps_to_target_from_curves",
           "default_target_losses", "curves_to_table"]
