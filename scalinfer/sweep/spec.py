"""The sweep file: many trainer configurations from one TOML file (`parse_sweep`, `load_sweep`).

A sweep file names a base configuration and the runs, either one by one (``[[run]]``) or as the cartesian
product of a few axes (``[[grid]]``)::

    [sweep]
    name = "calibration"
    preset = "cal-xs"              # optional: the defaults every run starts from (`scalinfer.train.PRESETS`)

    [base]                         # TrainConfig fields shared by every run (as in a `scalinfer train` file)
    total_tokens = 327_680
    decay_points = [32_768, 65_536, 131_072]
    [base.optimizer]
    decay = 0.2

    [[grid]]                       # one run per combination of the axes' values
    name = "moe-d32l2"             # run names: moe-d32l2-lr0.01-b1024 ...
    model = {d_model = 32, n_layers = 2, n_heads = 2, d_ff = 32}
    [grid.axes]
    "optimizer.lr" = [0.003, 0.01, 0.03]
    batch_tokens = [1024, 2048]

    [[run]]                        # a single run: TrainConfig fields, ``name`` required
    name = "dense-d48l2"
    model = {d_model = 48, n_experts = 1, top_k = 1, d_ff = 96, capacity_factor = "none"}

Values resolve preset -> ``[base]`` -> the grid's or run's own fields -> the axis values. Every run gets a
unique name; its run id is the trainer's (`scalinfer.train.loop.run_id_of`: the name plus a hash of the
configuration), so an edited configuration is a new run, never a silent mix of two. Bad input is a one-line
`TrainError` naming the file, the entry and the key.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import tomllib
from pathlib import Path
from typing import Any

from scalinfer.errors import TrainError
from scalinfer.train.config import TrainConfig, config_from_dict, preset

__all__ = ["SweepRun", "Sweep", "parse_sweep", "load_sweep", "expand_sweep"]

RUNS = "runs"  # the sweep folder's subfolder of run folders
_AXIS_LABELS = {"optimizer.lr": "lr", "batch_tokens": "b", "seed": "s", "total_tokens": "D"}


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One configuration of a sweep.

    Attributes
    ----------
    index : position in the sweep (0-based; what ``--index`` takes).
    name : the run's unique name (``TrainConfig.name``).
    run_id : the trainer's id of the main run (name plus configuration hash); its decay branches are
        ``<run_id>-<branch>``.
    config : the resolved trainer configuration.
    expected_ids : run ids of every record the run writes (main run first, then the decay branches).
    """

    index: int
    name: str
    run_id: str
    config: TrainConfig
    expected_ids: tuple[str, ...]

    def directory(self, out: str | os.PathLike) -> Path:
        """The run's own folder (the trainer's out_dir) in sweep folder ``out``."""
        return Path(out) / RUNS / self.run_id


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A parsed sweep file: its name, source, text and runs in order."""

    name: str
    source: str
    text: str
    runs: tuple[SweepRun, ...]

    def find(self, key: str) -> SweepRun:
        """The run whose run id or name is ``key``."""
        for r in self.runs:
            if key in (r.run_id, r.name):
                return r
        raise TrainError(f"{self.source}: no run with id or name {key!r} "
                         f"(the sweep has {len(self.runs)} runs, e.g. {self.runs[0].name!r})")



def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    node: dict[str, Any] = {}
    root = node
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return root


def _label(key: str, value: Any) -> str:
    short = _AXIS_LABELS.get(key, key.rsplit(".", 1)[-1] + "=")
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return short + text


def _none_strings(d: Any) -> Any:
    """TOML has no null: the string "none" stands for None (``capacity_factor = "none"``)."""
    if isinstance(d, dict):
        return {k: _none_strings(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_none_strings(v) for v in d]
    return None if isinstance(d, str) and d.lower() in ("none", "null") else d


def parse_sweep(data: dict[str, Any], source: str = "<sweep>", text: str = "") -> Sweep:
    """Build a `Sweep` from the dict of a sweep file (see the module docstring).

    Raises
    ------
    TrainError : one line naming the file, the entry (``grid[i]`` / ``run[i]``) and the key at fault.
    """
    from scalinfer.train.loop import run_id_of
    from scalinfer.train.token_plan import make_plan

    unknown = sorted(set(data) - {"sweep", "base", "grid", "run"})
    if unknown:
        raise TrainError(f"{source}: unknown top-level table(s) {', '.join(map(repr, unknown))} "
                         f"(a sweep file has [sweep], [base], [[grid]] and [[run]])")
    head = data.get("sweep", {})
    if not isinstance(head, dict):
        raise TrainError(f"{source}: [sweep] must be a table")
    extra = sorted(set(head) - {"name", "preset", "description"})
    if extra:
        raise TrainError(f"{source}: [sweep] has unknown key(s) {', '.join(map(repr, extra))} "
                         f"(known: name, preset, description)")
    start = preset(head["preset"]) if "preset" in head else TrainConfig()
    base = _none_strings(data.get("base", {}))
    if not isinstance(base, dict):
        raise TrainError(f"{source}: [base] must be a table of TrainConfig fields")

    entries: list[tuple[str, dict[str, Any]]] = []
    for kind in ("grid", "run"):
        items = data.get(kind, [])
        if not isinstance(items, list):
            raise TrainError(f"{source}: {kind} must be an array of tables ([[{kind}]])")
        for i, item in enumerate(items):
            where = f"{source}: {kind}[{i}]"
            if not isinstance(item, dict):
                raise TrainError(f"{where} must be a table")
            item = _none_strings(item)
            if "name" not in item or not isinstance(item["name"], str) or not item["name"]:
                raise TrainError(f"{where} needs a name (a non-empty string)")
            where = f"{where} ({item['name']})"
            fields = {k: v for k, v in item.items() if k != "axes"}
            axes = item.get("axes", {})
            if kind == "run" and "axes" in item:
                raise TrainError(f"{where}: a [[run]] has no axes (use [[grid]])")
            if not isinstance(axes, dict):
                raise TrainError(f"{where}: axes must be a table of dotted key = [values]")
            for key, values in axes.items():
                if not isinstance(values, list) or not values:
                    raise TrainError(f"{where}: axes.{key} must be a non-empty list of values")
            keys = list(axes)
            for combo in itertools.product(*(axes[k] for k in keys)):
                patch = dict(fields)
                for k, v in zip(keys, combo):
                    patch = _merge(patch, _nest(k, v))
                patch["name"] = "-".join([item["name"], *(_label(k, v) for k, v in zip(keys, combo))])
                entries.append((where, patch))
    if not entries:
        raise TrainError(f"{source}: the sweep has no runs (add [[grid]] or [[run]] tables)")

    runs, seen = [], {}
    for index, (where, patch) in enumerate(entries):
        cfg = config_from_dict(_merge(base, patch), start, where=where)
        if cfg.name in seen:
            raise TrainError(f"{where}: run name {cfg.name!r} is used twice (also in {seen[cfg.name]})")
        seen[cfg.name] = where
        plan = make_plan(cfg)
        rid = run_id_of(cfg)
        runs.append(SweepRun(index, cfg.name, rid, cfg, (rid, *(f"{rid}-{b.name}" for b in plan.branches))))
    return Sweep(str(head.get("name", Path(source).stem)), source, text, tuple(runs))


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read and parse a sweep TOML file (`parse_sweep`)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise TrainError(f"sweep file {path} does not exist") from None
    except (UnicodeDecodeError, IsADirectoryError):
        raise TrainError(f"sweep file {path} is not a text file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TrainError(f"sweep file {path} is not valid TOML: {e}") from None
    return parse_sweep(data, str(path), text)


def expand_sweep(path: str | os.PathLike) -> list[TrainConfig]:
    """The resolved configurations of a sweep file, in order."""
    return [r.config for r in load_sweep(path).runs]
