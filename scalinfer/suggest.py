r"""Which calibration run to buy next: the preposterior value of a candidate run, per FLOP.

For a ``surface`` fit (`scalinfer.models.surface`) and a target (N, D), the quantity to learn is
:math:`g = \log \eta^*` at the target (``lr_opt`` by default; any of ``predict``'s positive quantities at the
target, e.g. ``batch_opt``, by `target`), per posterior draw, for a new setting at the target (its own offsets,
as ``predict`` draws them). A candidate run c = (N_c, D_c, lr_c, B_c) would add one observation
:math:`y_c = \log L_c`. Its value is the *expected reduction of the posterior variance of g* once y_c is
known, before it is known (the preposterior analysis):

.. math::

    R(c) = \mathrm{Var}(g) - E_{y_c}\big[\mathrm{Var}(g \mid y_c)\big], \qquad
    \text{score}(c) = R(c) / (6 N_c D_c)

(variance in squared natural-log units, per training FLOP of the candidate). No refit per candidate: the
posterior after y_c is the current draws reweighted by the candidate's likelihood (importance sampling),

.. math::

    w_d \propto p(y_c \mid \theta_d) = t_{\nu_d}\big(y_c;\ \mu_d(c),\ \sigma_{0,d} + \sigma_{1,d}\, e_d(c)\big)

the model's own likelihood of a converged run (`scalinfer.models.surface.model`: mean log loss
:math:`\mu_d(c)` and its excess over the setting's optimum :math:`e_d(c)`). The outcome is simulated from
the posterior predictive: for K draws k, :math:`y_k = \mu_k(c) + \sigma_k(c)\, t_{\nu_k}`, and

.. math::

    E[\mathrm{Var}(g \mid y_c)] \approx \frac1K \sum_k \widehat{\mathrm{Var}}_{w^{(k)}}(g), \qquad
    \widehat{\mathrm{Var}}_w(g) = \frac{\sum_d w_d (g_d - \bar g_w)^2}{1 - \sum_d w_d^2}

with draw k's own weight set to 0 (the outcome was simulated from it, so it would vouch for itself), and the
weighted variance's small-sample correction (the denominator, weights normalised): without both, a candidate
that cannot inform g (reweighting that is independent of g) would still seem to shrink the variance by about
Var(g) / ESS. With them it scores ~0, up to Monte Carlo noise of that order. ``width_after`` is the ``ci``
interval's width after, as a factor (hi / lo, natural scale): today's, shrunk as the standard deviation,
:math:`(\text{hi}/\text{lo})^{\sqrt{E[\mathrm{Var}(g \mid y_c)] / \mathrm{Var}(g)}}` (exact for a Gaussian
posterior; weighted quantiles of a few effective draws are too coarse to say more).

Which offsets the candidate's setting has. A candidate at a setting of the fit (its (N, D) within 0.5% of a
fitted setting's) uses that setting's posterior offsets (eps_lr, eps_b, ell and its size's level), so it is
correlated with what the fit already knows there; a candidate at the target's (N, D) shares the target's new
setting (a run at the target informs the target's own offsets); any other candidate is a new setting with its
own offsets (`scalinfer.models.surface.predict`, an independent seed per setting).

Several runs at once (``picks`` = k > 1). The scores above are each candidate's value *alone*: two
candidates that would teach the same thing (two runs a few percent apart in LR) score alike, and the top k
of that ranking buys the same information k times. With ``picks`` = k the runs are chosen one after another,
each given the ones before it, by the "believer" rule of batch design (Ginsbourger et al., 2010): after a
pick c, its outcome is taken to be its posterior predictive mean :math:`\bar y_c = \sum_d w_d \mu_d(c)`, the
draws' weights become :math:`w_d \leftarrow w_d\, p(\bar y_c \mid \theta_d)`, and every other candidate
is scored again under the weighted draws (the variance now, the simulated outcomes and the reweighting all
use w). A candidate that repeats what a pick already teaches then scores little. Columns ``pick`` (1..k in
the order chosen; 0 for the rest) and ``variance_reduction_given_picks`` (its cut given the picks before it;
NaN for the rest); the picks come first in the table, the rest follow by ``score``. Each believed outcome
concentrates the weights, so later picks are scored on fewer effective draws: their order is rougher than the
first's (more draws help: ``max_draws``, a longer fit).

Runs with decay branches (``branches`` = K > 0). A WSD run to D can fork decay branches that end at
:math:`D 2^{-k}`, k = 1..K (`scalinfer plan` lays sweeps out so; the trainer runs them), and each branch's end
is one more record of the same (N, lr, B). With ``branches`` each candidate (N, D, lr, B) is such a run: its
K + 1 records are simulated together (independent noise given a draw) and the draws reweighted by their joint
likelihood, so the candidate's cut is what the whole run teaches. Its cost is the run's 6 N D plus each
branch's decay past its fork, a share f (``decay_fraction``, plan's 0.2) of the branch's tokens:
:math:`6 N D \,(1 + f \sum_{k=1}^{K} 2^{-k})`. Each record sits at its own setting (N, D 2^-k), fitted, the
target's or new, as above.

Assumptions: the candidate converges (a diverged run carries less: for candidates far above the optimum the
score is an upper bound); the importance weights are only as good as the draws cover the updated posterior
(``ess`` reports the mean effective sample size of the weights: far below 100, the candidate is so informative
that the reweighted variance is noisy: its ranking stands, its ``width_after`` is rough).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.runtime import float64

__all__ = ["suggest", "Suggestion", "default_candidates", "check_candidates", "CANDIDATE_COLUMNS",
           "DECAY_FRACTION", "MAX_BRANCHES"]

#: `scalinfer plan`'s decay fraction: a decay branch spends this share of its tokens decaying past its fork
DECAY_FRACTION = 0.2
#: at most this many decay branches per candidate run (branch k ends at D 2^-k)
MAX_BRANCHES = 10
#: the columns of a candidate table (a CSV for ``scalinfer suggest --candidates``): model size, tokens, peak
#: LR, batch in tokens per step
CANDIDATE_COLUMNS = ("N", "D", "lr", "batch")
_SAME = math.log(1.005)  # two sizes (token counts) within 0.5% are the same


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """What `suggest` returns: ``table`` (one row per candidate, best first: ``N``, ``D``, ``lr``, ``batch``,
    ``flops`` = 6 N D (with its decay branches' cost where ``branches`` > 0, then also a column ``branches``),
    ``setting`` (``fitted``, ``target`` or ``new``, of the run's own end), ``variance_reduction`` (R, squared log
    units), ``score`` (R per FLOP), ``width_after`` (expected hi/lo of g's interval after the run), ``ess``;
    with ``picks`` > 1 also ``pick`` and ``variance_reduction_given_picks``, the picks first), the target and
    ``quantity``, ``variance`` (Var(g) now) and ``width_now`` (hi/lo now), ``ci``, ``warnings``."""

    table: pd.DataFrame
    targets: dict[str, float]
    quantity: str
    variance: float
    width_now: float
    ci: float
    warnings: tuple[str, ...] = ()

    def top(self, k: int = 10) -> pd.DataFrame:
        """The `k` best candidates."""
        return self.table.head(k)

    def to_dict(self, k: int | None = None) -> dict[str, Any]:
        """The JSON answer: the target, the quantity, its variance and width now, and the ranked candidates (the
        `k` best; all without `k`)."""
        rows = (self.table if k is None else self.table.head(k)).to_dict(orient="records")
        return {"targets": dict(self.targets), "quantity": self.quantity,
                "definition": f"expected reduction of the posterior variance of log {self.quantity} at the target "
                              "per training FLOP of the candidate (6 N D, and its decay branches' decays where it "
                              "has branches), by importance reweighting the draws with the candidate's simulated "
                              "outcome (all its records')",
                "variance_now": self.variance, "width_now": self.width_now, "ci": self.ci,
                "candidates": [{k_: (v.item() if hasattr(v, "item") else v) for k_, v in r.items()} for r in rows],
                "warnings": list(self.warnings)}

    def to_text(self, k: int = 10) -> str:
        """The `k` best candidates as a table (what ``scalinfer suggest`` prints)."""
        t = self.targets
        lines = [f"target: log {self.quantity} at N {t['N']:.4g}, D {t['D']:.4g}: variance {self.variance:.3g}, "
                 f"{100 * self.ci:g}% interval hi/lo {self.width_now:.3g} now",
                 f"{'rank':>4} {'N':>10} {'D':>10} {'lr':>10} {'batch':>10} {'FLOPs':>10} {'setting':>8} "
                 f"{'var cut':>9} {'per EFLOP':>10} {'hi/lo after':>11}"]
        for i, r in enumerate(self.table.head(k).itertuples(index=False), 1):
            lines.append(f"{i:>4} {r.N:>10.4g} {r.D:>10.4g} {r.lr:>10.4g} {r.batch:>10.4g} {r.flops:>10.3g} "
                         f"{r.setting:>8} {r.variance_reduction:>9.3g} {r.score * 1e18:>10.3g} "
                         f"{r.width_after:>11.3g}")
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def _check_fit(fit, who: str) -> None:
    if fit.model.name != "surface":
        raise ModelError(f"{who}: needs a fit of the surface model (LR and batch); this is a fit of "
                         f"{fit.model.name!r}")
    if fit.constants.get("design", 0.0):
        raise ModelError(f"{who}: needs a fit of the full surface (a table that varies both LR and batch); this "
                         "fit's table has one batch or one LR")


def check_candidates(candidates) -> pd.DataFrame:
    """A candidate table (DataFrame, or rows of (N, D, lr, batch)) as a float DataFrame of those four columns; a
    missing column or a value that is not a positive finite number is a one-line `ModelError` naming it."""
    df = candidates if isinstance(candidates, pd.DataFrame) else pd.DataFrame(
        list(candidates), columns=list(CANDIDATE_COLUMNS))
    missing = [c for c in CANDIDATE_COLUMNS if c not in df.columns]
    if missing:
        raise ModelError(f"suggest: the candidates lack column(s) {', '.join(missing)} (need "
                         f"{', '.join(CANDIDATE_COLUMNS)})")
    if not len(df):
        raise ModelError("suggest: no candidates")
    out = df[list(CANDIDATE_COLUMNS)].apply(pd.to_numeric, errors="coerce").astype(float)
    bad = ~(np.isfinite(out.to_numpy()) & (out.to_numpy() > 0))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ModelError(f"suggest: candidate row {i} has {CANDIDATE_COLUMNS[j]} = {df.iloc[i, j]!r}; every N, D, "
                         "lr, batch must be a positive finite number")
    return out.reset_index(drop=True)


def _settings(fit) -> tuple[np.ndarray, np.ndarray]:
    """log N and log D of each fitted setting."""
    c, cd = fit.constants, fit.tree["constant_data"]
    return (np.asarray(cd["n_s"], float) * c["h_N"] + c["m_N"], np.asarray(cd["d_s"], float) * c["h_D"] + c["m_D"])


def default_candidates(fit, N: float, D: float, lr_factors=(0.25, 0.5, 1.0, 2.0, 4.0),
                       batch_factors=(0.25, 1.0, 4.0), seed: int = 0) -> pd.DataFrame:
    """A grid around the current design: at each fitted (N, D) setting and at one size step beyond the largest
    (2x its N at the same tokens per parameter), batches `batch_factors` x the posterior median B* there and at
    each batch LRs `lr_factors` x the median best LR at that batch."""
    _check_fit(fit, "suggest")
    log_n, log_d = _settings(fit)
    pts = sorted({(float(f"{np.exp(a):.6g}"), float(f"{np.exp(b):.6g}")) for a, b in zip(log_n, log_d)})
    big = max(pts)
    pts.append((2 * big[0], 2 * big[1]))
    rows = []
    for n, d in pts:
        b_star = float(np.median(fit.model.predict(fit.draws(), fit.constants, N=n, D=d, seed=seed)["batch_opt"]))
        bs = b_star * np.asarray(batch_factors, float)
        ridge = fit.model.predict(fit.draws(), fit.constants, N=n, D=d, batch=bs, seed=seed)["lr_opt_at_batch"]
        for b, lr0 in zip(bs, np.median(ridge, 0)):
            rows += [(n, d, lr0 * f, b) for f in lr_factors]
    return pd.DataFrame(rows, columns=list(CANDIDATE_COLUMNS))


def _fitted_terms(fit, draws, idx: int, lr: np.ndarray, batch: np.ndarray):
    """(mean log loss, excess) per draw x candidate at fitted setting `idx`: the model's own surface there."""
    from scalinfer.models.surface.loss import surface_terms

    c, cd = fit.constants, fit.tree["constant_data"]
    n_s, d_s = (np.asarray(cd[k], float) for k in ("n_s", "d_s"))
    size_s = np.asarray(cd["size_s"]).astype(int) if c.get("size_scatter") else None
    p = {k: (v[:, None] if v.ndim == 1 else v) for k, v in draws.items()}
    s = np.full(len(lr), idx)
    mu, excess = surface_terms(p, n_s, d_s, s, np.log(lr)[None, :] - c["m_lr"], np.log(batch)[None, :] - c["m_b"],
                               size_s)
    return np.asarray(mu) + c["m_y"], np.asarray(excess)


def _new_terms(fit, draws, N: float, D: float, lr: np.ndarray, batch: np.ndarray, seed: int):
    """(mean log loss, excess) per draw x candidate at a new setting (N, D) drawn with `seed`."""
    out = fit.model.predict(draws, fit.constants, N=N, D=D, lr=lr, batch=batch, seed=seed)
    log_loss = np.log(out["loss"])
    return log_loss, np.maximum(log_loss - np.log(out["loss_opt"]), 0.0)


def _record_terms(fit, draws, records: pd.DataFrame, N: float, D: float, seed: int):
    """(mean log loss, excess) per draw x record, and each record's setting kind (``fitted``, ``target``, ``new``):
    a record at a fitted setting uses that setting's offsets, one at the target's (N, D) the target's new
    setting, any other a new setting of its own (one seed per distinct (N, D))."""
    log_n, log_d = _settings(fit)
    S = len(draws["tau_loss"])
    mu = np.empty((S, len(records)))
    exc = np.empty_like(mu)
    kind = np.empty(len(records), dtype=object)
    groups = records.groupby([records["N"].round(-3), records["D"].round(-3)], sort=False).indices
    for j, (_, rows) in enumerate(groups.items()):
        n_c, d_c = float(records["N"].iloc[rows[0]]), float(records["D"].iloc[rows[0]])
        lr, b = records["lr"].to_numpy()[rows], records["batch"].to_numpy()[rows]
        hit = np.flatnonzero((np.abs(log_n - math.log(n_c)) < _SAME) & (np.abs(log_d - math.log(d_c)) < _SAME))
        if hit.size:
            mu[:, rows], exc[:, rows] = _fitted_terms(fit, draws, int(hit[0]), lr, b)
            kind[rows] = "fitted"
        elif abs(math.log(n_c / N)) < _SAME and abs(math.log(d_c / D)) < _SAME:
            mu[:, rows], exc[:, rows] = _new_terms(fit, draws, n_c, d_c, lr, b, seed)
            kind[rows] = "target"
        else:
            mu[:, rows], exc[:, rows] = _new_terms(fit, draws, n_c, d_c, lr, b, seed + 1 + j)
            kind[rows] = "new"
    return mu, exc, kind


@float64
def suggest(fit, N: float, D: float, candidates=None, *, target: str = "lr_opt", ci: float = 0.9,
            n_outcomes: int = 200, max_draws: int = 1000, seed: int = 0, picks: int = 1, branches: int = 0,
            decay_fraction: float = DECAY_FRACTION) -> Suggestion:
    """Rank candidate calibration runs by the expected reduction of the posterior variance of log `target` at
    (N, D) per FLOP (the module docstring's preposterior analysis).

    Parameters
    ----------
    fit : a `scalinfer.Fit` of the ``surface`` model (full design).
    N, D : the target: parameters (as fitted) and training tokens.
    candidates : a DataFrame (or rows) with columns N, D, lr, batch (tokens per step); None: `default_candidates`.
    target : the quantity of ``predict`` at (N, D) whose log is to be learned: ``lr_opt`` (default),
        ``batch_opt`` (the loss-optimal batch) or ``loss_opt``.
    ci : credible mass of the intervals whose widths are reported (default 0.9).
    n_outcomes : K, simulated outcomes per candidate.
    max_draws : at most this many posterior draws (evenly thinned).
    seed : the target's new-setting offsets (as in ``predict``) and the simulated outcomes.
    picks : how many runs to buy at once: chosen one after another, each given the ones before it (the module
        docstring's believer rule); 1 (default): the ranking of each candidate alone.
    branches : K, decay branches per candidate run: each candidate (N, D, lr, batch) is a WSD run to D that also
        reports its loss at D 2^-k, k = 1..K (the module docstring's "Runs with decay branches"); 0 (default):
        each candidate is one run, one observation.
    decay_fraction : with `branches`, the share of each branch's tokens spent decaying (the cost of a branch
        beyond the run it forks from); `scalinfer plan`'s default.
    """
    _check_fit(fit, "suggest")
    for name, v in (("N", N), ("D", D)):
        if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v) and v > 0):
            raise ModelError(f"suggest: {name} must be a positive finite number, got {v!r}")
    if target not in ("lr_opt", "batch_opt", "batch_loss_opt", "loss_opt"):
        raise ModelError(f"suggest: target must be lr_opt, batch_opt (batch_loss_opt) or loss_opt, got {target!r}")
    if not 0 < ci < 1:
        raise ModelError(f"suggest: ci must be between 0 and 1, got {ci!r}")
    if not (isinstance(picks, (int, np.integer)) and picks >= 1):
        raise ModelError(f"suggest: picks must be a whole number of runs, 1 or more, got {picks!r}")
    if not (isinstance(branches, (int, np.integer)) and 0 <= branches <= MAX_BRANCHES):
        raise ModelError(f"suggest: branches must be a whole number from 0 to {MAX_BRANCHES}, got {branches!r}")
    if not (isinstance(decay_fraction, (int, float, np.floating)) and 0 < decay_fraction < 1):
        raise ModelError(f"suggest: decay_fraction must be between 0 and 1, got {decay_fraction!r}")
    if n_outcomes < 2 or max_draws < 10:
        raise ModelError(f"suggest: n_outcomes must be at least 2 and max_draws at least 10, got {n_outcomes}, "
                         f"{max_draws}")
    cands = default_candidates(fit, N, D, seed=seed) if candidates is None else check_candidates(candidates)
    all_draws = fit.draws()
    n = len(all_draws["tau_loss"])
    if n < 10:
        raise ModelError(f"suggest: needs posterior draws (nuts or laplace), this fit has {n}")
    keep = np.unique(np.linspace(0, n - 1, min(n, max_draws)).round().astype(int))
    draws = {k: np.asarray(v)[keep] for k, v in all_draws.items()}
    S = len(keep)
    key = "batch_opt" if target == "batch_loss_opt" else target
    g = np.log(fit.model.predict(draws, fit.constants, N=float(N), D=float(D), seed=seed)[key])
    var_now = float(np.var(g, ddof=1))
    qs = ((1 - ci) / 2, (1 + ci) / 2)
    width_now = float(np.exp(np.diff(np.quantile(g, qs))[0]))

    # each candidate's records (the run's end, then its branches' ends): mean log loss and excess, per draw
    R = branches + 1
    records = pd.DataFrame({"N": np.repeat(cands["N"].to_numpy(), R),
                            "D": np.repeat(cands["D"].to_numpy(), R) * np.tile(0.5 ** np.arange(R), len(cands)),
                            "lr": np.repeat(cands["lr"].to_numpy(), R),
                            "batch": np.repeat(cands["batch"].to_numpy(), R)})
    mu, exc, kind = _record_terms(fit, draws, records, N, D, seed)
    mu, exc = mu.reshape(S, len(cands), R), exc.reshape(S, len(cands), R)
    kind = kind[::R]  # each candidate's own end's
    sigma = draws["sigma0"][:, None, None] + draws["sigma1"][:, None, None] * exc
    nu = draws["nu"]
    unusable = ~np.all(np.isfinite(mu) & np.isfinite(sigma) & (sigma > 0), axis=(0, 2))
    mu[:, unusable], sigma[:, unusable] = 0.0, 1.0  # scored NaN below

    from scipy.special import gammaln

    log_norm = gammaln((nu + 1) / 2) - gammaln(nu / 2) - 0.5 * np.log(nu * np.pi)  # per draw
    K = min(n_outcomes, S)
    if picks > len(cands):
        raise ModelError(f"suggest: picks = {picks} but there are only {len(cands)} candidates")
    reduction, var_after, ess = _score(mu, sigma, nu, log_norm, g, None, K, np.random.default_rng(seed))
    width_after = width_now ** np.sqrt(np.maximum(var_after, 0.0) / var_now)
    reduction[unusable] = width_after[unusable] = ess[unusable] = np.nan
    # a run to D costs 6 N D; each branch k decays over decay_fraction of its D 2^-k tokens beyond its fork
    flops = 6.0 * cands["N"].to_numpy() * cands["D"].to_numpy() * (1 + decay_fraction * (1 - 0.5 ** branches))
    table = cands.assign(flops=flops, setting=kind.astype(str), variance_reduction=reduction,
                         score=reduction / flops, width_after=width_after, ess=ess)
    if branches:
        table = table.assign(branches=branches)
    if picks > 1:
        order, given, ess_picks = _picks(mu, sigma, nu, log_norm, g, reduction / flops, flops, unusable, picks, K,
                                         seed)
        pick = np.zeros(len(cands), int)
        pick[order] = np.arange(1, len(order) + 1)
        table = table.assign(pick=pick, variance_reduction_given_picks=given)
        table = pd.concat([table.iloc[order], table.drop(index=order).sort_values("score", ascending=False,
                                                                                  kind="stable")])
        table = table.reset_index(drop=True)
    else:
        table = table.sort_values("score", ascending=False, kind="stable").reset_index(drop=True)
    warnings = list(fit.warnings())
    if unusable.any():
        warnings.append(f"{int(unusable.sum())} candidate(s) have no finite predicted loss under some draws (far "
                        "outside the fitted range): not scored (NaN, ranked last)")
    if picks > 1 and ess_picks < 100:
        warnings.append(f"after the picks believed before the last, the draws' weights have an effective sample size "
                        f"of {ess_picks:.0f} (below 100): the later picks' order is rough (fewer picks at once, or "
                        "more draws: max_draws, a longer fit)")
    if np.nanmin(ess, initial=np.inf) < 100:
        warnings.append(f"the importance weights of {int(np.sum(ess < 100))} candidate(s) have an effective sample "
                        "size below 100: their variance cut is noisy (more draws: max_draws, a longer fit)")
    return Suggestion(table=table, targets={"N": float(N), "D": float(D)}, quantity=target, variance=var_now,
                      width_now=width_now, ci=ci, warnings=tuple(warnings))


