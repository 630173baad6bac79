"""Trainer configuration: frozen dataclasses, named presets, TOML files and ``key=value`` overrides.

A run is one `TrainConfig` (model, optimizer, data, and the loop's own fields). Values resolve in
this order: the preset (``--preset NAME``, default ``tiny``), then the TOML file, then the
command-line overrides. The TOML layout mirrors the dataclasses::

    name = "cal-s-lr3e-3"
    total_tokens = 2_000_000
    batch_tokens = 8192
    decay_points = [0.25, 0.5]

    [model]
    d_model = 64
    n_experts = 8
    top_k = 2

    [optimizer]
    lr = 3e-3
    decay_shape = "1-sqrt"

    [optimizer.lr_mult]
    router = 0.5

Overrides use dotted keys (``model.d_model=96``, ``optimizer.lr=1e-3``); a bare key is accepted
when it names exactly one field (``lr=1e-3``). Values are parsed as TOML literals, so ``100`` is an
int, ``0.1`` a float, ``"1-sqrt"`` or 1-sqrt a string, ``[0.5, 0.75]`` a list.

Steps or fractions: ``optimizer.warmup`` and ``optimizer.decay`` are a number of steps when given
as an int and a fraction of the run when given as a float in [0, 1]; ``decay_points`` are token
counts when > 1 and fractions of ``total_tokens`` when <= 1.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import types
import typing
from typing import Any, Literal

from scalinfer.errors import TrainError

__all__ = [
    "ModelConfig", "MupConfig", "LrMultipliers", "OptimizerConfig", "DataConfig", "TrainConfig",
    "PRESETS", "preset", "load_config", "apply_overrides", "config_to_dict", "config_from_dict",
]


@dataclasses.dataclass(frozen=True)
class MupConfig:
    """muP / depth-muP (docs/laws.md section 6). Multipliers are relative to a base shape.

    Attributes
    ----------
    base_d_model : width the hyperparameters were tuned at (m_N = d_model / base_d_model).
    base_n_layers : depth they were tuned at (m_L = n_layers / base_n_layers).
    depth_alpha : residual branches scaled m_L^-depth_alpha and hidden LR times
        m_L^(depth_alpha - 1); 0 turns depth scaling off, 0.5 is depth-muP, 1 CompleteP.
    router : ``"output"`` treats the router like the LM head (constant init, output multiplier
        1/m_N, LR eta); ``"hidden"`` like a hidden matrix (init variance 1/fan_in, LR eta/m_N).
    """

    base_d_model: int = 64
    base_n_layers: int = 2
    depth_alpha: float = 0.0
    router: Literal["output", "hidden"] = "output"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Decoder-only transformer with an MoE MLP (``n_experts=1`` is a dense model).

    Attributes
    ----------
    vocab_size : 256 for bytes; set it to the tokenizer's size for uint16 token files.
    d_model, n_layers, n_heads : width, depth, attention heads.
    head_dim : per-head width (default d_model // n_heads).
    d_ff : hidden width of one expert's SwiGLU MLP (and of the shared expert).
    n_experts, top_k : routed experts and how many each token uses (1 <= top_k <= n_experts).
    shared_expert : add an always-on expert of width d_ff (DeepSeek-MoE style).
    capacity_factor : expert capacity = ceil(capacity_factor * tokens * top_k / n_experts) per
        routing group; tokens over capacity are dropped (reported). ``None``: dropless routing.
    moe_group_tokens : tokens per routing group (capacity is per group); default one sequence.
    router_aux_weight : weight of the load-balancing loss E * sum_e f_e P_e (1 when balanced).
    router_z_weight : weight of the router z-loss mean(logsumexp(router_logits)^2).
    router_jitter : multiplicative uniform noise on router inputs in training (0 = off).
    router_renormalize : divide the top-k gate weights by their sum (k > 1 only: with k = 1 the
        Switch form, the softmax probability itself, keeps a gradient for the router).
    qk_norm : RMSNorm on queries and keys per head.
    rope_theta : rotary position base.
    seq_len : tokens per sequence.
    init_std_embed : embedding init std (constant in width, as muP wants).
    dtype : compute dtype of matmuls; the router and the loss are always float32.
    mup : muP multipliers, or None for standard parametrization.
    """

    vocab_size: int = 256
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    head_dim: int | None = None
    d_ff: int = 64
    n_experts: int = 8
    top_k: int = 2
    shared_expert: bool = False
    capacity_factor: float | None = 1.25
    moe_group_tokens: int | None = None
    router_aux_weight: float = 0.01
    router_z_weight: float = 1e-3
    router_jitter: float = 0.0
    router_renormalize: bool = True
    qk_norm: bool = False
    rope_theta: float = 10_000.0
    seq_len: int = 128
    init_std_embed: float = 1.0
    dtype: Literal["float32", "bfloat16"] = "float32"
    mup: MupConfig | None = None

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 1

    @property
    def arch(self) -> str:
        """Short label of the architecture family, e.g. ``moe-e8k2`` or ``dense``."""
        if not self.is_moe:
            return "dense"
        return f"moe-e{self.n_experts}k{self.top_k}" + ("s" if self.shared_expert else "")


