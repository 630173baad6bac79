"""What each reported quantity is: one registry of names, units and one-line definitions.

Every quantity that ``predict`` and ``recommend`` report (Python ``to_dict``, ``--json`` and the text output)
carries its ``unit`` and ``definition`` from here. A quantity is named by what it is, the same in every model:

====================  ================================================================================
name                  what it is
====================  ================================================================================
``lr_opt``            the peak LR of the lowest loss at (N, D), at the loss-optimal batch
``batch_loss_opt``    the batch of the lowest final loss at fixed (N, D), each batch at its best LR (B*)
``batch_token_opt``   the batch that reaches a target loss with the fewest tokens (B_opt = E_min / S_opt)
``batch_min``         the smallest batch that reaches a target loss at all (B_min)
``batch_crit``        E_min / S_min (B_crit); the 2x-overhead point only under OpenAI's hyperbola
``batch_overhead_20``  the batch whose steps are 20% above perfect scaling, E_min / B (Zhang et al.'s
                      critical batch); 0.2 B_crit under OpenAI's hyperbola, reported by ``batch-openai``
====================  ================================================================================

Old names stay for one release as documented aliases (`ALIASES`): ``batch_opt`` is ``batch_loss_opt`` in
``surface``, ``classic`` and the peer laws (``predict --baseline``) and ``batch_token_opt`` in ``batch-wsd`` and
``batch-floor``. The JSON carries both names; the alias's entry says ``"alias_of": NEW`` and its definition
begins with "alias of NEW".

Why batch_crit needs its model: B_crit = E_min / S_min is OpenAI's 2x-overhead point (twice the fewest steps
and twice the fewest tokens) because their steps-tokens curve is the hyperbola (S/S_min - 1)(E/E_min - 1) = 1.
Under the noise-floor law, E_min / S_min = (1 + 1/alpha)(1 + alpha)^(1/alpha) B_min, ~2.1 B_opt at
alpha = 0.7, where steps and tokens are both ~1.36x their minima, not 2x; under the piecewise E(S) it is
B_opt / mu. So each model's ``batch_crit`` says which it is (`definition`).
"""

from __future__ import annotations

import dataclasses

__all__ = ["Quantity", "QUANTITIES", "ALIASES", "describe", "entries"]

LR = "peak learning rate"
BATCH = "tokens/step"
LOSS = "nats/token"
RELATIVE = "relative excess (fraction of the optimum's loss)"


@dataclasses.dataclass(frozen=True)
class Quantity:
    """A reported quantity: its name, unit, one-line definition, and the name it is an alias of (if one)."""

    name: str
    unit: str
    definition: str
    alias_of: str | None = None

    def entry(self) -> dict[str, str]:
        """The fields every JSON quantity carries beside its numbers."""
        out = {"unit": self.unit, "definition": self.definition}
        if self.alias_of:
            out["alias_of"] = self.alias_of
        return out


def _q(name: str, unit: str, definition: str) -> Quantity:
    return Quantity(name, unit, definition)


