r"""Simulation-based calibration of the ``surface`` model: are its intervals of eta* and B* at 2x, 10x and 100x
beyond the largest fitted size right, and how do they fail when the data depart from the model?

Each data set draws EVERY parameter of the surface model from a population, simulates a calibration design
with `scalinfer.models.surface.simulate.simulate`, fits it with NUTS and predicts a new setting at each target.
If the population is the model's prior and inference is right, the rank of each truth among posterior draws is
uniform (Talts et al. 2018) and every interval covers at its nominal rate.

Population (``well_specified``): the prior the fit uses (the surface model's option ``prior``, ``--prior``,
default the model's default; read from `scalinfer.models.surface.population.PRIOR_SETS`, so the population
follows the model), on the design's centering (m_lr, m_B, m_N, h_N, m_D, h_D: the middles and half-ranges of
the design's logs, as the fit computes them). Every prior there is proper, so SBC holds exactly for it. The
model's default, ``population`` (`scalinfer.models.surface.population.POPULATION`), is the broad
`scalinfer.models.surface.priors.PRIORS` with the size scatter, the exponents of eta* and B*, the valleys' c0,
delta, p and kappa1 narrowed to what published sweeps say. The broad one (``--prior default``):

- laws: eta* and B* at the design's middle N(0, 1.5) in log units about the grid's middle LR and batch, their
  natural exponents in N and D N(0, 1) (broad: |exponent| > 1 in a third of the data sets, so targets at 100x
  can lie far outside anything tried); the loss law's intercept N(0, 0.2) about log 3 nats (the fit centres it
  on the median of the data's best losses instead: the one prior the fit takes from the data; log L* is pinned
  by the data, so this moves nothing checked here), its exponents N(0, 0.3) (not plausible: the loss rises
  with N or D in half the data sets; kept, so that the well-specified row is the model's prior);
- the ridge kappa1 ~ N(0.5, 0.5), kappa2 ~ N(0, 0.5); log curvatures N(-4, 1.5) and their exponents N(0, 1)
  about the design's middle; delta ~ N(0, 1); p = 0.5 + 3.5 Beta(3, 3);
- scatter: tau_lr, tau_b ~ HalfNormal(0.3), tau_loss ~ HalfNormal(0.02); size scatter tau_size^2 ~
  InverseGamma(1, 0.005) (eta*, B*) and InverseGamma(1, 5e-5) (L*); noise sigma0 ~ HalfNormal(0.02),
  sigma1 ~ HalfNormal(0.5), nu ~ Gamma(2, 0.1).

Two things are not the model's, both about runs the fit censors:

- ``diverge_above`` (a run whose log LR lies that far above the optimal LR at its batch diverges) is drawn
  Uniform(1, 2) log units: it is not a model parameter. The model censors a diverged run's loss above its
  setting's best converged loss (`scalinfer.models.surface.data`): a weaker statement than what happened, true
  whenever the valley rises above its noise one log unit past the optimum;
- a simulated loss above `LOSS_CAP` (10 nats/token, a uniform guess over a 22k vocabulary) is recorded as
  diverged: the prior's valleys, C |u|^p with p up to 4, reach thousands of nats on a wide grid, which no run
  table holds (the loaders refuse a loss above 30).

So the well-specified row is the model up to its censoring of diverged runs. ``--no-divergence`` removes both
(no simulated run diverges; the fit censors no run by its loss ratio), a diagnostic of what the censoring costs.

Design (`CAL_DESIGN`): 3 model sizes (1e8, 2e8, 4e8) x 3 token budgets (20, 40, 80 tokens per parameter) = 9
settings, LRs 2^-15..2^-5 by factors of 2 (11) x batches 2^15..2^23 tokens by factors of 4 (5): 495 runs. The
grids are wide (the prior puts eta* and B* anywhere within ~+-3 log units of their middles), so runs above the
optimum diverge and are censored: the JSON's ``censored_fraction``.

Targets: a new setting (new size) at N = 2x, 10x and 100x the largest N, with D = 40 N (the design's middle
tokens per parameter, geometric). The truth there is the law (with a variant's curved terms: `law_optima`) plus
the new setting's own offsets tau * eps and the new size's tau_size * e, as a user's next run would face.

Misspecification rows (`scalinfer.models.surface.simulate.Variant`; the population as above, plus):

- ``nonseparable_valley``: the LR valley's log curvature and asymmetry move with the batch,
  w, a ~ N(0, 0.3) per log unit of batch (over the batch grid's +-2.8 log units the curvature changes up to
  ~2.3x either way, the asymmetry by up to +-0.8);
- ``curved_laws``: log eta* and log B* gain q (log N - m_N)^2 with q ~ N(0, 0.02) each (the N exponent drifts
  by 2q per e-fold of N: +-0.3 over three decades; invisible within the design's 4x, 0.56 sd at 100x);
- ``heteroscedastic``: noise scale proportional to 1/N (``noise_N_exp`` = 1: twice the noise at the smallest
  size, half at the largest, about the middle).

Fits: 2 chains x (300 warmup + 300 draws), then 300 more at a time, continuing the same chains, while the
draws have not converged (R-hat > 1.01 or bulk ESS < 400, `scalinfer.fit`'s rule), up to ``--max-samples``
(default 4 x ``--samples``): not the CLI's 4 x (500 + 1,000), which costs ~5x as much per fit. An SBC on
unconverged fits tests the sampler as much as the model, and at exactly 300 draws most fits are not converged
(benchmarks/README.md). R-hat (the scalars' worst over the first ``--samples`` draws and over all, and the
summary's), draws per chain and divergences are reported (``fits``). The converged and the diverged runs'
arrays are each padded to the design's 495 rows and masked (`scalinfer.models.surface.data.pad_runs`): the
count of censored runs differs between data sets, and without the padding every fit would compile its own
programs. Ranks are of the
truth among ``--rank-draws`` (99) draws thinned evenly from the posterior; uniformity by a chi-square test on
``--bins`` equal bins (``chi2_p``) and by whether the ranks' ECDF stays inside the 95% simultaneous band
(`arviz_stats.ecdf_utils.ecdf_pit`, ``ecdf_in_band``). Parameters ranked: the natural exponents of eta* and B*,
kappa1, the scatters and sigma0 (per variant: they do not depend on the target).

    nice -n 10 .venv/bin/python benchmarks/sbc.py [--datasets 25] [--variants well_specified,curved_laws]
        [--chains 2 --warmup 300 --samples 300 --max-samples 1200] [--prior population] [--quick] [--seed 0]

The variants share their data sets' population draws and seeds (the rows differ by the departure only), so
differences between rows are paired. Costs and figures: benchmarks/README.md.

Prints one line per data set, a table per target ratio and variant, and as its LAST line one JSON object:
``{"rows": [{"variant", "ratio", "n", "coverage_90": {"lr_opt", "batch_opt"}, "coverage_50": {...}, "se_90",
"se_50", "sbc": {"lr_opt": {"chi2_p", "ecdf_in_band"}, "batch_opt": {...}}}, ...], "parameters_sbc": {variant:
{name: {...}}}, "censored_fraction": .., "fits": {"rhat_max", ...}, ...}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import numpy as np
import pandas as pd

#: 3 sizes x 3 budgets, 11 LRs x 5 batches (495 runs)
CAL_DESIGN = {"N": (1e8, 2e8, 4e8), "tokens_per_param": (20.0, 40.0, 80.0),
              "log2_lr": np.arange(-15, -4), "log2_batch": np.arange(15, 24, 2)}
#: the targets' N over the largest fitted N; their D is TARGET_TPP x N
RATIOS = (2, 10, 100)
TARGET_TPP = 40.0
#: a simulated loss above this (nats/token: a uniform guess over a 22k vocabulary) is recorded as diverged
LOSS_CAP = 10.0
#: m_y of the population's loss law: log 3 nats/token
LOG_LOSS_MIDDLE = float(np.log(3.0))
VARIANTS = ("well_specified", "nonseparable_valley", "curved_laws", "heteroscedastic")
#: natural-scale parameters whose ranks are reported
PARAMS = ("lr_opt_exp_N", "lr_opt_exp_D", "batch_opt_exp_N", "batch_opt_exp_D", "kappa1", "tau_lr", "tau_b",
          "tau_lr_size", "tau_b_size", "sigma0")
QUANTITIES = ("lr_opt", "batch_opt")


def calibration_design() -> pd.DataFrame:
    """`CAL_DESIGN` as a table (N, D, lr, batch_tokens)."""
    d = CAL_DESIGN
    rows = [(n, n * t, 2.0 ** a, 2.0 ** b) for n in d["N"] for t in d["tokens_per_param"]
            for a in d["log2_lr"] for b in d["log2_batch"]]
    return pd.DataFrame(rows, columns=["N", "D", "lr", "batch_tokens"])


def padded_surface(rows: int, prior: str):
    """The surface model (option ``prior``) fitting its runs padded to `rows` (`pad_runs`). A study's model: its
    fits are not for saving (their log-likelihood group holds the padding's zeros)."""
    from scalinfer.models.surface import Surface
    from scalinfer.models.surface.data import pad_runs

    @dataclasses.dataclass(frozen=True)
    class PaddedSurface(Surface):
        rows: int = 0

        def model_kwargs(self, data, constants):
            return pad_runs(super().model_kwargs(data, constants), self.rows)

        def options(self):
            return {k: v for k, v in super().options().items() if k != "rows"}

    return PaddedSurface(prior=prior, rows=rows)


def centering(design: pd.DataFrame) -> dict[str, float]:
    """The design's middles and half-ranges of log N, log D, log LR, log batch (as the fit computes them)."""
    out = {}
    for col, m, h in (("N", "m_N", "h_N"), ("D", "m_D", "h_D"), ("lr", "m_lr", None), ("batch_tokens", "m_b", None)):
        v = np.log(design[col].to_numpy(float))
        out[m] = 0.5 * (v.min() + v.max())
        if h:
            out[h] = 0.5 * (v.max() - v.min())
    return out


def draw_population(pr, c: dict[str, float], rng: np.random.Generator) -> dict[str, float]:
    """Natural-scale parameters of one data set from the population (the module docstring): the priors `pr` (a
    `scalinfer.models.surface.priors.Priors`, the fit's) on the design's centering `c`, and diverge_above ~
    Uniform(1, 2)."""
    q: dict[str, float] = {"ref_logN": c["m_N"], "ref_logD": c["m_D"]}
    for law, v, mid in (("lr_opt", "lr", c["m_lr"]), ("batch_opt", "b", c["m_b"]),
                        ("loss_opt", "loss", LOG_LOSS_MIDDLE)):
        mean0, mean_N, sd0, sd_N = pr.law(v)
        mean_D, sd_D = {"lr": pr.lr_exp_D, "b": pr.batch_exp_D, "loss": (0.0, pr.loss_exponent_sd)}[v]
        e_N, e_D = mean_N + sd_N * rng.standard_normal(), mean_D + sd_D * rng.standard_normal()
        q[f"{law}_exp_N"], q[f"{law}_exp_D"] = e_N, e_D
        # the law's value at the design's middle (log N, log D) = (m_N, m_D) is mid + N(mean0, sd0)
        q[f"{law}_log_coef"] = mid + mean0 + sd0 * rng.standard_normal() - e_N * c["m_N"] - e_D * c["m_D"]
        q[f"tau_{v}_size"] = float(np.sqrt(pr.size(v)[1] / rng.gamma(pr.size(v)[0])))  # tau^2 ~ InvGamma
    q["kappa1"] = pr.kappa1[0] + pr.kappa1[1] * rng.standard_normal()
    q["kappa2"] = pr.kappa2_sd * rng.standard_normal()
    for v in ("lr", "b"):
        mean, sd = getattr(pr, f"c_{v}0")
        q[f"log_c_{v}"] = mean + sd * rng.standard_normal()
        q[f"c_{v}_exp_N"], q[f"c_{v}_exp_D"] = pr.curvature_exponent_sd * rng.standard_normal(2)
        mean, sd = getattr(pr, f"delta_{v}")
        q[f"delta_{v}"] = mean + sd * rng.standard_normal()
        q[f"p_{v}"] = float(pr.p(rng.beta(*getattr(pr, f"p_{v}_beta"))))
    q["tau_lr"], q["tau_b"] = np.abs(pr.tau_optimum_sd * rng.standard_normal(2))
    q["tau_loss"] = abs(pr.tau_loss_sd * rng.standard_normal())
    q["sigma0"] = abs(pr.sigma0_sd * rng.standard_normal())
    q["sigma1"] = abs(pr.sigma1_sd * rng.standard_normal())
    q["nu"] = rng.gamma(pr.nu[0], 1.0 / pr.nu[1])  # Gamma(concentration, rate)
    q["diverge_above"] = rng.uniform(1.0, 2.0)
    return {k: float(v) for k, v in q.items()}


def draw_variant(name: str, rng: np.random.Generator):
    """The departure of variant `name` for one data set (the module docstring), None for ``well_specified``."""
    from scalinfer.models.surface.simulate import Variant

    if name == "well_specified":
        return None
    if name == "nonseparable_valley":
        w, a = 0.3 * rng.standard_normal(2)
        return Variant(lr_width_per_log_batch=float(w), lr_asymmetry_per_log_batch=float(a))
    if name == "curved_laws":
        q_lr, q_b = 0.02 * rng.standard_normal(2)
        return Variant(lr_opt_curv_N=float(q_lr), batch_opt_curv_N=float(q_b))
    if name == "heteroscedastic":
        return Variant(noise_N_exp=1.0)
    raise ValueError(f"unknown variant {name!r}")


def target_truth(q: dict[str, float], variant, N: np.ndarray, D: np.ndarray, rng: np.random.Generator
                 ) -> dict[str, np.ndarray]:
    """log eta* and log B* of a new setting of a new size at each (N, D): the laws (`law_optima`, with the
    variant's curved terms) plus the setting's own offsets tau * eps and the size's tau_size * e."""
    from scalinfer.models.surface.simulate import law_optima

    law = law_optima(q, N, D, variant)
    eps, e_size = rng.standard_normal((2, 2, len(N)))
    return {"lr_opt": law["lr_opt"] + q["tau_lr"] * eps[0] + q["tau_lr_size"] * e_size[0],
            "batch_opt": law["batch_opt"] + q["tau_b"] * eps[1] + q["tau_b_size"] * e_size[1]}


def rank_of(truth: float, draws: np.ndarray, L: int) -> int:
    """Rank of `truth` among `L` draws thinned evenly from `draws` (0..L)."""
    idx = np.linspace(0, len(draws) - 1, L).round().astype(int)
    return int(np.sum(np.asarray(draws)[idx] < truth))


def uniformity(ranks: list[int], L: int, bins: int) -> dict[str, float]:
    """Chi-square p-value of the ranks (0..L) in `bins` equal bins, and whether their ECDF stays in the 95%
    simultaneous band (`arviz_stats.ecdf_utils.ecdf_pit`)."""
    from arviz_stats.ecdf_utils import ecdf_pit
    from scipy import stats

    r = np.asarray(ranks, float)
    if r.size < 2:
        return {"chi2_p": None, "ecdf_in_band": None}
    counts = np.bincount(np.minimum((r * bins / (L + 1)).astype(int), bins - 1), minlength=bins)
    pit = (r + 0.5) / (L + 1)
    _, ecdf, lo, hi = ecdf_pit(pit, 0.95, 1000, rng=np.random.default_rng(214))
    return {"chi2_p": float(stats.chisquare(counts).pvalue), "ecdf_in_band": bool(np.all((ecdf >= lo) & (ecdf <= hi))),
            "mean_rank": float(r.mean() / L)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=25, help="data sets per variant (default 25)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300, help="draws per chain")
    ap.add_argument("--max-samples", type=int, default=None,
                    help="draw more per chain, --samples at a time, up to this, while a fit has not converged "
                    "(`scalinfer.fit`'s max_samples; default 4 x --samples; --samples: exactly --samples)")
    ap.add_argument("--rank-draws", type=int, default=99, help="posterior draws the truth is ranked among")
    ap.add_argument("--bins", type=int, default=5, help="bins of the chi-square test of the ranks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prior", default=None, help="the surface model's option prior, drawn from and fitted with "
                    "(default: the model's default)")
    ap.add_argument("--quick", action="store_true", help="3 data sets per variant, 2 x (150 + 150): a smoke run")
    ap.add_argument("--no-divergence", action="store_true",
                    help="a diagnostic: no simulated run diverges (diverge_above 100) and the fit censors none by "
                    "its loss ratio (divergence_ratio 1e6); only losses above LOSS_CAP stay censored")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        ap.error(f"--variants: unknown {', '.join(bad) or '(none)'}; choose from {', '.join(VARIANTS)}")
    if args.quick:
        args.datasets, args.warmup, args.samples = min(args.datasets, 3), 150, 150
    if args.datasets < 1 or args.chains < 1 or args.samples < 1 or args.rank_draws < 1 or args.bins < 2:
        ap.error("--datasets, --chains, --samples, --rank-draws must be at least 1, --bins at least 2")
    if args.max_samples is None:
        args.max_samples = 4 * args.samples
    if args.max_samples < args.samples:
        ap.error(f"--max-samples {args.max_samples} is below --samples {args.samples}")

    from scalinfer.runtime import configure

    configure(args.chains)
    from arviz_stats import rhat

    import scalinfer
    from scalinfer.errors import ScalinferError
    from scalinfer.models.surface import MODEL
    from scalinfer.models.surface.population import PRIOR_SETS
    from scalinfer.models.surface.simulate import simulate
    from scalinfer.runs.schema import validate

    prior = args.prior or MODEL.prior
    if prior not in PRIOR_SETS:
        ap.error(f"--prior: {prior!r} is not one of {', '.join(PRIOR_SETS)}")

    design = calibration_design()
    model = padded_surface(len(design), prior)
    if args.no_divergence:
        model = dataclasses.replace(model, divergence_ratio=1e6)
    c = centering(design)
    N_max = design["N"].max()
    N_T = np.array([r * N_max for r in RATIOS])
    D_T = TARGET_TPP * N_T
    L = args.rank_draws
    res = {v: {"in50": {q: [] for q in QUANTITIES}, "in90": {q: [] for q in QUANTITIES},
               "rank": {q: [] for q in QUANTITIES}, "param_rank": {k: [] for k in PARAMS}} for v in variants}
    fits = {"rhat_max": [], "divergences": [], "wall_s": [], "failed": 0, "variant": [], "draws": [],
            "rhat_scalar_first": [], "rhat_scalar_all": []}
    censored = {v: [] for v in variants}
    t_all = time.perf_counter()
    def report(done: int):
        """The rows, the parameters' SBC, and the table printed (after `done` data sets per variant)."""
        rows = []
        for v in variants:
            r = res[v]
            for j, ratio in enumerate(RATIOS):
                sel = {key: {name: [h for jj, h in r[key][name] if jj == j] for name in QUANTITIES}
                       for key in ("in50", "in90", "rank")}
                n = len(sel["in90"]["lr_opt"])
                row = {"variant": v, "ratio": f"{ratio}x", "n": n,
                       "coverage_90": {name: float(np.mean(sel["in90"][name])) if n else None for name in QUANTITIES},
                       "coverage_50": {name: float(np.mean(sel["in50"][name])) if n else None for name in QUANTITIES},
                       "se_90": float(np.sqrt(0.9 * 0.1 / n)) if n else None,
                       "se_50": float(np.sqrt(0.5 * 0.5 / n)) if n else None,
                       "sbc": {name: uniformity(sel["rank"][name], L, args.bins) for name in QUANTITIES}}
                rows.append(row)
        params_sbc = {v: {name: uniformity(res[v]["param_rank"][name], L, args.bins) for name in PARAMS
                          if res[v]["param_rank"][name]} for v in variants}

        print(f"\nafter {done} data set(s) per variant\n{'variant':<20} {'ratio':>5} {'n':>3}  {'cov90 lr':>8} "
              f"{'cov90 B':>8} {'cov50 lr':>8} {'cov50 B':>8}  {'SBC p lr':>8} {'SBC p B':>8}")
        for row in rows:
            f = lambda x: "   -    " if x is None else f"{x:8.2f}"  # noqa: E731
            print(f"{row['variant']:<20} {row['ratio']:>5} {row['n']:>3}  {f(row['coverage_90']['lr_opt'])} "
                  f"{f(row['coverage_90']['batch_opt'])} {f(row['coverage_50']['lr_opt'])} "
                  f"{f(row['coverage_50']['batch_opt'])}  {f(row['sbc']['lr_opt']['chi2_p'])} "
                  f"{f(row['sbc']['batch_opt']['chi2_p'])}")
        for v, ps in params_sbc.items():
            cells = [f"{k} {'-' if x['chi2_p'] is None else round(x['chi2_p'], 2)}"
                     f"{' (out of band)' if x['ecdf_in_band'] is False else ''}" for k, x in ps.items()]
            print(f"parameters' SBC chi-square p ({v}): " + ", ".join(cells))
        return rows, params_sbc

    for k in range(args.datasets):  # data sets outer: an interrupted run has every variant at the same count
        seed = args.seed + k  # the same population draws in every variant: rows differ by the departure only
        q = draw_population(PRIOR_SETS[prior], c, np.random.default_rng([seed, 21]))
        if args.no_divergence:
            q["diverge_above"] = 100.0
        for v in variants:
            variant = draw_variant(v, np.random.default_rng([seed, 22]))
            df = simulate(q, design, seed=seed, variant=variant)
            over = df["loss"].to_numpy(float) > LOSS_CAP  # far down a steep valley: recorded as diverged
            df.loc[over, "loss"], df.loc[over, "diverged"] = np.nan, True
            truth = target_truth(q, variant, N_T, D_T, np.random.default_rng([seed, 23]))
            censored[v].append(float(df["diverged"].mean()))
            t0 = time.perf_counter()
            try:
                runs = validate(df.drop(columns=["true_lr_opt", "true_batch_opt", "true_loss_opt"]),
                                source=f"sbc data set {v} {seed}", kind="runs")
                fit = scalinfer.fit(runs, model=model, chains=args.chains, warmup=args.warmup,
                                    samples=args.samples, max_samples=args.max_samples, seed=seed)
            except ScalinferError as e:
                fits["failed"] += 1
                print(f"[{v} {k + 1}/{args.datasets}] seed {seed}: not fitted: {e}", flush=True)
                continue
            wall = time.perf_counter() - t0
            pred = fit.model.predict(fit.draws(), fit.constants, N=N_T, D=D_T)
            r = res[v]
            for name in QUANTITIES:
                logd = np.log(pred[name])  # (n_draws, 3)
                for j in range(len(RATIOS)):
                    t = truth[name][j]
                    for ci, key in ((0.5, "in50"), (0.9, "in90")):
                        lo, hi = np.quantile(logd[:, j], [(1 - ci) / 2, (1 + ci) / 2])
                        r[key][name].append((j, bool(lo <= t <= hi)))
                    r["rank"][name].append((j, rank_of(t, logd[:, j], L)))
            draws = fit.draws([k2 for k2 in PARAMS if k2 in fit.posterior.data_vars])
            for name, vals in draws.items():
                r["param_rank"][name].append(rank_of(q[name], vals, L))
            s = fit.summary()
            rh = [x["r_hat"] for x in s.values() if np.isfinite(x["r_hat"])]
            fits["rhat_max"].append(max(rh) if rh else float("nan"))
            fits["divergences"].append(fit.divergences)
            fits["wall_s"].append(wall)
            fits["draws"].append(int(fit.posterior.sizes["draw"]))
            # the scalar parameters' worst R-hat over the first --samples draws and over all: an extended run is
            # one long run, so the first is what the fit without extension would have had
            scalar = [k2 for k2 in fit.posterior.data_vars if fit.posterior[k2].ndim == 2]
            for key, n in (("rhat_scalar_first", args.samples), ("rhat_scalar_all", None)):
                fits[key].append(max(float(rhat(np.asarray(fit.posterior[k2])[:, :n], chain_axis=0, draw_axis=1))
                                     for k2 in scalar))
            fits["variant"].append(v)
            last = {name: r["in90"][name][-len(RATIOS):] for name in QUANTITIES}
            hits = " ".join(f"{ratio}x:{int(last['lr_opt'][j][1])}{int(last['batch_opt'][j][1])}"
                            for j, ratio in enumerate(RATIOS))
            print(f"[{v} {k + 1}/{args.datasets}] seed {seed}: censored {censored[v][-1]:.2f}, in90 (lr,batch) {hits}, "
                  f"R-hat max {fits['rhat_max'][-1]:.3f} after {fits['draws'][-1]} draws per chain (scalars "
                  f"{fits['rhat_scalar_first'][-1]:.3f} after {args.samples}), {fit.divergences} div, "
                  f"{wall:.1f} s", flush=True)

        if k + 1 < args.datasets:
            report(k + 1)

    rows, params_sbc = report(args.datasets)
    rmax = np.asarray(fits["rhat_max"], float)
    out = {"rows": rows, "parameters_sbc": params_sbc,
           "censored_fraction": float(np.mean([x for v in variants for x in censored[v]])),
           "censored_fraction_by_variant": {v: float(np.mean(censored[v])) for v in variants},
           "fits": {"rhat_max": float(np.nanmax(rmax)) if rmax.size else None,
                    "rhat_max_median": float(np.nanmedian(rmax)) if rmax.size else None,
                    "fits_rhat_above_1.01": int(np.sum(rmax > 1.01)), "divergences": int(np.sum(fits["divergences"])),
                    "n": int(rmax.size), "failed": fits["failed"],
                    "wall_s_median": float(np.median(fits["wall_s"])) if fits["wall_s"] else None,
                    "draws_per_chain_median": float(np.median(fits["draws"])) if fits["draws"] else None,
                    "fits_extended": int(np.sum(np.asarray(fits["draws"]) > args.samples)),
                    "rhat_scalar_first_median": float(np.nanmedian(fits["rhat_scalar_first"])) if rmax.size else None,
                    "rhat_scalar_all_median": float(np.nanmedian(fits["rhat_scalar_all"])) if rmax.size else None,
                    "rhat_scalar_first_above_1.01": int(np.sum(np.asarray(fits["rhat_scalar_first"]) > 1.01)),
                    "rhat_scalar_all_above_1.01": int(np.sum(np.asarray(fits["rhat_scalar_all"]) > 1.01)),
                    "rhat_above_1.01_by_variant": {v: int(np.sum(rmax[np.asarray(fits["variant"]) == v] > 1.01))
                                                   for v in variants}},
           "settings": {"prior": prior, "no_divergence": args.no_divergence, "datasets": args.datasets,
                        "chains": args.chains, "warmup": args.warmup, "samples": args.samples,
                        "max_samples": args.max_samples, "rank_draws": L,
                        "bins": args.bins, "seed": args.seed,
                        "design": {k: [float(x) for x in np.ravel(val)] for k, val in CAL_DESIGN.items()},
                        "n_runs_per_dataset": len(design), "targets_N": N_T.tolist(), "targets_D": D_T.tolist()},
           "total_wall_s": time.perf_counter() - t_all}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