@dataclasses.dataclass(frozen=True)
class LrMultipliers:
    """Per-module learning-rate multipliers (applied on top of muP's)."""

    embedding: float = 1.0
    attention: float = 1.0
    experts: float = 1.0
    router: float = 1.0
    lm_head: float = 1.0
    norms: float = 1.0


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with a warmup-stable-decay schedule.

    Attributes
    ----------
    lr : peak learning rate.
    warmup, decay : int = steps, float in [0, 1] = fraction of the run (the stable phase is the
        rest).
    decay_shape : ``linear``, ``cosine`` or ``1-sqrt``.
    final_fraction : the LR at the end is ``final_fraction * lr``.
    b1, b2, eps : Adam moments.
    weight_decay : decoupled weight decay (AdamW's lambda; applied to matrices, not norm gains).
    weight_decay_timescale : if set, lambda is chosen so that the AdamW timescale 1/(eta lambda)
        is this fraction of the run's steps in every module group (docs/laws.md section 6), and
        ``weight_decay`` is ignored.
    clip_grad_norm : global gradient-norm clipping (None = off).
    lr_mult : per-module multipliers.
    """

    lr: float = 3e-3
    warmup: int | float = 0.05
    decay: int | float = 0.2
    decay_shape: Literal["linear", "cosine", "1-sqrt"] = "linear"
    final_fraction: float = 0.0
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    weight_decay_timescale: float | None = None
    clip_grad_norm: float | None = 1.0
    lr_mult: LrMultipliers = LrMultipliers()


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where tokens come from (see `scalinfer.train.data`).

    Attributes
    ----------
    source : ``stdlib`` (the Python standard library's *.py files, no download), ``text`` (byte
        tokens from the files or globs in ``paths``), ``bin`` (nanoGPT layout: ``paths[0]`` is a
        folder with ``train.bin`` and ``val.bin`` of uint16 tokens).
    paths : files, globs or a folder, per ``source``.
    eval_fraction : share of files (or, with fewer than 10 files, of bytes) held out for
        evaluation in ``stdlib``/``text`` mode. The split does not depend on the seed.
    cache_dir : where the concatenated bytes are cached as .npy (default
        ``$XDG_CACHE_HOME/scalinfer`` or ``~/.cache/scalinfer``).
    """

    source: Literal["stdlib", "text", "bin"] = "stdlib"
    paths: tuple[str, ...] = ()
    eval_fraction: float = 0.02
    cache_dir: str | None = None


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run.

    Attributes
    ----------
    name : label of the run; the run id is ``name`` plus a hash of the config.
    group : the run table's ``group`` (default: the architecture label, e.g. ``moe-e8k2``).
    seed : initialization and data order.
    total_tokens : tokens to train on (D); steps = total_tokens // batch_tokens.
    batch_tokens : global batch in tokens (a multiple of ``micro_batch_tokens``).
    micro_batch_tokens : tokens per forward/backward pass; batch_tokens / micro_batch_tokens
        micro-batches are accumulated per step (default: the whole batch in one pass).
    schedule_file : a ``scalinfer.schedule/1`` JSON file (`scalinfer.schedules.file`): the
        batch grows with tokens seen, and its ``lr`` section, if any, replaces the optimizer's
        peak, warmup, decay and ``total_tokens``.
    decay_points : stable-phase points (tokens > 1, fractions <= 1) from which a decay branch is
        forked; each branch decays like the main run (its decay is ``optimizer.decay`` of the
        branch's length) and writes its own record.
    eval_every, eval_tokens : held-out evaluation period (steps; 0 = only at the end) and size.
    checkpoint_every : steps between checkpoints (0 = only at the end and at stop).
    keep_checkpoints : how many periodic checkpoints to keep.
    stop_after_steps : stop (with a checkpoint) after this many steps of the run, as if killed;
        rerunning with the same ``out_dir`` resumes.
    log_every : steps between metrics lines (1 = every step).
    runs_table : run table to append records to (relative to ``out_dir``).
    mesh_expert : size of the mesh's ``expert`` axis (the ``data`` axis takes the remaining
        devices).
    multihost : join a multi-process job (``jax.distributed.initialize``, `scalinfer.runtime.configure`) before
        touching devices: one process per host (or per accelerator), each running the same command.
    coordinator_address, num_processes, process_id : the job's ``host:port`` of process 0, its number of
        processes and this process's index (0 writes the files); None takes them from
        ``JAX_COORDINATOR_ADDRESS`` or the cluster's environment (Slurm, Open MPI, Kubernetes, Cloud TPU).
    progress : tqdm bar on stderr (None = only when stderr is a terminal).
    diagnostics_every : steps between stability diagnostics (`scalinfer.train.diagnostics`: update
        sizes, parameter and activation RMS, max attention logit, router entropy and load, written
        to ``diagnostics.jsonl``); 0 = off.
    """

    name: str = "run"
    group: str | None = None
    seed: int = 0
    total_tokens: int = 1_000_000
    batch_tokens: int = 8192
    micro_batch_tokens: int | None = None
    schedule_file: str | None = None
    decay_points: tuple[float, ...] = ()
    eval_every: int = 0
    eval_tokens: int = 65_536
    checkpoint_every: int = 200
    keep_checkpoints: int = 2
    stop_after_steps: int | None = None
    log_every: int = 1
    runs_table: str = "runs.jsonl"
    mesh_expert: int = 1
    multihost: bool = False
    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    progress: bool | None = None
    diagnostics_every: int = 0
    model: ModelConfig = ModelConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    data: DataConfig = DataConfig()

    @property
    def micro_tokens(self) -> int:
        return self.micro_batch_tokens or self.batch_tokens


# ------------------------------------------------------------------------------------------
# Presets. Calibration sizes span ~0.1M-1M non-embedding parameters (N_total for MoE); each MoE
# preset has a dense counterpart (``-dense``) with the same active parameters and FLOPs.
# ------------------------------------------------------------------------------------------


def _moe(d: int, layers: int, seq_len: int = 128) -> ModelConfig:
    # Heads of 64 (one head below d=128): on CPU the L x L softmax costs per head, not per FLOP,
    # and head size 32 halves the attention throughput.
    return ModelConfig(d_model=d, n_layers=layers, n_heads=max(1, d // 64), d_ff=d, n_experts=8, top_k=2,
                       seq_len=seq_len)


def _dense(m: ModelConfig) -> ModelConfig:
    return dataclasses.replace(m, n_experts=1, top_k=1, d_ff=m.d_ff * m.top_k, capacity_factor=None)


_SIZES = {
    # name: (model, total_tokens, batch_tokens)
    "tiny": (ModelConfig(d_model=32, n_layers=2, n_heads=2, d_ff=32, n_experts=4, top_k=2, seq_len=64),
             200_000, 2048),
    "cal-xs": (_moe(64, 2), 2_000_000, 8192),     # N_total 0.23M, N_active 0.08M
    "cal-s": (_moe(64, 3), 4_000_000, 8192),      # 0.34M, 0.12M
    "cal-m": (_moe(96, 3), 8_000_000, 16384),     # 0.77M, 0.28M
    "cal-l": (_moe(128, 2), 12_000_000, 16384),   # 0.92M, 0.33M
}

PRESETS: dict[str, TrainConfig] = {}
for _name, (_model, _tokens, _batch) in _SIZES.items():
    PRESETS[_name] = TrainConfig(name=_name, model=_model, total_tokens=_tokens, batch_tokens=_batch)
    PRESETS[_name + "-dense"] = TrainConfig(name=_name + "-dense", model=_dense(_model),
                                            total_tokens=_tokens, batch_tokens=_batch)


def preset(name: str) -> TrainConfig:
    """The named preset (`PRESETS`), or a `TrainError` listing the names."""
    if name not in PRESETS:
        raise TrainError(f"unknown preset {name!r} (one of {', '.join(PRESETS)})")
    return PRESETS[name]


# ------------------------------------------------------------------------------------------
# dict <-> dataclass, with type checks that name the offending key
# ------------------------------------------------------------------------------------------

_NESTED = {"model": ModelConfig, "optimizer": OptimizerConfig, "data": DataConfig,
           "mup": MupConfig, "lr_mult": LrMultipliers}


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """A plain, JSON-ready dict of a config (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it converted (list -> tuple...)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        if type(value) in args:  # int | float keeps 1 (one step) apart from 1.0 (the whole run)
            return value
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except TrainError as e:
                errors.append(str(e))
        raise TrainError(errors[0] if len(errors) == 1 else
                         f"{where}: {value!r} is not a valid value (expected {_type_name(tp)})")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise TrainError(f"{where}: {value!r} is not one of "
                             f"{', '.join(repr(a) for a in typing.get_args(tp))}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise TrainError(f"{where}: expected a list, got {value!r}")
        (item,) = typing.get_args(tp)[:1]
        return tuple(_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise TrainError(f"{where}: expected a table of {tp.__name__} fields, got {value!r}")
        return _from_dict(tp, value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise TrainError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
                return int(value)  # 2e6 in TOML is a float; an integral float > 1 is a count
            raise TrainError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TrainError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise TrainError(f"{where}: expected a string, got {value!r}")
        return value
    raise TrainError(f"{where}: unsupported field type {tp!r}")  # pragma: no cover


def _type_name(tp: Any) -> str:
    return str(tp).replace("typing.", "")


def _from_dict(cls: type, d: dict[str, Any], where: str = "config") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise TrainError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(repr(k) for k in unknown)} (known: {', '.join(sorted(names))})")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where != "config" else k) for k, v in d.items()}
    return cls(**kwargs)


def config_from_dict(d: dict[str, Any], base: TrainConfig | None = None, where: str = "config") -> TrainConfig:
    """Merge a nested dict (as in a TOML file) into ``base`` (default `TrainConfig()`)."""
    merged = _deep_merge(config_to_dict(base or TrainConfig()), d)
    cfg = _from_dict(TrainConfig, merged, where)
    check(cfg)
    return cfg


def _deep_merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        elif isinstance(v, dict) and out.get(k) is None and k in _NESTED:
            out[k] = _deep_merge(config_to_dict(_NESTED[k]()), v)
        else:
            out[k] = v
    return out


def _all_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        sub = [a for a in (typing.get_args(tp) or (tp,)) if dataclasses.is_dataclass(a)]
        if sub:
            keys += _all_keys(sub[0], f"{prefix}{f.name}.")
        keys.append(prefix + f.name)
    return keys


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        if text.lower() in ("none", "null"):
            return None
        return text  # a bare word is a string (decay_shape=1-sqrt)


def apply_overrides(cfg: TrainConfig, overrides: list[str] | tuple[str, ...]) -> TrainConfig:
    """Apply ``key=value`` strings (dotted keys; a bare key must name exactly one field)."""
    if not overrides:
        return cfg
    keys = _all_keys(TrainConfig)
    patch: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise TrainError(f"override {item!r} is not of the form key=value")
        key, text = (s.strip() for s in item.split("=", 1))
        if key not in keys:
            matches = [k for k in keys if k.endswith("." + key)]
            if len(matches) != 1:
                raise TrainError(
                    f"override {item!r}: " + (f"{key!r} is ambiguous ({', '.join(matches)})" if matches
                                              else f"no config field {key!r}"))
            key = matches[0]
        node = patch
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = _parse_value(text)
    return config_from_dict(patch, cfg, where="override")


def load_config(path: str | None = None, overrides: list[str] | tuple[str, ...] = (),
                preset_name: str | None = None) -> TrainConfig:
    """Preset, then TOML file, then overrides (see module docstring)."""
    cfg = preset(preset_name or "tiny")
    if path is not None:
        try:
            with open(path, "rb") as f:
                d = tomllib.load(f)
        except FileNotFoundError:
            raise TrainError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise TrainError(f"config file {path} is not valid TOML: {e}") from None
        if "preset" in d:
            p = d.pop("preset")
            if preset_name is None:
                cfg = preset(p)
        cfg = config_from_dict(d, cfg, where=str(path))
    return apply_overrides(cfg, overrides)


def _positive(where: str, v: float | None, allow_none: bool = False) -> None:
    if v is None and allow_none:
        return
    if v is None or not v > 0:
        raise TrainError(f"{where} must be > 0 (got {v!r})")


def check(cfg: TrainConfig) -> None:
    """Consistency checks that do not need data or devices (each error names the field)."""
    m, o = cfg.model, cfg.optimizer
    for k in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "n_experts", "top_k", "seq_len"):
        _positive(f"model.{k}", getattr(m, k))
    if m.head_dim is None and m.d_model % m.n_heads:
        raise TrainError(f"model.d_model={m.d_model} is not divisible by model.n_heads={m.n_heads} "
                         f"(or set model.head_dim)")
    if m.d_head % 2:
        raise TrainError(f"model head dimension {m.d_head} must be even (rotary positions)")
    if not 1 <= m.top_k <= m.n_experts:
        raise TrainError(f"model.top_k={m.top_k} must be between 1 and model.n_experts={m.n_experts}")
    _positive("model.capacity_factor", m.capacity_factor, allow_none=True)
    _positive("model.moe_group_tokens", m.moe_group_tokens, allow_none=True)
    if m.mup is not None:
        _positive("model.mup.base_d_model", m.mup.base_d_model)
        _positive("model.mup.base_n_layers", m.mup.base_n_layers)
    _positive("optimizer.lr", o.lr)
    for k in ("warmup", "decay"):
        v = getattr(o, k)
        if v < 0 or (isinstance(v, float) and v > 1):
            raise TrainError(f"optimizer.{k}={v!r}: give steps as an int or a fraction in [0, 1]")
    if isinstance(o.warmup, float) and isinstance(o.decay, float) and o.warmup + o.decay > 1:
        raise TrainError(f"optimizer.warmup + optimizer.decay = {o.warmup + o.decay} > 1")
    if not 0 <= o.final_fraction <= 1:
        raise TrainError(f"optimizer.final_fraction={o.final_fraction} must be in [0, 1]")
    _positive("optimizer.weight_decay_timescale", o.weight_decay_timescale, allow_none=True)
    if o.weight_decay < 0:
        raise TrainError(f"optimizer.weight_decay={o.weight_decay} must be >= 0")
    _positive("total_tokens", cfg.total_tokens)
    _positive("batch_tokens", cfg.batch_tokens)
    _positive("micro_batch_tokens", cfg.micro_batch_tokens, allow_none=True)
    _positive("eval_tokens", cfg.eval_tokens)
    _positive("mesh_expert", cfg.mesh_expert)
    _positive("log_every", cfg.log_every)
    _positive("keep_checkpoints", cfg.keep_checkpoints)
    _positive("stop_after_steps", cfg.stop_after_steps, allow_none=True)
    _positive("num_processes", cfg.num_processes, allow_none=True)
    if cfg.process_id is not None and not 0 <= cfg.process_id < (cfg.num_processes or cfg.process_id + 1):
        raise TrainError(f"process_id={cfg.process_id} must be in [0, num_processes={cfg.num_processes})")
    if not cfg.multihost and (cfg.coordinator_address, cfg.num_processes, cfg.process_id) != (None, None, None):
        raise TrainError("coordinator_address, num_processes and process_id need multihost=true")
    for k in ("eval_every", "checkpoint_every", "diagnostics_every"):
        if getattr(cfg, k) < 0:
            raise TrainError(f"{k}={getattr(cfg, k)} must be >= 0")
    if cfg.micro_tokens % m.seq_len:
        raise TrainError(f"micro_batch_tokens={cfg.micro_tokens} is not a multiple of "
                         f"model.seq_len={m.seq_len}")
    if cfg.batch_tokens % cfg.micro_tokens:
        raise TrainError(f"batch_tokens={cfg.batch_tokens} is not a multiple of "
                         f"micro_batch_tokens={cfg.micro_tokens}")
    for i, p in enumerate(cfg.decay_points):
        if not p > 0:
            raise TrainError(f"decay_points[{i}]={p!r} must be > 0 (tokens, or a fraction <= 1)")
    if not 0 < cfg.data.eval_fraction < 1:
        raise TrainError(f"data.eval_fraction={cfg.data.eval_fraction} must be in (0, 1)")
    if cfg.data.source in ("text", "bin") and not cfg.data.paths:
        raise TrainError(f"data.source={cfg.data.source!r} needs data.paths")
