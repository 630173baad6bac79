"""End to end on the project's own calibration runs: fit on the smaller sizes, predict the largest, check.

The loop the Fitting paradigm promises (docs/laws.md section 4): calibration runs at small scale -> one posterior ->
eta* and B* at a larger model. Here the "larger model" is the largest MoE size of `data/calibration/` (the
CPU sweep `scalinfer sweep data/calibration/sweep.toml` produced), held out of the fit:

1. fit the ``surface`` model (NUTS) to every MoE run of the other sizes (all LRs, batches, decay branches,
   diverged runs censored);
2. predict lr_opt and batch_opt (the loss-optimal batch at fixed N, D) with 90% intervals at the held-out
   size, at each of its D points;
3. compare with that size's empirical optimum from the sweep: the best (LR, batch) of its grid, refined by a
   parabola in log LR through the best run and its neighbours (and in log batch across the batches);
   ``covered`` says whether the interval contains the refined optimum (for a batch optimum at the edge of the
   grid, whether the interval reaches the half-open range beyond that edge);
4. regret: train the predicted setting (median eta*, median B* rounded to whole sequences) at the held-out
   size and each D with the sweep's own configuration, and compare its loss with the best loss of the grid
   (negative regret: the prediction beat every grid point). ``--no-train`` uses the grid run nearest to the
   prediction instead. A control re-trains the grid's best setting at the largest D with the same code as
   the predicted settings, so code-version and run-to-run noise is visible next to the regret.

    nice -n 10 .venv/bin/python benchmarks/end_to_end.py [--runs data/calibration/runs.jsonl]
        [--chains 4 --warmup 500 --samples 500] [--out out/calibration_checks] [--no-train]

Trainings and the fit are cached in ``--out`` (a re-run skips what is done). Prints a table, then as its
last line one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "data" / "calibration" / "runs.jsonl"
CONFIGS = ROOT / "data" / "calibration" / "runs"
OUT = ROOT / "out" / "calibration_checks"  # trainings and fits, shared with fitting_vs_transfer.py
CI = 0.9


# ---- the calibration table -------------------------------------------------------------------------------
def load_table(path: Path, where: str = "arch != 'dense'") -> tuple[Any, pd.DataFrame]:
    """The run table (as `scalinfer.load_runs` reads it) and its DataFrame."""
    from scalinfer.runs import load_runs

    runs = load_runs(path, where=where)
    return runs, runs.df


def sizes(df: pd.DataFrame) -> list[float]:
    return sorted(float(n) for n in df["N"].unique())


def parabola_vertex(x: np.ndarray, y: np.ndarray) -> tuple[float, str | None]:
    """Vertex of the parabola through the minimum of y(x) and its two neighbours, and ``None``; or the grid
    end and ``"below"``/``"above"`` when the minimum is at an end (the optimum lies beyond the grid)."""
    order = np.argsort(x)
    x, y = x[order], y[order]
    i = int(np.argmin(y))
    if len(x) == 1:
        return float(x[0]), None
    if i == 0:
        return float(x[0]), "below"
    if i == len(x) - 1:
        return float(x[-1]), "above"
    a, b, _ = np.polyfit(x[i - 1:i + 2], y[i - 1:i + 2], 2)
    if a <= 0:
        return float(x[i]), None
    return float(np.clip(-b / (2 * a), x[i - 1], x[i + 1])), None


def empirical_optimum(runs: pd.DataFrame) -> dict[str, Any]:
    """The best run of one (N, D) setting's grid and the refined eta* (at the best batch) and B*.

    Diverged runs count as worse than any converged run.
    """
    ok = runs[~runs["diverged"].astype(bool) & np.isfinite(runs["loss"].astype(float))]
    best = ok.loc[ok["loss"].idxmin()]
    at_b = ok[ok["batch_tokens"] == best["batch_tokens"]]
    log_lr, lr_edge = parabola_vertex(np.log(at_b["lr"].to_numpy(float)), at_b["loss"].to_numpy(float))
    per_b = ok.groupby("batch_tokens")["loss"].min()
    log_b, b_edge = parabola_vertex(np.log(per_b.index.to_numpy(float)), per_b.to_numpy(float))
    return {"lr_grid": float(best["lr"]), "batch_grid": float(best["batch_tokens"]), "loss": float(best["loss"]),
            "lr_star": math.exp(log_lr), "lr_edge": lr_edge, "batch_star": math.exp(log_b), "batch_edge": b_edge,
            "lr_step": float(np.exp(np.median(np.diff(np.log(np.sort(at_b["lr"].unique())))))),
            "batch_step": float(np.exp(np.median(np.diff(np.log(per_b.index.to_numpy(float))))))
            if len(per_b) > 1 else 2.0}


def covered(lo: float, hi: float, value: float, edge: str | None, step: float) -> bool:
    """Whether [lo, hi] contains the empirical optimum; an optimum at a grid edge is only known to lie
    beyond the midpoint between the edge and the next (missing) grid value, so the interval must reach
    past that point."""
    if edge == "below":
        return lo <= value * math.sqrt(step)
    if edge == "above":
        return hi >= value / math.sqrt(step)
    return lo <= value <= hi


# ---- the fit ---------------------------------------------------------------------------------------------
def holdout_fit(runs, largest: float, out: Path, chains: int, warmup: int, samples: int, seed: int):
    """The surface fit to every run with N < ``largest``, cached in ``out`` by the table's content, the
    settings and the model (its ``version`` and the source of its module, so an edited model is refit)."""
    from scalinfer.inference import fit, load_fit
    from scalinfer.models import get_model

    train = runs.where(f"N < {float(largest)!r}")
    model = get_model("surface")
    source = Path(inspect.getsourcefile(type(model))).read_bytes()
    key = hashlib.sha256(pd.util.hash_pandas_object(train.df[["N", "D", "lr", "batch_tokens", "loss"]],
                                                    index=False).to_numpy().tobytes()
                         + f"{chains},{warmup},{samples},{seed},{model.version}".encode()
                         + hashlib.sha256(source).digest()).hexdigest()[:12]
    path = out / f"surface-holdout-{key}.nc"
    if path.exists():
        return load_fit(path), len(train), True
    f = fit(train, model="surface", chains=chains, warmup=warmup, samples=samples, seed=seed)
    f.save(path)
    return f, len(train), False


# ---- training settings at the held-out size ---------------------------------------------------------------
def base_config(df: pd.DataFrame, N: float, configs: Path = CONFIGS) -> dict[str, Any]:
    """The trainer configuration of a calibration run at size N (its config.json): the held-out runs share
    everything but LR, batch and tokens."""
    main = df[(df["N"] == N) & (df["branch_of"].isna() if "branch_of" in df else True)]
    for run_id in main["run_id"]:
        path = configs / run_id / "config.json"
        if path.exists():
            return json.loads(path.read_text())
    raise SystemExit(f"{configs}: no configuration of a calibration run with N={N:g}")


def train_settings(base: dict[str, Any], settings: list[dict[str, Any]], out: Path, label: str) -> list[dict]:
    """Train each setting ``{name, lr, batch_tokens, total_tokens[, model...]}`` on top of ``base`` with the
    sweep machinery (resumable, cached in ``out``); returns their main-run records in order."""
    from scalinfer.sweep import parse_sweep, run_sweep

    runs = []
    for s in settings:
        cfg = json.loads(json.dumps(base))
        for k in ("progress", "runs_table"):
            cfg.pop(k, None)
        cfg.update(name=s["name"], total_tokens=int(s["total_tokens"]), batch_tokens=int(s["batch_tokens"]),
                   decay_points=[])
        cfg["optimizer"]["lr"] = float(s["lr"])
        if "model" in s:
            cfg["model"].update(s["model"])
        runs.append(cfg)
    sweep_path = out / f"{label}.toml"
    sweep_path.parent.mkdir(parents=True, exist_ok=True)
    sweep_path.write_text(_toml_sweep(label, runs))
    res = run_sweep(sweep_path, out / label, workers=1, delete_checkpoints=True)
    if not res.complete:
        raise SystemExit(f"{label}: training did not finish ({res.counts()}); rerun to resume")
    sweep = parse_sweep(__import__("tomllib").loads(sweep_path.read_text()), str(sweep_path))
    table = {json.loads(line)["run_id"]: json.loads(line) for line in res.table.read_text().splitlines()}
    return [table[r.run_id] for r in sweep.runs]


def _toml_sweep(name: str, runs: list[dict[str, Any]]) -> str:
    from scalinfer.sweep.plan import _toml

    def table(prefix: str, d: dict[str, Any]) -> list[str]:
        flat = [f"{k} = {_toml('none' if v is None else v)}" for k, v in d.items() if not isinstance(v, dict)]
        nested = [line for k, v in d.items() if isinstance(v, dict) for line in table(f"{prefix}.{k}", v)]
        return [f"[{prefix}]", *flat, *nested]

    lines = ["[sweep]", f"name = {_toml(name)}", ""]
    for r in runs:
        lines += ["[[run]]", *[f"{k} = {_toml('none' if v is None else v)}" for k, v in r.items()
                               if not isinstance(v, dict)]]
        for k, v in r.items():
            if isinstance(v, dict):
                lines += table(f"run.{k}", v)
        lines.append("")
    return "\n".join(lines)


def train_control(df: pd.DataFrame, N: float, out: Path) -> dict[str, Any]:
    """Re-train the grid's best setting of size N at its largest D with today's code (the control of the
    trained comparisons: same code as them, so the gap to the sweep's own loss is the noise floor)."""
    held = df[df["N"] == N]
    D = held["D"].max()
    emp = empirical_optimum(held[held["D"] == D])
    rec = train_settings(base_config(df, N), [{"name": "grid-best", "lr": emp["lr_grid"],
                                               "batch_tokens": int(emp["batch_grid"]), "total_tokens": int(D)}],
                         out, f"control-N{int(N)}")[0]
    return {"lr": emp["lr_grid"], "batch_tokens": int(emp["batch_grid"]), "D": int(rec["D"]),
            "loss": float("nan") if rec["diverged"] else float(rec["loss"]), "sweep_loss": emp["loss"]}


def round_batch(batch: float, seq_len: int, lo: int | None = None) -> int:
    """A batch in tokens rounded (in log space) to whole sequences, at least one sequence."""
    k = max(1, round(batch / seq_len))
    return max(k * seq_len, lo or seq_len)


# ---- main ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=RUNS)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-train", action="store_true", help="regret from the nearest grid run, no training")
    args = p.parse_args(argv)
    import scalinfer.runtime

    scalinfer.runtime.configure(args.chains)  # as the CLI (the sweeps train in worker processes of their own)
    t0 = time.perf_counter()
    runs, df = load_table(args.runs)
    ns = sizes(df)
    if len(ns) < 3:
        raise SystemExit(f"{args.runs}: need >= 3 MoE sizes (found {len(ns)})")
    largest = ns[-1]
    args.out.mkdir(parents=True, exist_ok=True)
    f, n_fit, cached = holdout_fit(runs, largest, args.out, args.chains, args.warmup, args.samples, args.seed)
    s = f.summary_dict()
    held = df[df["N"] == largest]
    Ds = sorted(held["D"].unique())
    rows = []
    for D in Ds:
        pred = f.predict(N=largest, D=float(D), ci=CI)
        (lr_m, lr_lo, lr_hi) = (float(v) for v in pred.interval("lr_opt"))
        (b_m, b_lo, b_hi) = (float(v) for v in pred.interval("batch_opt"))
        (l_m, l_lo, l_hi) = (float(v) for v in pred.interval("loss_opt"))
        emp = empirical_optimum(held[held["D"] == D])
        rows.append({"D": int(D), "lr_median": lr_m, "lr_lo": lr_lo, "lr_hi": lr_hi,
                     "batch_median": b_m, "batch_lo": b_lo, "batch_hi": b_hi,
                     "loss_opt_median": l_m, "loss_opt_lo": l_lo, "loss_opt_hi": l_hi, **emp,
                     "lr_covered": covered(lr_lo, lr_hi, emp["lr_star"], emp["lr_edge"], emp["lr_step"]),
                     "batch_covered": covered(b_lo, b_hi, emp["batch_star"], emp["batch_edge"], emp["batch_step"]),
                     "loss_covered": l_lo <= emp["loss"] <= l_hi})
    seq_len = int(held["seq_len"].iloc[0])
    if args.no_train:
        for r in rows:
            g = held[(held["D"] == r["D"]) & ~held["diverged"].astype(bool)]
            dist = (np.log(g["lr"] / r["lr_median"]) ** 2 + np.log(g["batch_tokens"] / r["batch_median"]) ** 2)
            near = g.loc[dist.idxmin()]
            r.update(setting_lr=float(near["lr"]), setting_batch=int(near["batch_tokens"]),
                     setting_loss=float(near["loss"]), setting_D=int(r["D"]), setting="nearest grid run")
    else:
        base = base_config(df, largest)
        settings = [{"name": f"predicted-D{r['D']}", "lr": float(f"{r['lr_median']:.4g}"),
                     "batch_tokens": round_batch(r["batch_median"], seq_len), "total_tokens": r["D"]} for r in rows]
        recs = train_settings(base, settings, args.out, "predicted")
        for r, s_, rec in zip(rows, settings, recs):
            r.update(setting_lr=s_["lr"], setting_batch=s_["batch_tokens"], setting_D=int(rec["D"]),
                     setting_loss=float("nan") if rec["diverged"] else float(rec["loss"]), setting="trained")
        control = train_control(df, largest, args.out)
        rows[-1]["control_loss"] = control["loss"]
    for r in rows:
        r["regret"] = r["setting_loss"] - r["loss"]
        r["regret_pct"] = 100 * r["regret"] / r["loss"]

    print(f"surface fit on {n_fit} runs of N < {largest:.3g} ({len(ns) - 1} sizes){' (cached)' if cached else ''}: "
          f"{s['divergences']} divergences; held-out N = {largest:.4g} (x{largest / ns[-2]:.2f} the largest fitted)")
    print(f"{'D':>8} | {'eta* 90% interval':>24} {'empirical':>10} {'in':>3} | {'B* 90% interval':>20} "
          f"{'empirical':>11} {'in':>3} | {'pred. setting':>17} {'loss':>7} {'best grid':>9} {'regret':>8}")
    for r in rows:
        b_emp = {"below": "<=", "above": ">="}.get(r["batch_edge"], "") + f"{r['batch_star']:.0f}"
        print(f"{r['D']:>8} | {r['lr_median']:>8.3g} [{r['lr_lo']:.3g}, {r['lr_hi']:.3g}]".ljust(35)
              + f" {r['lr_star']:>10.3g} {'yes' if r['lr_covered'] else 'no':>3} | "
              f"{r['batch_median']:>6.0f} [{r['batch_lo']:.0f}, {r['batch_hi']:.0f}]".ljust(22)
              + f" {b_emp:>11} {'yes' if r['batch_covered'] else 'no':>3} | "
              f"{r['setting_lr']:>8.3g} @ {r['setting_batch']:>6} {r['setting_loss']:>7.4f} {r['loss']:>9.4f} "
              f"{r['regret_pct']:>+7.2f}%")
    if "control_loss" in rows[-1]:
        r = rows[-1]
        print(f"control: the grid's best setting at D={r['D']} re-trained with this code: {r['control_loss']:.4f} "
              f"(sweep {r['loss']:.4f}); the predicted setting vs this control: "
              f"{100 * (r['setting_loss'] - r['control_loss']) / r['control_loss']:+.2f}%")
    for w in f.warnings():
        print(f"warning: {w}")
    summary = {
        "benchmark": "end_to_end", "runs": str(args.runs.relative_to(ROOT) if args.runs.is_relative_to(ROOT)
                                               else args.runs),
        "held_out_N": largest, "fitted_N": ns[:-1], "n_fit_runs": n_fit, "ci": CI,
        "lr_coverage": float(np.mean([r["lr_covered"] for r in rows])),
        "batch_coverage": float(np.mean([r["batch_covered"] for r in rows])),
        "loss_coverage": float(np.mean([r["loss_covered"] for r in rows])),
        "regret_pct_mean": float(np.nanmean([r["regret_pct"] for r in rows])),
        "regret_pct_max": float(np.nanmax([r["regret_pct"] for r in rows])),
        "regret_setting": rows[0]["setting"], "divergences": s["divergences"],
        "control_loss_at_D_max": rows[-1].get("control_loss"),
        "max_r_hat": max(v["r_hat"] for v in s["parameters"].values()) if s.get("parameters") else None,
        "rows": rows, "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(_clean(summary)))
    return summary


def _clean(v: Any) -> Any:
    """JSON-ready: NaN -> null, numpy scalars -> Python."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (np.floating, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


if __name__ == "__main__":
    sys.exit(main() and 0)
