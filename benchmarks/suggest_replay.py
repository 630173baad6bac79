"""Replay of `scalinfer.suggest` on Step Law's dense grid: which runs to buy, against random and grid order.

The universe is Step Law's dense runs with N <= 6e8 (1,746 runs, 15 settings); the target is lr_opt at
N = 1,073,741,824, D = 2e10 (the held-out size). First the whole universe is fitted: its lr_opt 90% interval
(hi/lo, natural scale) is the width to reach. Then each strategy starts from the same seed design (``--seed-runs``
runs per setting, drawn at random) and buys runs from the universe in rounds of ``--per-round``, refitting
after each round, until its width is within 10% of the full grid's (log width <= 1.1 x the full's) or the
universe is spent:

- ``suggest``: ``--per-round`` remaining runs chosen jointly by `scalinfer.suggest.suggest` with ``picks``: one
  after another, each the highest expected reduction of the posterior variance of log lr_opt at the target per
  FLOP given the picks before it (the believer rule: a pick's predictive-mean outcome reweights the draws);
  its weights thin out with every pick (default 32 a round; `suggest` warns when the weights' ESS falls under
  100);
- ``random``: uniformly among the remaining runs (seeded);
- ``grid``: the file's order (size by size, budget by budget, LR by batch): a sweep run as it is listed.

Each refit also gives the **regret** of the point `scalinfer.decide.recommend` would launch at the target (the
LR and batch minimizing posterior expected loss): 100 (loss of the held-out 1.07e9 grid's cell nearest it at
D = 2e10 / that grid's best cell's loss - 1), in % (``benchmarks/_grid.py``; the backtest's rule). The held-out
size's runs are never bought: they only score.

The rounds run round-major (each strategy buys its round before any buys the next), so a run cut short still
compares the strategies at equal rounds.

Refits are NUTS at fit's defaults (``--chains`` x (``--warmup`` + ``--samples``), 4 x (500 + 1,000), then
``--samples`` more at a time while R-hat > 1.01 or bulk ESS < 400, up to ``--max-samples``, 4,000): shorter
refits (2 x (250 + 250) until 2026-12-03) made each strategy's width swing by 20-40% from one round to the next
while its data only grew, more than the 10% goal; each round's line gives the refit's R-hat max. The cost
of a strategy is the FLOPs of the runs it bought beyond the seed design (6 N D each), up to the round at which it
first reached the width. The JSON last line gives ``flops_ratio_vs_random`` and ``flops_ratio_vs_grid``
(suggest's cost over theirs) with ``flops_ratio_vs_*_kind``:

- ``exact``: both reached the width;
- ``upper bound``: suggest reached it and the other had not when the run ended. Its cost is then at least what
  it had spent, so the ratio is at most suggest's cost over that (the ratio printed). A strategy that has not
  reached the width stops buying once this bound is below ``--bound`` (default 0.5, #23's target): more rounds
  would only sharpen a bound already known to pass;
- ``none`` (ratio null): suggest did not reach the width, so there is no cost to compare.

    nice -n 10 .venv/bin/python benchmarks/suggest_replay.py [--per-round 32] [--max-rounds 24] [--quick]
        [--full-width HI_OVER_LO] [--bound 0.5] [--out DIR] [--grid-from R]

``--out DIR`` writes two files there (replacing them): ``rounds.csv``, every refit as one row (strategy, round,
runs, FLOPs beyond the seed, hi/lo, regret %, R-hat max, divergent transitions, draws per chain; round 0 the
seed design), and ``result.json``, the JSON last line; notebooks/decide.ipynb draws data/suggest_replay/'s.
``--grid-from R`` continues grid order alone from round R, to settle a bound against it after a run that
ended first (its table at round R - 1 is the seed plus the file's next (R - 1) x ``--per-round`` runs).

Reads ``../shared/datasets/steplaw/dense_runs.csv`` (relative to the repository root).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from _grid import grid_truth_at, regret  # benchmarks/, the script's folder, is on sys.path

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "datasets" / "steplaw" / "dense_runs.csv"
TARGET_N, TARGET_D = 1073741824.0, 2e10


def width(fit) -> float:
    """hi/lo of lr_opt's 90% interval at the target."""
    _, lo, hi = fit.predict(N=TARGET_N, D=TARGET_D, ci=0.9, sensitivity=False).interval("lr_opt")
    return float(hi / lo)


def point_regret(fit, truth: dict) -> float:
    """Regret (%) on the held-out grid `truth` of the point `recommend` gives at the target."""
    from scalinfer.decide import recommend  # after scalinfer.runtime.configure (main)

    r = recommend(fit, TARGET_N, TARGET_D)
    return regret(truth, r.recommended["lr"].value, r.recommended["batch"].value)[0]


