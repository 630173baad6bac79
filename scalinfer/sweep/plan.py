"""The calibration plan of the Fitting paradigm (docs/laws.md section 4, "the search factor"), written as a sweep file.

A full grid over model size N, data D and learning rate eta trains n_N * n_D * n_eta models from scratch:
O(n^3). The Fitting paradigm needs far less:

- the LR law removes most of the eta axis: C_eta learning rates per size, spaced by a constant factor around
  the optimum a prior law predicts, are enough to place the vertex of the loss valley (docs/laws.md section 3);
- the WSD law of docs/laws.md section 2 removes the D axis: one run per (size, LR, batch) trained to the largest
  D, with C_D decay branches forked from its stable phase, gives C_D + 1 points "trained to D" for the
  price of one run plus C_D short decays.

So a plan is n sizes x C_eta LRs (x the batch sizes) runs, each with C_D decay branches, and costs
O(n * C_eta * C_D) short decays on top of n * C_eta long runs. `make_plan` designs it, prices it in FLOPs
against the full grid that trains every (N, D, eta, B) point from scratch, and `CalibrationPlan.to_toml`
writes the sweep file `scalinfer sweep` runs.

Costs use the trainer's `scalinfer.train.model.flops_per_token` (forward + backward matmul FLOPs of the
active parameters, embedding head and attention included); ``6 * N_active`` per token is shown beside it.

Token alignment: every decay branch is forked at a token count that is a multiple of every batch size of the
plan, and decays over a multiple of them too, so each branch ends at exactly the same D at every batch size
and the runs of one size share their (N, D) settings.
"""

from __future__ import annotations

import dataclasses
import fractions
import math
import re
from typing import Any, Callable, Sequence

import numpy as np

from scalinfer.errors import TrainError
from scalinfer.train.config import PRESETS, ModelConfig, TrainConfig
from scalinfer.train.model import flops_per_token, param_counts

__all__ = ["SizeSpec", "PlanSpec", "CalibrationPlan", "parse_size", "dense_counterpart", "prior_law",
           "lr_grid", "aligned_decay_points", "make_plan", "check_plan_configs", "MAX_RUN_STEPS", "MAX_PLAN_STEPS"]


# ---- model sizes -------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SizeSpec:
    """One calibration model size.

    Attributes
    ----------
    label : short name used in run names (``d64l2``, ``cal-s``, ``d48l2-dense``).
    model : the trainer's model configuration.
    """

    label: str
    model: ModelConfig

    @property
    def N_total(self) -> int:
        """Non-embedding parameters (all experts)."""
        return param_counts(self.model).non_embedding

    @property
    def N_active(self) -> int:
        """Non-embedding parameters a token uses (top_k experts)."""
        return param_counts(self.model).non_embedding_active

    @property
    def flops_per_token(self) -> float:
        """Training FLOPs per token (`scalinfer.train.model.flops_per_token`)."""
        return flops_per_token(self.model)


def dense_counterpart(model: ModelConfig) -> ModelConfig:
    """The dense model with the MoE's active parameters and FLOPs: one expert of width top_k * d_ff."""
    return dataclasses.replace(model, n_experts=1, top_k=1, d_ff=model.d_ff * model.top_k, capacity_factor=None)


_SHAPE = re.compile(r"^d(\d+)l(\d+)(?:h(\d+))?(-dense)?$")


