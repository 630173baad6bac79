"""`scalinfer quickstart`: fit the bundled run table and predict a larger run, end to end, explained.

What is fit and what is asked is read from ``data/manifest.json`` (``quickstart`` entry: the table, its rows,
the model, NUTS's settings, the targets, and in words what the data are and why the targets), so the bundled
data can change without touching this code. The output says what was fitted (data, model, runs), whether the
fit converged (R-hat, bulk ESS, divergent transitions against `scalinfer.inference.fit`'s thresholds), the
answer with its interval, units and the definition of each quantity, what the extrapolation figures mean, and
the exact commands to run next.

Its NUTS settings are the manifest's, 4 chains x (500 warmup + 1,000 draws) (``scalinfer fit``'s defaults), and the
first command it suggests passes any that are not fit's defaults, so that it reproduces the quickstart's fit draw
for draw. 1,000 draws: at 500 the fit's largest R-hat on this table passes or fails the 1.01 line by seed (the
settings' scatters tau_lr and tau_b mix slowest); at 1,000 the seeds measured sit at or below it, with bulk ESS
well above 400 (benchmarks/README.md, "quickstart").
"""

from __future__ import annotations

import inspect
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from scalinfer.errors import ScalinferError

__all__ = ["quickstart", "data_dir", "next_commands"]

#: the fit file the suggested next commands write and read
FIT_FILE = "quickstart.nc"


def data_dir() -> Path:
    """The repository's ``data/`` folder (an editable install keeps it beside the package)."""
    return Path(__file__).resolve().parent.parent / "data"


def _manifest() -> dict[str, Any]:
    path = data_dir() / "manifest.json"
    if not path.exists():
        raise ScalinferError(f"{path}: bundled data manifest not found (is this a source checkout?)")
    return json.loads(path.read_text())


def next_commands(q: dict[str, Any]) -> list[str]:
    """The shell commands that redo the quickstart's fit into a file and ask it more (the quickstart entry `q`
    of the manifest; the fit's NUTS settings where they are not `scalinfer.fit`'s defaults, which are the
    CLI's)."""
    from scalinfer.inference import fit

    table = shlex.quote(str(Path("data") / q["runs"]))
    where = q.get("where")
    where = "" if not where else f' --where "{where}"' if '"' not in where else f" --where {shlex.quote(where)}"
    fmt = f" --format {q['format']}" if q.get("format") else ""
    defaults = inspect.signature(fit).parameters
    nuts = "".join(f" --{k} {q[k]}" for k in ("chains", "warmup", "samples", "seed")
                   if k in q and q[k] != defaults[k].default)
    t = q["targets"][0]
    at = " ".join(f"--{k} {_g(v)}" for k, v in t.items())
    return [f"scalinfer fit {table}{fmt}{where} --model {q['model']}{nuts} -o {FIT_FILE}",
            f"scalinfer summary {FIT_FILE}",
            f"scalinfer predict {FIT_FILE} {at}",
            f"scalinfer recommend {FIT_FILE} {at}",
            f"scalinfer plot {FIT_FILE} lr-valley -o lr-valley.png"]


def _describe_runs(runs) -> str:
    """How many training runs the table's rows come from, and the span of N and D."""
    df = runs.df
    branches = int(df["branch_of"].notna().sum()) if "branch_of" in df else 0
    n_rows = len(df)
    what = (f"{n_rows - branches} training runs, each read at its end and at {branches // max(n_rows - branches, 1)} "
            f"earlier decay branches ({n_rows} rows)" if branches else f"{n_rows} runs")
    return (f"{what}; {df['N'].nunique()} model sizes N = {_g(df['N'].min())} to {_g(df['N'].max())} parameters, "
            f"D = {_g(df['D'].min())} to {_g(df['D'].max())} training tokens")


def quickstart(json_output: bool = False, quiet: bool = True, samples: int | None = None,
               warmup: int | None = None, method: str = "nuts") -> int:
    """Fit the bundled table and print the answer (stdout: text, or JSON with `json_output`).

    `samples` and `warmup` (per chain) override the manifest's; ``method="map"`` gives the mode alone in seconds
    (no intervals, no convergence to judge). Returns the exit code (0)."""
    from scalinfer.inference import fit
    from scalinfer.inference.fit import ESS_MIN, RHAT_MAX
    from scalinfer.models import get_model
    from scalinfer.runs import load_runs

    manifest = _manifest()
    q = manifest["quickstart"]
    path = data_dir() / q["runs"]
    runs = load_runs(path, format=q.get("format"), where=q.get("where"))
    model = get_model(q["model"])
    chains, warmup = q.get("chains", 4), q.get("warmup", 500) if warmup is None else warmup
    samples = q.get("samples") if samples is None else samples  # None: fit's default (more while not converged)
    if not quiet:
        print(f"scalinfer quickstart: fitting {q['model']} to {path.relative_to(data_dir().parent)}", file=sys.stderr)
    f = fit(runs, model=model, method=method, chains=chains, warmup=warmup, samples=samples,
            seed=q.get("seed", 0), quiet=quiet)
    s = f.summary()
    nuts = f.method == "nuts"
    r_hat = max((v["r_hat"] for v in s.values()), default=float("nan")) if nuts else None
    ess = min((v["ess_bulk"] for v in s.values()), default=float("nan")) if nuts else None
    n_draws = f.posterior.sizes["chain"] * f.posterior.sizes["draw"]
    converged = nuts and r_hat <= RHAT_MAX and ess >= ESS_MIN and f.divergences == 0
    out = {"data": str(path), "simulated": not manifest["files"].get(q["runs"], {}).get("measured", True),
           "about_data": q.get("about", ""), "runs": _describe_runs(runs), "n_runs": len(runs),
           "model": q["model"], "model_is": _first_line(type(model).__doc__),
           "method": f.method, "chains": chains, "warmup": warmup,
           "samples": int(f.posterior.sizes["draw"]) if nuts else samples,
           "fit_seconds": round(f.timings["total_s"], 1), "r_hat_max": r_hat, "ess_bulk_min": ess,
           "divergences": f.divergences, "converged": bool(converged), "why_targets": q.get("why_targets", ""),
           "predictions": [f.predict(**target).to_dict() for target in q["targets"]],
           "next": next_commands(q)}
    if json_output:
        json.dump(out, sys.stdout, indent=2, default=float)
        print()
        return 0
    print(_text(out, n_draws))
    return 0


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0].split("; see ")[0].rstrip(".") if doc else ""