def _log_t(r, sigma, nu, log_norm):
    """The Student-t log density of standardized residuals `r` at scale `sigma`, summed over the last axis (the
    records of one candidate, independent given the draw)."""
    return (log_norm - np.log(sigma) - (nu + 1) / 2 * np.log1p(r * r / nu)).sum(-1)


def _score(mu, sigma, nu, log_norm, g, w0, K: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(variance cut, expected variance after, weights' ESS) of each candidate (axis 1 of `mu`, `sigma`, (draws,
    candidates, records)) under the draws weighted by `w0` (normalised; None: equal weights): K outcomes of its
    records simulated from distinct draws chosen by w0, the draws reweighted by w0 times the outcomes' joint
    likelihood, the outcome's own draw left out (the module docstring)."""
    S, C, R = mu.shape
    if w0 is None:
        w0 = np.full(S, 1.0 / S)
        ks = rng.choice(S, K, replace=False)
    else:
        ks = rng.choice(S, min(K, np.count_nonzero(w0)), replace=False, p=w0)
        K = len(ks)
    t_noise = rng.standard_t(nu[ks][:, None, None], size=(K, C, R))
    log_w0 = np.log(w0)
    mean0 = w0 @ g
    var_now = float(w0 @ (g - mean0) ** 2 / max(1 - w0 @ w0, 1e-12))
    reduction, var_after, ess = (np.empty(C) for _ in range(3))
    for i in range(C):
        y = mu[ks, i] + sigma[ks, i] * t_noise[:, i]  # K simulated outcomes of the R records, (K, R)
        r = (y[:, None] - mu[None, :, i]) / sigma[None, :, i]  # (K, S, R)
        logw = log_w0[None, :] + _log_t(r, sigma[None, :, i], nu[None, :, None], log_norm[None, :, None])
        logw[np.arange(K), ks] = -np.inf  # leave the outcome's own draw out
        w = np.exp(logw - logw.max(1, keepdims=True))
        w /= w.sum(1, keepdims=True)
        sw2 = (w * w).sum(1)
        mean = w @ g
        var = (w * (g[None, :] - mean[:, None]) ** 2).sum(1) / np.maximum(1 - sw2, 1e-12)
        reduction[i] = var_now - var.mean()
        var_after[i] = var.mean()
        ess[i] = float(np.mean(1.0 / sw2))
    return reduction, var_after, ess