def parse_size(spec: str, base: ModelConfig | None = None, what: str = "size") -> SizeSpec:
    """A size from a preset name, a shape or a parameter count.

    Parameters
    ----------
    spec : a preset (``cal-s``, ``cal-s-dense``); a shape ``d<d_model>l<n_layers>[h<n_heads>][-dense]``
        (``d64l2``), the rest taken from ``base`` with d_ff / d_model and the head width kept; or a number of
        non-embedding parameters N_total (``2e5``): the shape at ``base``'s depth whose N_total is nearest,
        with d_model a multiple of ``base``'s head width, from 1 to 256 heads (a count more than 2x outside
        the N_total of those shapes is an error: no shape there is near it).
    base : the model the shapes vary (default: the ``cal-xs`` preset's).
    what : how errors name the size (the CLI passes its flag, ``--size``).
    """
    base = base or PRESETS["cal-xs"].model
    spec = spec.strip()
    if spec in PRESETS:
        return SizeSpec(spec, PRESETS[spec].model)
    m = _SHAPE.match(spec)
    if m:
        d, layers = int(m.group(1)), int(m.group(2))
        heads = int(m.group(3)) if m.group(3) else max(1, d // base.d_head)
        try:
            model = _shape(base, d, layers, heads)
        except TrainError as e:
            raise TrainError(f"{what} {spec!r}: {e}") from None
        if m.group(4):
            model = dense_counterpart(model)
        return SizeSpec(spec, model)
    try:
        target = float(spec)
    except ValueError:
        raise TrainError(f"{what} {spec!r}: expected a preset ({', '.join(PRESETS)}), a shape like d64l2 or "
                         f"d64l2h4[-dense], or a parameter count like 2e5") from None
    if not (math.isfinite(target) and target > 0):
        raise TrainError(f"{what} {spec!r}: a parameter count must be positive and finite")
    step = base.d_head
    shapes = [_shape(base, k * step, base.n_layers, k) for k in range(1, 257)]
    lo, hi = (param_counts(shapes[i]).non_embedding for i in (0, -1))
    if not lo / 2 <= target <= 2 * hi:
        raise TrainError(f"{what} {spec!r}: no shape of {base.n_layers} layers and heads of {step} has about "
                         f"{target:.3g} non-embedding parameters (d{step}: {lo:.3g} to d{256 * step}: {hi:.3g}); "
                         f"give a shape like d{step}l{base.n_layers} instead")
    best = min(shapes, key=lambda mdl: abs(math.log(param_counts(mdl).non_embedding / target)))
    return SizeSpec(f"d{best.d_model}l{best.n_layers}", best)


def _shape(base: ModelConfig, d_model: int, n_layers: int, n_heads: int) -> ModelConfig:
    if min(d_model, n_layers, n_heads) < 1:
        raise TrainError(f"d_model, layers and heads must be at least 1 (got d{d_model}l{n_layers}h{n_heads})")
    if d_model % n_heads or (d_model // n_heads) % 2:
        raise TrainError(f"d_model must split into n_heads heads of even width (got d{d_model}l{n_layers}"
                         f"h{n_heads})")
    d_ff = max(2, round(base.d_ff / base.d_model * d_model))
    return dataclasses.replace(base, d_model=d_model, n_layers=n_layers, n_heads=n_heads, head_dim=None,
                               d_ff=d_ff)


# ---- the prior law ---------------------------------------------------------------------------------------
_BASELINE_NAMES = {"steplaw": "step_law", "step_law": "step_law", "deepseek": "deepseek_llm",
                   "deepseek_llm": "deepseek_llm", "zhou2026": "zhou2026"}


def prior_law(name: str) -> Callable[[float, float], tuple[float, float | None]]:
    """``(N, D) -> (lr_opt, batch_opt or None)`` from a peer law or a saved fit.

    Parameters
    ----------
    name : ``steplaw``, ``deepseek`` or ``zhou2026`` (`scalinfer.laws.BASELINES`), or the path of a fit
        file (netCDF) of a model that predicts ``lr_opt`` (and ``batch_opt``), e.g. ``surface``: its
        posterior medians.
    """
    from pathlib import Path

    key = _BASELINE_NAMES.get(name.lower())
    if key is not None:
        from scalinfer.laws import BASELINES

        lr_fn, batch_fn = BASELINES[key]

        def law(N: float, D: float) -> tuple[float, float | None]:
            lr = float(np.asarray(lr_fn(N, D)))
            return lr, (float(np.asarray(batch_fn(N, D))) if batch_fn is not None else None)
        return law
    if not Path(name).exists():
        raise TrainError(f"prior {name!r}: not a peer law (steplaw, deepseek, zhou2026) nor an existing fit file")
    from scalinfer.inference import load_fit

    fit = load_fit(name)

    def fitted(N: float, D: float) -> tuple[float, float | None]:
        out = fit.predict(N=N, D=D).to_dict()
        if "lr_opt" not in out:
            raise TrainError(f"prior {name}: model {fit.model.name!r} does not predict lr_opt")
        batch = out.get("batch_opt", {}).get("median") if isinstance(out.get("batch_opt"), dict) else None
        return float(out["lr_opt"]["median"]), batch
    return fitted


# ---- grids -----------------------------------------------------------------------------------------------
def lr_grid(center: float, count: int, factor: float) -> tuple[float, ...]:
    """``count`` learning rates spaced by ``factor``, geometrically centred on ``center`` (3 significant
    digits)."""
    if count < 1 or not factor > 1 or not center > 0:
        raise TrainError(f"LR grid: need count >= 1, factor > 1 and a positive centre "
                         f"(got {count}, {factor}, {center})")
    return tuple(float(f"{center * factor ** (k - (count - 1) / 2):.3g}") for k in range(count))


def aligned_decay_points(total_tokens: int, count: int, decay_fraction: float, unit: int,
                         warmup_fraction: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Fork points of ``count`` decay branches ending near D = total * 2^-k, k = 1..count.

    Each branch is forked at f tokens and decays over round(decay_fraction / (1 - decay_fraction) * f)
    tokens (the trainer's rule); f is chosen a multiple of ``unit`` (the least common multiple of the batch
    sizes) whose decay length is a multiple of ``unit`` too, so the branch ends at the same D at every batch.

    Returns
    -------
    (fork_tokens, end_tokens) : two tuples, largest D last.
    """
    ratio = decay_fraction / (1 - decay_fraction)
    # fork points are f = j * unit with ratio * j whole: j a multiple of the period q of ratio's fraction
    q = fractions.Fraction(ratio).limit_denominator(10_000).denominator
    j_max = int(total_tokens // unit) // q * q
    if abs(ratio * q - round(ratio * q)) > 1e-9 or j_max < q:
        raise TrainError(f"no fork point is a multiple of {unit} tokens with a decay of a whole number of "
                         f"batches (decay fraction {decay_fraction}); use a decay fraction like 0.2 or 0.25")
    forks, ends = [], []
    for k in range(count, 0, -1):
        want = total_tokens / 2 ** k * (1 - decay_fraction)
        # the multiple of q * unit nearest `want` (the smaller one on a tie), within [q, j_max] batches
        m = want / (q * unit)
        near = {min(max(math.floor(m), 1), j_max // q), min(max(math.ceil(m), 1), j_max // q)}
        f = min((i * q * unit for i in near), key=lambda c: (abs(c - want), c))
        lo, hi = warmup_fraction * total_tokens, (1 - decay_fraction) * total_tokens
        if not lo <= f <= hi:
            raise TrainError(f"decay branch {k}: fork at {f} tokens is outside the stable phase [{lo:.0f}, "
                             f"{hi:.0f}] of a {total_tokens}-token run; use fewer decay branches or more tokens")
        forks.append(f)
        ends.append(f + round(ratio * f))
    if len(set(forks)) != len(forks):
        raise TrainError(f"{count} decay branches do not fit in a {total_tokens}-token run at a {unit}-token "
                         f"alignment (two forks coincide); use more tokens or fewer branches")
    return tuple(forks), tuple(ends)


# ---- the plan ------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PlanSpec:
    """What to plan.

    Attributes
    ----------
    sizes : the calibration model sizes.
    target_N, target_D : the run to predict (non-embedding parameters, N_total; tokens).
    prior : the law centring each size's LR grid (`prior_law`).
    lr_count : C_eta, learning rates per size and batch.
    lr_factor : ratio between neighbouring learning rates.
    lr_scale : multiplies the prior's LR (a correction learnt from a pilot run; 1 = the law as published).
    decay_count : C_D, decay branches per run (the main run's own decayed end is one more D point).
    batches : batch sizes in tokens; empty = ``batch_count`` sizes spaced by 2 around the prior's B*
        (rounded to powers of two times ``seq_len``).
    batch_count : how many batch sizes when ``batches`` is empty.
    tokens : tokens per main run for every size (D_max); None = ``tokens_per_param`` x N_total.
    tokens_per_param : D_max / N_total per size; None = the target's D / N.
    budget_flops : total FLOPs the plan may cost; a plan above it shrinks its tokens to fit (when
        ``tokens`` is None) or is refused.
    warmup_fraction, decay_fraction : WSD warmup and decay as fractions of each run (and branch).
    n_kind : which N the prior law takes, ``total`` or ``active``.
    seed : the runs' seed.
    preset : the trainer preset every run starts from.
    eval_tokens : held-out tokens of each run's final evaluation (None: the trainer's default).
    name : the sweep's name (run names are ``<size>-lr<eta>-b<batch>``).
    """

    sizes: tuple[SizeSpec, ...]
    target_N: float
    target_D: float
    prior: str = "steplaw"
    lr_count: int = 6
    lr_factor: float = 2.0
    lr_scale: float = 1.0
    decay_count: int = 3
    batches: tuple[int, ...] = ()
    batch_count: int = 1
    tokens: int | None = None
    tokens_per_param: float | None = None
    budget_flops: float | None = None
    warmup_fraction: float = 0.05
    decay_fraction: float = 0.2
    n_kind: str = "total"
    seed: int = 0
    preset: str = "cal-xs"
    eval_tokens: int | None = None
    name: str = "calibration"


@dataclasses.dataclass(frozen=True)
class SizePlan:
    """The grid of one size: its LRs, batches, main-run tokens, fork points and cost."""

    size: SizeSpec
    lr_center: float
    lrs: tuple[float, ...]
    batches: tuple[int, ...]
    total_tokens: int
    decay_points: tuple[int, ...]
    D_points: tuple[int, ...]
    tokens_per_run: int
    flops: float
    full_grid_flops: float

    @property
    def runs(self) -> int:
        return len(self.lrs) * len(self.batches)

    @property
    def steps(self) -> int:
        """Optimizer steps of the size's runs, decay branches included."""
        return len(self.lrs) * sum(self.tokens_per_run // b for b in self.batches)


@dataclasses.dataclass(frozen=True)
class CalibrationPlan:
    """A designed calibration sweep and its price.

    Attributes
    ----------
    spec : what was asked.
    sizes : one `SizePlan` per size.
    scaled : factor applied to the tokens to fit the budget (1 = none).
    """

    spec: PlanSpec
    sizes: tuple[SizePlan, ...]
    scaled: float = 1.0

    @property
    def flops(self) -> float:
        """Training FLOPs of every run and branch of the plan."""
        return sum(s.flops for s in self.sizes)

    @property
    def full_grid_flops(self) -> float:
        """FLOPs of the full grid: every (N, D, eta, B) point of the plan trained from scratch to its D."""
        return sum(s.full_grid_flops for s in self.sizes)

    @property
    def n_runs(self) -> int:
        return sum(s.runs for s in self.sizes)

    @property
    def n_records(self) -> int:
        return sum(s.runs * len(s.D_points) for s in self.sizes)

    def summary(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict (costs in FLOPs)."""
        sp = self.spec
        return {
            "target": {"N": sp.target_N, "D": sp.target_D}, "prior": sp.prior, "lr_scale": sp.lr_scale,
            "sizes": [{
                "label": s.size.label, "N_total": s.size.N_total, "N_active": s.size.N_active,
                "arch": s.size.model.arch, "flops_per_token": s.size.flops_per_token,
                "lr_center": s.lr_center, "lrs": list(s.lrs), "batches": list(s.batches),
                "total_tokens": s.total_tokens, "decay_points": list(s.decay_points), "D": list(s.D_points),
                "runs": s.runs, "flops": s.flops, "flops_6N_active": 6.0 * s.size.N_active * s.tokens_per_run
                * s.runs, "full_grid_flops": s.full_grid_flops,
            } for s in self.sizes],
            "runs": self.n_runs, "records": self.n_records, "flops": self.flops,
            "full_grid_runs": self.n_records, "full_grid_flops": self.full_grid_flops,
            "saving": self.full_grid_flops / self.flops, "budget_flops": sp.budget_flops,
            "tokens_scaled_by": self.scaled,
            "extrapolation": {"N_ratio": sp.target_N / max(s.size.N_total for s in self.sizes),
                              "D_ratio": sp.target_D / max(s.total_tokens for s in self.sizes)},
        }

    def table(self) -> str:
        """A text table of the plan and its cost against the full grid."""
        lines = [f"{'size':>12} {'N_total':>9} {'N_active':>9} {'FLOP/tok':>9} {'D_max':>9} {'D points':>26} "
                 f"{'LRs':>20} {'batches':>16} {'runs':>5} {'FLOPs':>9} {'full grid':>9}"]
        for s in self.sizes:
            d_pts = ",".join(f"{d:.3g}" for d in s.D_points)
            lrs = f"{s.lrs[0]:.3g}..{s.lrs[-1]:.3g} x{len(s.lrs)}"
            lines.append(f"{s.size.label:>12} {s.size.N_total:>9.3g} {s.size.N_active:>9.3g} "
                         f"{s.size.flops_per_token:>9.3g} {s.total_tokens:>9.3g} {d_pts:>26} {lrs:>20} "
                         f"{','.join(map(str, s.batches)):>16} {s.runs:>5} {s.flops:>9.3g} {s.full_grid_flops:>9.3g}")
        lines.append(f"plan: {self.n_runs} runs + {self.n_records - self.n_runs} decay branches = {self.n_records} "
                     f"(N, D, eta, B) points for {self.flops:.3g} FLOPs; the full grid trains each point from "
                     f"scratch: {self.n_records} runs, {self.full_grid_flops:.3g} FLOPs "
                     f"({self.full_grid_flops / self.flops:.2f}x the plan)")
        if self.scaled != 1.0:
            lines.append(f"tokens scaled by {self.scaled:.3g} to fit the budget of {self.spec.budget_flops:.3g} FLOPs")
        ext = self.summary()["extrapolation"]
        lines.append(f"target N={self.spec.target_N:.3g}, D={self.spec.target_D:.3g}: "
                     f"{ext['N_ratio']:.3g}x the largest N and {ext['D_ratio']:.3g}x the largest D of the plan")
        return "\n".join(lines)

    def to_toml(self) -> str:
        """The sweep file (`scalinfer.sweep.spec`): one ``[[grid]]`` per size over LR x batch."""
        sp = self.spec
        head = [f"# scalinfer plan: {self.n_runs} runs, {self.n_records} (N, D, eta, B) points, "
                f"{self.flops:.4g} FLOPs (full grid {self.full_grid_flops:.4g}, "
                f"{self.full_grid_flops / self.flops:.2f}x)",
                f"# target N={sp.target_N:.4g}, D={sp.target_D:.4g}; LR grids centred on {sp.prior}"
                + (f" x {sp.lr_scale:g}" if sp.lr_scale != 1 else "") + " at each size's middle D",
                "", "[sweep]", f"name = {_toml(sp.name)}", f"preset = {_toml(sp.preset)}", "",
                "[base]", f"seed = {sp.seed}"] + ([f"eval_tokens = {sp.eval_tokens}"] if sp.eval_tokens else []) + [
                "",
                "[base.optimizer]", f"warmup = {_toml(float(sp.warmup_fraction))}",
                f"decay = {_toml(float(sp.decay_fraction))}", ""]
        for s in self.sizes:
            m = s.size.model
            model = {"d_model": m.d_model, "n_layers": m.n_layers, "n_heads": m.n_heads, "d_ff": m.d_ff,
                     "n_experts": m.n_experts, "top_k": m.top_k,
                     "capacity_factor": "none" if m.capacity_factor is None else m.capacity_factor}
            head += [f"# {s.size.label}: N_total {s.size.N_total}, N_active {s.size.N_active}, "
                     f"{s.size.flops_per_token:.4g} FLOPs/token; D points {list(s.D_points)}; "
                     f"prior eta* {s.lr_center:.3g}",
                     "[[grid]]", f"name = {_toml(s.size.label)}", f"total_tokens = {s.total_tokens}",
                     f"decay_points = {_toml(list(s.decay_points))}",
                     "model = {" + ", ".join(f"{k} = {_toml(v)}" for k, v in model.items()) + "}",
                     "[grid.axes]", f"\"optimizer.lr\" = {_toml(list(s.lrs))}",
                     f"batch_tokens = {_toml(list(s.batches))}", ""]
        return "\n".join(head)


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    raise TrainError(f"cannot write {v!r} to TOML")  # pragma: no cover


def _batches_for(spec: PlanSpec, seq_len: int, b_star: float | None) -> tuple[int, ...]:
    if spec.batches:
        bad = [b for b in spec.batches if b <= 0 or b % seq_len]
        if bad:
            raise TrainError(f"batch sizes {bad} are not positive multiples of seq_len={seq_len} tokens")
        return tuple(sorted(set(spec.batches)))
    if b_star is None:
        raise TrainError(f"prior {spec.prior!r} has no batch law: give the batch sizes (--batches)")
    k0 = max(0, round(math.log2(max(b_star, seq_len) / seq_len)))
    first = max(0, k0 - (spec.batch_count - 1) // 2)
    return tuple(seq_len * 2 ** (first + i) for i in range(spec.batch_count))


def _lcm(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


#: the most tokens a run of a sweep file can have (a TOML integer is a signed 64-bit one)
MAX_TOKENS = 2 ** 63 - 1

#: the most optimizer steps (main run plus decay branches) one planned run may take. The trainer counts steps
#: in an int32 (2^31), but before its first step it resolves every step on the host, in Python:
#: `scalinfer.train.token_plan.make_plan` lists the tokens after each step (0.23 us and 40 bytes a step) and
#: the loop's LR table evaluates the schedule at each (10 us and 70 bytes a step; both measured at 10^6 steps
#: on the 2-core development machine). At 10^7 steps that is about 1 GB and 100 s before training starts, and
#: past it the set-up grows beyond a workstation's; the calibration presets run 250-750 steps.
MAX_RUN_STEPS = 10 ** 7

#: the most optimizer steps of all the plan's runs together: `check_plan_configs` resolves every run as the
#: trainer would (the token plan above, 0.23 us a step), so 10^8 steps keep `plan` under half a minute.
MAX_PLAN_STEPS = 10 ** 8


def _size_plan(spec: PlanSpec, size: SizeSpec, total_target: float, law) -> SizePlan:
    seq_len = size.model.seq_len
    # a float: the prior laws are jitted, and a Python int above 2^31 (a large shape) overflows JAX's int32
    N = float(size.N_total if spec.n_kind == "total" else size.N_active)
    # the batch grid needs B*, which depends on D: centre on the prior at the geometric middle D
    mid_D = total_target * 2 ** (-spec.decay_count / 2)
    _, b_star = law(N, mid_D)
    batches = _batches_for(spec, seq_len, b_star)
    unit = _lcm(batches)
    # compared before any division: an int and a float compare exactly, however large the batches' multiple
    if total_target < unit * 2 ** (spec.decay_count + 2):
        raise TrainError(f"size {size.label}: {total_target:.3g} tokens per run is too few for "
                         f"{spec.decay_count} decay branches at batches up to {max(batches)} tokens "
                         f"(need >= {unit * 2 ** (spec.decay_count + 2):.3g})")
    if total_target > MAX_TOKENS:
        raise TrainError(f"size {size.label}: {total_target:.3g} tokens per run is more than a sweep file holds "
                         f"(TOML integers are 64-bit: at most {MAX_TOKENS:.3g})")
    total = int(total_target) // unit * unit
    forks, ends = aligned_decay_points(total, spec.decay_count, spec.decay_fraction, unit, spec.warmup_fraction)
    D_points = (*ends, total)
    mid = math.exp(np.mean(np.log(D_points)))
    lr_center = law(N, mid)[0] * spec.lr_scale
    lrs = lr_grid(lr_center, spec.lr_count, spec.lr_factor)
    tokens_per_run = total + sum(e - f for f, e in zip(forks, ends))
    n_runs = len(lrs) * len(batches)
    fpt = size.flops_per_token
    return SizePlan(size, lr_center, lrs, batches, total, forks, D_points, tokens_per_run,
                    fpt * tokens_per_run * n_runs, fpt * sum(D_points) * n_runs)


def make_plan(spec: PlanSpec) -> CalibrationPlan:
    """Design the calibration grid of ``spec`` (see the module docstring).

    Raises
    ------
    TrainError : no sizes, a bad grid, a budget the plan cannot fit, a run of more steps than `MAX_RUN_STEPS` or
        a plan of more than `MAX_PLAN_STEPS`.
    """
    if not spec.sizes:
        raise TrainError("a plan needs at least one model size")
    labels = [s.label for s in spec.sizes]
    if len(set(labels)) != len(labels):
        raise TrainError(f"model sizes {labels} repeat a size")
    if not (spec.target_N > 0 and spec.target_D > 0):
        raise TrainError(f"target N and D must be positive (got {spec.target_N}, {spec.target_D})")
    if spec.lr_count < 3:
        raise TrainError(f"lr_count={spec.lr_count}: at least 3 learning rates per size place a valley's vertex")
    if spec.decay_count < 0 or spec.batch_count < 1:
        raise TrainError("decay_count must be >= 0 and batch_count >= 1")
    # lower bounds of the steps, checked before any grid is built: branch k ends near D_max 2^-k on a whole
    # number of the largest batch, so a run takes at least 2^(C_D + 2) steps of its largest batch, and batches
    # spaced by 2 add a factor 2 per batch at the smallest
    if 2 ** min(spec.decay_count + 2, 64) > MAX_RUN_STEPS:
        raise TrainError(f"decay_count={spec.decay_count} (--decays): {spec.decay_count} decay branches need runs "
                         f"of at least 2^{spec.decay_count + 2} steps, more than the {MAX_RUN_STEPS:.0e} a planned "
                         f"run may take (MAX_RUN_STEPS)")
    if not spec.batches and 2 ** min(spec.batch_count + spec.decay_count + 1, 64) > MAX_RUN_STEPS:
        raise TrainError(f"batch_count={spec.batch_count} (--batch-count): {spec.batch_count} batches spaced by 2 "
                         f"with {spec.decay_count} decay branches need runs of at least "
                         f"2^{spec.batch_count + spec.decay_count + 1} steps at the smallest batch, more than the "
                         f"{MAX_RUN_STEPS:.0e} a planned run may take (MAX_RUN_STEPS)")
    n_runs = len(spec.sizes) * spec.lr_count * (len(set(spec.batches)) or spec.batch_count)
    if n_runs * 2 ** (spec.decay_count + 2) > MAX_PLAN_STEPS:
        raise TrainError(f"{len(spec.sizes)} sizes x {spec.lr_count} LRs (--lrs) x "
                         f"{len(set(spec.batches)) or spec.batch_count} batches = {n_runs} runs of at least "
                         f"2^{spec.decay_count + 2} steps each: more than the {MAX_PLAN_STEPS:.0e} steps a plan "
                         f"may take in all (MAX_PLAN_STEPS)")
    if spec.n_kind not in ("total", "active"):
        raise TrainError(f"n_kind must be 'total' or 'active', not {spec.n_kind!r}")
    if spec.preset not in PRESETS:
        raise TrainError(f"unknown preset {spec.preset!r} (one of {', '.join(PRESETS)})")
    if not 0 < spec.decay_fraction < 1 or not 0 <= spec.warmup_fraction < 1 - spec.decay_fraction:
        raise TrainError("need 0 < decay_fraction < 1 and 0 <= warmup_fraction < 1 - decay_fraction")
    law = prior_law(spec.prior)
    ratio = spec.tokens_per_param or spec.target_D / spec.target_N

    def targets(scale: float) -> list[float]:
        return [(spec.tokens if spec.tokens is not None else ratio * s.N_total) * scale for s in spec.sizes]

    sizes = tuple(_size_plan(spec, s, t, law) for s, t in zip(spec.sizes, targets(1.0)))
    plan = CalibrationPlan(spec, sizes)
    budget = spec.budget_flops
    if budget is not None and plan.flops > budget:
        if spec.tokens is not None:
            raise TrainError(f"the plan costs {plan.flops:.3g} FLOPs, over the budget of {budget:.3g}; give fewer "
                             f"tokens, sizes, LRs or batches (or no --tokens, to scale them to the budget)")
        scale = budget / plan.flops
        for _ in range(20):  # rounding to whole batches can overshoot: shrink until it fits
            sizes = tuple(_size_plan(spec, s, t, law) for s, t in zip(spec.sizes, targets(scale)))
            plan = CalibrationPlan(spec, sizes, scale)
            if plan.flops <= budget:
                break
            scale *= 0.97
        else:  # pragma: no cover - the loop converges well before
            raise TrainError(f"cannot fit the plan in {budget:.3g} FLOPs")
    for s in plan.sizes:
        b = min(s.batches)
        if s.tokens_per_run // b > MAX_RUN_STEPS:
            raise TrainError(f"size {s.size.label}: a run of {s.tokens_per_run:.3g} tokens (decay branches "
                             f"included) at a batch of {b} tokens takes {s.tokens_per_run // b:.3g} steps, more "
                             f"than the {MAX_RUN_STEPS:.0e} a planned run may take (MAX_RUN_STEPS): give fewer "
                             f"tokens (--tokens, --tokens-per-param, --budget) or larger batches (--batches)")
    steps = sum(s.steps for s in plan.sizes)
    if steps > MAX_PLAN_STEPS:
        raise TrainError(f"the plan's {plan.n_runs} runs take {steps:.3g} steps in all, more than the "
                         f"{MAX_PLAN_STEPS:.0e} a plan may take (MAX_PLAN_STEPS): give fewer sizes, LRs (--lrs), "
                         f"batches or tokens")
    return plan


def check_plan_configs(plan: CalibrationPlan) -> list[TrainConfig]:
    """Parse the plan's sweep file back into trainer configurations (a plan that cannot run is an error
    at planning time, not hours later)."""
    import tomllib

    from scalinfer.sweep.spec import parse_sweep

    text = plan.to_toml()
    return [r.config for r in parse_sweep(tomllib.loads(text), "<plan>", text).runs]