def fit_rhat(fit) -> float:
    """The largest R-hat over the fit's scalar parameters (a refit whose chains disagree gives a width that says
    more about the sampler than about the runs bought)."""
    return float(max((v["r_hat"] for v in fit.summary().values() if np.isfinite(v["r_hat"])), default=np.nan))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(DATASET))
    ap.add_argument("--seed-runs", type=int, default=4, help="runs per setting in the seed design")
    ap.add_argument("--per-round", type=int, default=32, help="runs bought per round")
    ap.add_argument("--max-rounds", type=int, default=24)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--max-samples", type=int, default=None, help="draws per chain at most (default 4 x --samples)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full-width", type=float, default=None,
                    help="the full grid's hi/lo, measured before (skips its fit)")
    ap.add_argument("--bound", type=float, default=0.5,
                    help="stop a strategy short of the width once suggest's cost over its spend is below this")
    ap.add_argument("--grid-from", type=int, default=None, metavar="R",
                    help="continue grid order alone from round R (a run cut short: its table at round R - 1 is the "
                         "seed plus the file's next (R - 1) x --per-round runs, known without fits)")
    ap.add_argument("--out", default=None, help="a folder for rounds.csv and result.json (checked before the fits)")
    ap.add_argument("--quick", action="store_true", help="2 rounds, 1 x (150 + 150) refits: a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.max_rounds, args.chains, args.warmup, args.samples = 2, 1, 150, 150
    args.max_samples = 4 * args.samples if args.max_samples is None else args.max_samples
    if not Path(args.dataset).exists():
        print(f"no dataset at {args.dataset}", file=sys.stderr)
        return 1
    import scalinfer
    import scalinfer.runtime
    from scalinfer._io import atomic_write_text, check_output_dir

    out_dir = check_output_dir(args.out, inputs=[args.dataset]) if args.out else None
    from scalinfer.runs.schema import validate

    scalinfer.runtime.configure(n_devices=args.chains)  # as the CLI: a CPU device per chain, before JAX starts
    from scalinfer.suggest import suggest

    t0 = time.perf_counter()
    table = scalinfer.load_runs(args.dataset, format="steplaw").df
    full = table[table["N"] <= 6e8].reset_index(drop=True)      # the universe runs are bought from
    truth = grid_truth_at(table, TARGET_N, TARGET_D)            # the held-out size's grid, which only scores
    flops = 6.0 * full["N"].to_numpy() * full["D"].to_numpy()

    def refit(idx):
        runs = validate(full.iloc[sorted(idx)].reset_index(drop=True), source="steplaw-replay", kind="runs")
        return scalinfer.fit(runs, model="surface", chains=args.chains, warmup=args.warmup, samples=args.samples,
                             max_samples=args.max_samples, seed=args.seed, quiet=True)

    if args.full_width:
        w_full = args.full_width
    else:
        full_fit = refit(range(len(full)))
        w_full = width(full_fit)
        print(f"full grid fit: R-hat max {fit_rhat(full_fit):.3f}, {full_fit.divergences} divergent", flush=True)
    goal = float(np.exp(1.1 * np.log(w_full)))  # log width within 10% of the full grid's
    print(f"full grid: {len(full)} runs, lr_opt 90% hi/lo at N={TARGET_N:.4g}, D={TARGET_D:.3g}: {w_full:.3f}; "
          f"goal <= {goal:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    rng = np.random.default_rng(args.seed)
    seed_idx = [int(i) for _, g in full.groupby(["N", "D"]) for i in
                rng.choice(g.index.to_numpy(), min(args.seed_runs, len(g)), replace=False)]
    seed_flops = float(flops[seed_idx].sum())
    if args.grid_from is None:
        fit0 = refit(seed_idx)
        w0, g0 = width(fit0), point_regret(fit0, truth)
        print(f"seed design: {len(seed_idx)} runs, {seed_flops:.3g} FLOPs, hi/lo {w0:.3f}, regret {g0:.3f}% "
              f"(R-hat max {fit_rhat(fit0):.3f})", flush=True)
        strategies, first = ("suggest", "random", "grid"), 0
    else:
        fit0, w0, g0 = None, float("inf"), float("nan")
        strategies, first = ("grid",), args.grid_from - 1

    # round-major: every strategy buys its round before any buys the next, so a cut-short run compares them fairly
    state = {k: {"have": list(seed_idx), "fit": fit0, "w": w0, "spent": 0.0, "trace": [], "reached": w0 <= goal,
                 "done": w0 <= goal} for k in strategies}
    if first:  # grid order's table after `first` rounds, from the file's order alone
        bought = [int(i) for i in np.setdiff1d(np.arange(len(full)), seed_idx)[:first * args.per_round]]
        state["grid"]["have"] += bought
        state["grid"]["spent"] = float(flops[bought].sum())
        print(f"grid order after round {first}: {len(state['grid']['have'])} runs, +{state['grid']['spent']:.3g} "
              "FLOPs (not refitted)", flush=True)
    pick_rng = np.random.default_rng(args.seed + 1)
    for rnd in range(first, args.max_rounds):
        for strategy, st in state.items():
            if st["done"]:
                continue
            sg = state.get("suggest", {"done": False})
            if strategy != "suggest" and sg["done"] and sg["reached"] and st["spent"] > 0 \
                    and sg["spent"] / st["spent"] < args.bound:
                st["done"] = True  # not reached, but the ratio's upper bound already passes --bound
                continue
            have = st["have"]
            rest = np.setdiff1d(np.arange(len(full)), have)
            if not rest.size:
                st["done"] = True
                continue
            k = min(args.per_round, rest.size)
            if strategy == "suggest":
                cand = full.loc[rest, ["N", "D", "lr", "batch_tokens"]].rename(columns={"batch_tokens": "batch"})
                s = suggest(st["fit"], TARGET_N, TARGET_D, cand.reset_index(drop=True), max_draws=400,
                            n_outcomes=100, seed=args.seed, picks=k)
                # the table lists the k picks first; map them back to the universe's index through (N, D, lr, batch)
                key = {tuple(r): i for i, r in zip(rest, cand.to_numpy())}
                picks = [key[tuple(r)] for r in s.table[["N", "D", "lr", "batch"]].to_numpy()[:k]]
            elif strategy == "random":
                picks = list(pick_rng.choice(rest, k, replace=False))
            else:
                picks = list(rest[:k])
            have += [int(i) for i in picks]
            st["spent"] += float(flops[picks].sum())
            st["fit"] = refit(have)
            st["w"] = width(st["fit"])
            st["regret"] = point_regret(st["fit"], truth)
            st["reached"] = st["done"] = st["w"] <= goal
            rhat = fit_rhat(st["fit"])
            st["trace"].append({"round": rnd + 1, "runs": len(have), "flops": st["spent"], "width": st["w"],
                                "regret": st["regret"], "r_hat_max": rhat,
                                "divergences": int(st["fit"].divergences),
                                "draws": int(st["fit"].posterior.sizes["draw"])})
            print(f"{strategy:>8} round {rnd + 1}: {len(have)} runs, +{st['spent']:.3g} FLOPs, hi/lo {st['w']:.3f}, "
                  f"regret {st['regret']:.3f}% (R-hat max {rhat:.3f}, {st['fit'].divergences} divergent, "
                  f"{st['fit'].posterior.sizes['draw']} draws per chain; {time.perf_counter() - t0:.0f} s)",
                  flush=True)
    results = {}
    for strategy, st in state.items():
        results[strategy] = {"reached": st["reached"], "flops": st["spent"] if st["reached"] else None,
                             "flops_spent": st["spent"], "width": st["w"], "trace": st["trace"]}
        print(f"{strategy:>8}: {'reached' if st['reached'] else 'did not reach'} the goal; {st['spent']:.3g} FLOPs "
              "beyond the seed", flush=True)

    def ratio(other):
        if "suggest" not in results or other not in results:
            return None, "none"
        s_, o = results["suggest"], results[other]
        if not s_["reached"]:
            return None, "none"
        if o["reached"]:
            return s_["flops"] / o["flops"] if o["flops"] else float("inf"), "exact"
        return (s_["flops"] / o["flops_spent"] if o["flops_spent"] else None), "upper bound"

    ratios = {k: ratio(k) for k in ("random", "grid")}
    for k, (r, kind) in ratios.items():
        why = "suggest did not reach the goal" if "suggest" in results else "suggest not in this run"
        print(f"suggest's FLOPs over {k}'s: " + (f"not measured ({why})" if r is None else
              f"{'<= ' if kind == 'upper bound' else ''}{r:.3f} ({kind})"), flush=True)
    seeded = fit0 is not None  # not with --grid-from
    out = {"target": {"N": TARGET_N, "D": TARGET_D}, "width_full": w_full, "width_seed": w0 if seeded else None,
           "regret_seed": g0 if seeded else None, "goal": goal, "grid_from": args.grid_from,
           "seed_runs": len(seed_idx), "per_round": args.per_round,
           "refit": f"nuts {args.chains} x ({args.warmup} + {args.samples}, up to {args.max_samples})",
           **{f"{k}_{f}": v[f] for k, v in results.items() for f in ("reached", "flops", "flops_spent", "width")},
           **{f"flops_ratio_vs_{k}": r for k, (r, _) in ratios.items()},
           **{f"flops_ratio_vs_{k}_kind": kind for k, (_, kind) in ratios.items()},
           "wall_s": time.perf_counter() - t0}
    if out_dir is not None:
        cols = ("round", "runs", "flops", "width", "regret", "r_hat_max", "divergences", "draws")
        seed = [{"round": 0, "runs": len(seed_idx), "flops": 0.0, "width": w0, "regret": g0,
                 "r_hat_max": fit_rhat(fit0), "divergences": int(fit0.divergences),
                 "draws": int(fit0.posterior.sizes["draw"])}] if seeded else []
        lines = ["strategy," + ",".join(cols)] + [f"{k}," + ",".join(str(t[c]) for c in cols)
                                                   for k, st in state.items() for t in [*seed, *st["trace"]]]
        out_dir.mkdir(exist_ok=True)
        atomic_write_text(out_dir / "rounds.csv", "\n".join(lines) + "\n")
        atomic_write_text(out_dir / "result.json", json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