def _picks(mu, sigma, nu, log_norm, g, score, flops, unusable, k: int, K: int, seed: int):
    """The `k` candidates chosen one after another (indices in order) and each one's variance cut given the picks
    before it (NaN for the others): the first is the best `score`; after each pick the draws' weights take the
    likelihood of its predictive-mean outcome (the believer rule), and the rest are scored again per FLOP. Also
    returns the effective sample size of the last weights the picks were scored under (S with one pick)."""
    S, C, _ = mu.shape
    w = np.full(S, 1.0 / S)
    given = np.full(C, np.nan)
    order: list[int] = []
    current = np.where(unusable, -np.inf, np.nan_to_num(score, nan=-np.inf))
    cut = np.where(unusable, np.nan, score * flops)
    for j in range(k):
        free = np.setdiff1d(np.arange(C), order)
        best = int(free[np.argmax(current[free])])
        order.append(best)
        given[best] = cut[best]
        if j == k - 1:
            break
        y_bar = w @ mu[:, best]  # the pick's predictive-mean outcomes (one per record), believed
        r = (y_bar[None, :] - mu[:, best]) / sigma[:, best]
        log_w = np.log(w) + _log_t(r, sigma[:, best], nu[:, None], log_norm[:, None])
        w = np.exp(log_w - log_w.max())
        w /= w.sum()
        cut, _, _ = _score(mu, sigma, nu, log_norm, g, w, K, np.random.default_rng(seed + 1 + j))
        cut[unusable] = np.nan
        current = np.where(unusable, -np.inf, cut / flops)
    return np.asarray(order), given, float(1.0 / (w @ w))