def _g(v: float) -> str:
    """3 significant digits, exponents written as 1e6 and 4.1e-4 (not 1e+06)."""
    text = f"{v:.3g}"
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


#: the order the answer's quantities are printed in (others follow)
_ORDER = ("lr_opt", "lr_opt_at_batch", "batch_loss_opt", "loss_opt")
#: the unit of each target in the question
_TARGET_UNITS = {"N": "parameters", "D": "training tokens", "lr": "peak LR", "batch": "tokens/step"}
_WIDTH = 110


def _wrap(text: str, indent: str, first: str | None = None) -> list[str]:
    import textwrap

    return textwrap.wrap(text, _WIDTH, initial_indent=indent if first is None else first, subsequent_indent=indent,
                         break_on_hyphens=False)


def _text(out: dict[str, Any], n_draws: int) -> str:
    """The quickstart's answer for a reader who has not read the README."""
    from scalinfer.inference.fit import ESS_MIN, RHAT_MAX

    lines = ["scalinfer quickstart: a Bayesian scaling-law fit, end to end, on the data bundled with scalinfer.", ""]
    kind = "simulated" if out["simulated"] else "measured"
    ind = " " * 8
    data = Path(out["data"])
    data = data.relative_to(data_dir().parent) if data.is_relative_to(data_dir().parent) else data
    lines += [f"DATA    {data} ({kind})"]
    lines += _wrap(out["about_data"], ind) if out["about_data"] else []
    lines += _wrap(out["runs"] + ".", ind)
    model_is = out["model_is"][:1].lower() + out["model_is"][1:]
    lines += _wrap(f"{out['model']}: {model_is} (docs/models.md).", ind, "MODEL   ")
    if out["method"] == "nuts":
        verdict = ("converged" if out["converged"] else "NOT converged: treat the answer as provisional")
        lines += _wrap(f"NUTS, {out['chains']} chains x ({out['warmup']} warmup + {out['samples']} draws) = {n_draws} "
                       f"posterior draws, in {out['fit_seconds']} s: {verdict}. Largest R-hat {out['r_hat_max']:.3f} "
                       f"(the chains agree when <= {RHAT_MAX}), smallest bulk ESS {out['ess_bulk_min']:.0f} (effective "
                       f"independent draws; >= {ESS_MIN} wanted), {out['divergences']} divergent transitions (0 "
                       f"wanted).", ind, "FIT     ")
    else:
        lines += [f"FIT     {out['method']}: the posterior mode alone, in {out['fit_seconds']} s (no intervals)."]
    for p in out["predictions"]:
        t = p["targets"]
        at = ", ".join(f"{k} = {_g(v)} {_TARGET_UNITS.get(k, '')}".rstrip() for k, v in t.items())
        ind = " " * 10
        lines += [""] + _wrap(f"at {at}: which peak learning rate and batch size give the lowest final loss, and "
                              f"what loss is that?", ind, "QUESTION  ")
        if out["why_targets"]:
            lines += _wrap(out["why_targets"], ind)
        ext = p["extrapolation"]
        far = [f"{k[:-len('_ratio')]} is {v:.2g}x the largest in the data"
               for k, v in ext.items() if k.endswith("_ratio")]
        if far:
            lines += _wrap(f"Extrapolation: {'; '.join(far)}" + (
                           "; a new model size (not one fitted), so the answer includes how far a size scatters "
                           "around the laws." if ext.get("fitted_size") == 0 else "."), ind)
        lines += ["", f"ANSWER    median and {100 * p['ci']:.0f}% interval (the value lies inside with "
                      f"{100 * p['ci']:.0f}% probability, given the model and the data):"]
        names = [k for k, v in p.items() if isinstance(v, dict) and "median" in v and not v.get("alias_of")]
        for name in sorted(names, key=lambda k: _ORDER.index(k) if k in _ORDER else len(_ORDER)):
            v = p[name]
            lines.append(f"  {name:<15} {_g(v['median']):>8}  [{_g(v['lo'])}, {_g(v['hi'])}]  {v['unit']}")
            lines += _wrap(v["definition"], " " * 18)
        aliases = [f"{k} is {v['alias_of']}" for k, v in p.items() if isinstance(v, dict) and v.get("alias_of")]
        if aliases:
            lines.append(f"  (older names, same numbers: {', '.join(aliases)})")
        if p["warnings"]:
            lines += ["", "WARNINGS  what to weigh before using the answer:"]
            for w in p["warnings"]:
                lines += _wrap(w, "    ", "  - ")
    lines += ["", "NEXT      save this fit to a file and ask it more (docs/reading-answers.md explains each answer):"]
    lines += [f"  {c}" for c in out["next"]]
    lines += _wrap("Your own sweep: scalinfer fit YOUR_RUNS.csv --model surface -o mine.nc  (a row per run: N, D, lr, "
                   "batch_tokens, loss; `scalinfer fit --help` lists the other formats it reads)", "    ", "  ")
    return "\n".join(lines)