#: name -> Quantity, model-independent definitions (`describe` applies a model's own, `_BY_MODEL`)
QUANTITIES: dict[str, Quantity] = {q.name: q for q in (
    # ---- the LR and the batch at fixed (N, D) ----
    _q("lr_opt", LR, "the peak LR of the lowest loss at (N, D), at the loss-optimal batch (the joint optimum)"),
    _q("lr_opt_at_batch", LR, "the peak LR of the lowest loss at (N, D) and the given batch (the LR-batch ridge)"),
    _q("batch_loss_opt", BATCH, "the batch of the lowest final loss at fixed (N, D), each batch at its best LR "
                                "(B*, Step Law's and DeepSeek's optimal batch)"),
    _q("loss_opt", LOSS, "the final loss at the joint optimum (lr_opt, batch_loss_opt)"),
    _q("loss_opt_at_batch", LOSS, "the final loss at (N, D) and the given batch at its best LR, lr_opt_at_batch"),
    _q("batch_opt_at_lr", BATCH, "the batch of the lowest final loss at (N, D) and the given peak LR"),
    _q("loss_opt_at_lr", LOSS, "the final loss at (N, D) and the given peak LR at its best batch, batch_opt_at_lr"),
    _q("loss", LOSS, "the final loss of a model of N parameters trained on D tokens"),
    # ---- batch sizes for a target loss ----
    _q("batch_token_opt", BATCH, "the batch that reaches the target loss with the fewest tokens, "
                                 "B_opt = E_min / S_opt (at a constant LR)"),
    _q("batch_min", BATCH, "the smallest batch that reaches the target loss at all (in any number of steps)"),
    _q("batch_crit", BATCH, "E_min / S_min, the fewest tokens over the fewest steps that reach the target loss; "
                            "OpenAI's 2x-overhead point only under their hyperbola"),
    _q("batch_overhead_20", BATCH, "the batch whose steps to the target are 20% above perfect scaling E_min / B "
                                   "(Zhang et al.'s critical batch): 0.2 B_crit under OpenAI's hyperbola"),
    _q("steps_to_target", "steps", "optimizer steps to reach the target loss at the given batch (inf: never)"),
    _q("tokens_to_target", "tokens", "tokens (batch x steps) to reach the target loss at the given batch "
                                     "(inf: never)"),
    # ---- compute-optimal allocation ----
    _q("N_opt", "parameters", "the model size of the lowest loss at compute C = 6 N D"),
    _q("D_opt", "tokens", "the training tokens of the lowest loss at compute C = 6 N D"),
    # ---- recommend (scalinfer.decide) ----
    _q("recommended_lr", LR, "value: the peak LR that minimises posterior expected loss at the recommended "
                             "batch; median, lo, hi: the best LR at that batch over the posterior"),
    _q("recommended_batch", BATCH, "value: the batch that minimises posterior expected loss (within the "
                                   "constraints); median, lo, hi: the best allowed batch over the posterior"),
    _q("expected_excess", RELATIVE, "excess loss of the recommended point, loss(lr, B) / loss(lr*, B*) - 1 per "
                                    "draw; mean: its posterior expectation"),
    _q("batch_penalty", RELATIVE, "the least excess loss at the recommended batch (at its best LR) against "
                                  "the joint optimum B*, per draw; 0 at B*"),
    _q("near_optimal_lr", LR, "the LR range at the recommended batch where P(excess loss <= x) >= q"),
    _q("near_optimal_batch", BATCH, "the batch range where some LR has P(excess loss <= x) >= q"),
    _q("batch_largest_near_optimal", BATCH, "value: the largest batch where some LR has P(excess <= x) >= q; "
                                            "median, lo, hi: each draw's largest batch within x of its optimum"),
    _q("choice_excess", RELATIVE, "excess loss of the given (lr, batch), loss(lr, B) / loss(lr*, B*) - 1 per "
                                  "draw; mean: its posterior expectation"),
    _q("choice_loss", LOSS, "the final loss at the given (lr, batch), per draw for a new setting"),
    _q("divergence_risk", "probability", "P(the run diverges) at the recommended (lr, batch): a logistic in "
                                         "log(lr / best LR at the batch) fitted to the fit's diverged runs; mean: "
                                         "its posterior expectation"),
    _q("choice_divergence_risk", "probability", "P(the run diverges) at the given (lr, batch), by the same "
                                                "logistic; mean: its posterior expectation"),
    _q("divergence_boundary", "ratio to the best LR at the batch", "lr / (best LR at the batch) where "
                                                                   "P(diverge) = 1/2 (the logistic's midpoint)"),
)}

#: model -> {old name: the name it is an alias of}; both appear in the JSON for one release
ALIASES: dict[str, dict[str, str]] = {
    "surface": {"batch_opt": "batch_loss_opt"},
    "classic": {"batch_opt": "batch_loss_opt"},
    "batch-wsd": {"batch_opt": "batch_token_opt"},
    "batch-floor": {"batch_opt": "batch_token_opt"},
    "baseline": {"batch_opt": "batch_loss_opt"},  # the peer laws of ``predict --baseline``
}

#: (model, name) -> definition, where a model's quantity is more specific than the shared one
_BY_MODEL: dict[tuple[str, str], str] = {
    ("batch-openai", "batch_crit"): "B_crit = E_min / S_min, OpenAI's 2x-overhead point: at B_crit the steps "
                                    "and the tokens are both twice their minimum (their hyperbola)",
    ("batch-wsd", "batch_crit"): "E_min / S_min of the piecewise E(S) (= B_opt / mu), by analogy with OpenAI's "
                                 "B_crit; not the 2x-overhead point under this curve",
    ("batch-floor", "batch_crit"): "E_min / S_min of the noise-floor law, ~2.1 B_opt at alpha = 0.7, where "
                                   "steps and tokens are ~1.36x their minima; not OpenAI's 2x-overhead point",
    ("surface", "loss"): "the final loss at the given lr and batch (at each draw's B* when no batch is given)",
    ("surface", "lr_opt"): "the peak LR of the lowest loss at (N, D), at the loss-optimal batch (the joint "
                           "optimum), for a new setting",
}


def describe(name: str, model: str | None = None) -> Quantity:
    """The `Quantity` ``name`` reports in `model` (an alias resolves to its target's unit and definition, with
    ``alias_of`` set); a name the registry does not know gets an empty unit and definition."""
    target = ALIASES.get(model or "", {}).get(name)
    if target is not None:
        q = describe(target, model)
        return Quantity(name, q.unit, f"alias of {target} (the old name, kept for one release): {q.definition}",
                        alias_of=target)
    q = QUANTITIES.get(name, Quantity(name, "", ""))
    own = _BY_MODEL.get((model or "", name))
    return dataclasses.replace(q, definition=own) if own else q


def entries(names, model: str | None = None) -> list[tuple[str, Quantity]]:
    """(name, Quantity) for each of `names` in order, each alias followed by its target under the new name
    (when the target is not itself among `names`)."""
    names = list(names)
    out = []
    for n in names:
        q = describe(n, model)
        out.append((n, q))
        if q.alias_of and q.alias_of not in names:
            out.append((q.alias_of, describe(q.alias_of, model)))
    return out
