"""`scalinfer.suggest` against `plan`'s fixed grid on simulated sweeps: the FLOPs each needs for the same interval.

Issue #23 item 4a. The replay (``suggest_replay.py``) scores `suggest` on real runs, but only on runs that
Step Law happened to train; this script asks the planning question itself: a user about to buy the grid that
``scalinfer plan`` designs for a target, or the runs `suggest` picks one round at a time, which reaches the
grid's interval for lr_opt at the target for fewer FLOPs?

- **Truth.** The surface model at `scalinfer.models.surface.simulate.TRUE_PARAMS` (rounded posterior medians on
  Step Law's dense runs with N <= 6e8), with the sizes scattering about the laws by ``--tau-size`` (log units,
  for each of lr, batch and loss level's scatter; default 0.06, the size scatter of LR that fit found,
  tau_lr_size ~ 0.059). Each replicate draws the settings' and sizes' offsets and the noise with its own seed;
  runs whose LR lies past the divergence edge diverge (censored in the fit).
- **The grid.** `scalinfer.sweep.plan.make_plan` for the target (N = 1,073,741,824, D = 2e10; the replay's):
  three dense sizes (``--sizes``, 1.26e8 / 2.62e8 / 5.14e8 non-embedding parameters), ``--lrs`` LRs a factor 2
  apart around Step Law's law, ``--batch-count`` batches, ``--decays`` decay branches: its records are every
  (size, D point, LR, batch). Its cost is the plan's own (`CalibrationPlan.flops`: one run per (size, LR,
  batch) to the largest D, with cheap decay branches forked from it); its width is that of a fit of all its
  records.
- **Sequential.** Starts from ``--seed-runs`` records per (size, D) setting drawn at random, then each round
  buys ``--per-round`` records chosen jointly by `suggest` (``picks``; the believer rule) from the grid's
  records it has not bought, refits and stops once its width is within 10% of the grid's in log (hi/lo <=
  (grid hi/lo)^1.1, the replay's goal) or the records are spent. Each record it buys is a run trained from
  scratch to its D, at the trainer's FLOPs per token x D: it does not share the plan's branches, so buying
  every record would cost more than the plan. Its cost includes the seed's.
- **Sequential, runs with branches** (``--branches``). As above, but what it buys is one of the plan's runs,
  (size, LR, batch) to the largest D with its ``--decays`` decay branches: every D point's record at once, at the
  plan's own cost per run (the trainer's FLOPs per token x the run's tokens, branches included). `suggest` values
  each candidate run for all its records (``branches``). The seed design is ``--seed-runs`` random runs per size,
  and ``--per-round`` counts runs.

The ratio (sequential's FLOPs over the plan's) is exact when the goal was reached; when it was not, none.
Both arms see the same simulated losses (one table per replicate, simulated once for all records).
Refits are NUTS at fit's defaults (4 x (500 + 1,000), more while not converged), the replay's.

    nice -n 10 .venv/bin/python benchmarks/suggest_simulation.py [--replicates 3] [--per-round 8] [--quick]
    nice -n 10 .venv/bin/python benchmarks/suggest_simulation.py --branches --per-round 2 [--replicates 3]

Prints a line per refit, a table of the replicates (with whether each final interval holds the true law's
lr_opt at the target, before the target setting's own offsets) and, as its last line, one JSON object: per
replicate the grid's width and FLOPs, the sequential arm's rounds, width and FLOPs, and
``flops_ratio_vs_plan`` (the median over replicates that reached the goal; ``reached`` counts them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd
from suggest_replay import TARGET_D, TARGET_N, fit_rhat, width  # benchmarks/, the script's folder, is on sys.path

SIZES = ("d1024l12-dense", "d1280l16-dense", "d1792l16-dense")


def interval(fit) -> tuple[float, float]:
    """lr_opt's 90% interval at the target."""
    _, lo, hi = fit.predict(N=TARGET_N, D=TARGET_D, ci=0.9, sensitivity=False).interval("lr_opt")
    return float(lo), float(hi)


def records(plan) -> pd.DataFrame:
    """Every (N, D, lr, batch_tokens) record of the plan, with ``flops``: the trainer's FLOPs per token x D (the
    record as a run of its own), ``run`` (the plan's run it belongs to: one per size, LR and batch) and
    ``run_flops`` (that run's cost, its decay branches included: the plan's accounting)."""
    rows, run = [], 0
    for s in plan.sizes:
        for lr in s.lrs:
            for b in s.batches:
                rows += [(float(s.size.N_total), float(d), float(lr), float(b), s.size.flops_per_token * d, run,
                          s.size.flops_per_token * s.tokens_per_run) for d in s.D_points]
                run += 1
    return pd.DataFrame(rows, columns=["N", "D", "lr", "batch_tokens", "flops", "run", "run_flops"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(SIZES), help="the plan's sizes (`scalinfer plan --size`'s forms)")
    ap.add_argument("--lrs", type=int, default=6)
    ap.add_argument("--batch-count", type=int, default=3)
    ap.add_argument("--decays", type=int, default=3)
    ap.add_argument("--tau-size", type=float, default=0.06, help="the truth's size scatter (log units)")
    ap.add_argument("--seed-runs", type=int, default=2, help="records per (size, D) setting in the seed design")
    ap.add_argument("--per-round", type=int, default=8, help="records bought per round")
    ap.add_argument("--max-rounds", type=int, default=20)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--max-samples", type=int, default=None, help="draws per chain at most (default 4 x --samples)")
    ap.add_argument("--seed", type=int, default=0, help="the first replicate's seed (replicate r uses seed + r)")
    ap.add_argument("--branches", action="store_true",
                    help="buy the plan's runs with their decay branches (every D point of a run at once, at the "
                         "plan's cost), valued by suggest's branches; --seed-runs and --per-round count runs")
    ap.add_argument("--quick", action="store_true", help="1 replicate, 2 rounds, 1 x (150 + 150) refits: a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.replicates, args.max_rounds, args.chains, args.warmup, args.samples = 1, 2, 1, 150, 150
    args.max_samples = 4 * args.samples if args.max_samples is None else args.max_samples

    import scalinfer
    import scalinfer.runtime

    scalinfer.runtime.configure(n_devices=args.chains)  # as the CLI: a CPU device per chain, before JAX starts
    from scalinfer.models.surface.simulate import law_optima, simulate
    from scalinfer.runs.schema import validate
    from scalinfer.suggest import suggest
    from scalinfer.sweep.plan import PlanSpec, make_plan, parse_size

    sizes = tuple(parse_size(s, what="--sizes") for s in args.sizes.split(","))
    plan = make_plan(PlanSpec(sizes=sizes, target_N=TARGET_N, target_D=TARGET_D, lr_count=args.lrs,
                              batch_count=args.batch_count, decay_count=args.decays, preset="cal-xs"))
    universe = records(plan)
    truth = {f"tau_{v}_size": args.tau_size for v in ("lr", "b", "loss")}
    lr_law = float(np.exp(law_optima(truth, TARGET_N, TARGET_D)["lr_opt"]))  # the law's, before a setting's offsets
    print(f"plan: {len(sizes)} sizes (N = {', '.join(f'{s.N_total:.3g}' for s in sizes)}), {plan.n_runs} runs, "
          f"{len(universe)} records, {plan.flops:.3g} FLOPs (each record as a run of its own: "
          f"{universe['flops'].sum():.3g}); target N = {TARGET_N:.4g}, D = {TARGET_D:.3g}, where the true law's "
          f"lr_opt is {lr_law:.3g}", flush=True)

    def refit(table: pd.DataFrame, seed: int):
        runs = validate(table.drop(columns=["flops", "run", "run_flops", "true_lr_opt", "true_batch_opt",
                                            "true_loss_opt"])
                        .reset_index(drop=True), source="suggest-simulation", kind="runs")
        return scalinfer.fit(runs, model="surface", chains=args.chains, warmup=args.warmup, samples=args.samples,
                             max_samples=args.max_samples, seed=seed, quiet=True)

    t0 = time.perf_counter()
    reps = []
    for r in range(args.replicates):
        seed = args.seed + r
        table = simulate(truth, universe.drop(columns=["flops", "run", "run_flops"]), seed=seed).assign(
            flops=universe["flops"], run=universe["run"], run_flops=universe["run_flops"])
        grid_fit = refit(table, seed)
        w_grid = width(grid_fit)
        goal = float(np.exp(1.1 * np.log(w_grid)))
        print(f"replicate {r} (seed {seed}): {int(table['diverged'].sum())} of {len(table)} records diverged; "
              f"the plan's grid: hi/lo {w_grid:.3f} (R-hat max {fit_rhat(grid_fit):.3f}, {grid_fit.divergences} "
              f"divergent); goal <= {goal:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
        rng = np.random.default_rng(seed)
        if args.branches:  # whole runs: every record of each run bought, at the run's cost
            runs_of = table.groupby("run")
            bought = [int(r) for _, g in table.groupby("N") for r in
                      rng.choice(g["run"].unique(), min(args.seed_runs, g["run"].nunique()), replace=False)]
            have = sorted(i for r in bought for i in runs_of.indices[r])
        else:
            have = [int(i) for _, g in table.groupby(["N", "D"]) for i in
                    rng.choice(g.index.to_numpy(), min(args.seed_runs, len(g)), replace=False)]

        def cost(have) -> float:
            if args.branches:
                return float(table.loc[have].drop_duplicates("run")["run_flops"].sum())
            return float(table.loc[have, "flops"].sum())

        fit = refit(table.loc[sorted(have)], seed)
        w = width(fit)
        trace = [{"round": 0, "runs": len(have), "flops": cost(have), "width": w,
                  "r_hat_max": fit_rhat(fit), "divergences": int(fit.divergences)}]
        print(f"  seed design: {len(have)} records, {trace[0]['flops']:.3g} FLOPs, hi/lo {w:.3f}", flush=True)
        for rnd in range(1, args.max_rounds + 1):
            if w <= goal:
                break
            rest = np.setdiff1d(np.arange(len(table)), have)
            if args.branches:  # a candidate per run not bought: its largest D, valued with its branches
                rest = table.loc[rest].sort_values("D").drop_duplicates("run", keep="last").index.to_numpy()
            if not rest.size:
                break
            k = min(args.per_round, rest.size)
            cand = table.loc[rest, ["N", "D", "lr", "batch_tokens"]].rename(columns={"batch_tokens": "batch"})
            s = suggest(fit, TARGET_N, TARGET_D, cand.reset_index(drop=True), max_draws=400, n_outcomes=100,
                        seed=seed, picks=k, branches=args.decays if args.branches else 0)
            key = {tuple(row): i for i, row in zip(rest, cand.to_numpy())}
            picked = [int(key[tuple(row)]) for row in s.table[["N", "D", "lr", "batch"]].to_numpy()[:k]]
            if args.branches:
                picked = [int(i) for p in picked for i in runs_of.indices[int(table.loc[p, "run"])]]
            have += picked
            fit = refit(table.loc[sorted(have)], seed)
            w = width(fit)
            trace.append({"round": rnd, "runs": len(have), "flops": cost(have),
                          "width": w, "r_hat_max": fit_rhat(fit), "divergences": int(fit.divergences)})
            print(f"  round {rnd}: {len(have)} records, {trace[-1]['flops']:.3g} FLOPs, hi/lo {w:.3f} (R-hat max "
                  f"{trace[-1]['r_hat_max']:.3f}, {fit.divergences} divergent; {time.perf_counter() - t0:.0f} s)",
                  flush=True)
        reached = w <= goal
        flops = trace[-1]["flops"]
        (g_lo, g_hi), (s_lo, s_hi) = interval(grid_fit), interval(fit)
        reps.append({"seed": seed, "grid_width": w_grid, "grid_flops": plan.flops, "goal": goal,
                     "grid_r_hat_max": fit_rhat(grid_fit), "grid_holds_law": bool(g_lo <= lr_law <= g_hi),
                     "holds_law": bool(s_lo <= lr_law <= s_hi), "reached": bool(reached),
                     "rounds": trace[-1]["round"], "records": len(have), "width": w, "flops": flops,
                     "flops_ratio": flops / plan.flops if reached else None, "trace": trace})
    print()
    print("| replicate | plan: hi/lo | plan: FLOPs | plan: holds law | suggest: reached | rounds | records | hi/lo | "
          "FLOPs | holds law | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r, x in enumerate(reps):
        ratio = "-" if x["flops_ratio"] is None else f"{x['flops_ratio']:.3f}"
        yes = lambda b: "yes" if b else "no"  # noqa: E731
        print(f"| {r} | {x['grid_width']:.3f} | {x['grid_flops']:.3g} | {yes(x['grid_holds_law'])} | "
              f"{yes(x['reached'])} | {x['rounds']} | {x['records']} of {len(universe)} | {x['width']:.3f} | "
              f"{x['flops']:.3g} | {yes(x['holds_law'])} | {ratio} |")
    ratios = [x["flops_ratio"] for x in reps if x["flops_ratio"] is not None]
    out = {"target": {"N": TARGET_N, "D": TARGET_D}, "lr_opt_law": lr_law,
           "sizes": [float(s.N_total) for s in sizes],
           "plan_runs": plan.n_runs, "plan_records": len(universe), "plan_flops": plan.flops,
           "tau_size": args.tau_size, "seed_runs_per_setting": args.seed_runs, "per_round": args.per_round,
           "branches": args.branches,
           "refit": f"nuts {args.chains} x ({args.warmup} + {args.samples}, up to {args.max_samples})",
           "replicates": reps, "reached": len(ratios),
           "flops_ratio_vs_plan": float(np.median(ratios)) if ratios else None,
           "wall_s": time.perf_counter() - t0}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
