"""Ranking fits of the same data by PSIS-LOO and stacking weights (ArviZ `arviz_stats.loo` / `compare`), and
answering with the stacked posterior (`stacked_prediction`).

LOO compares the expected log predictive density of each observed value left out in turn, so it is only
meaningful between fits of the *same* observed numbers: the same rows, the same observed variable, the
same values. `same_data` checks that and `compare_fits` refuses otherwise. The three batch models put their
likelihood on the same quantity (log steps to target, one entry per cell, censored cells included), so
fits of one steps-to-target table compare directly; a ``batch-floor`` fit to loss curves observes losses
and compares only with other fits to those curves.

Works for any scalinfer fit with a ``log_likelihood`` group (NUTS or Laplace draws; a MAP fit has one
draw and no LOO).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.inference.fit import load_fit

__all__ = ["same_data", "compare_fits", "loo_table", "far_behind", "mix_draws", "stacked_prediction", "FAR_BEHIND"]

#: a fit is "far behind" the best when its elpd_loo difference is below -FAR_BEHIND and more than two of its
#: standard errors from 0 (a gap of 4 in elpd is Sivula et al.'s rough line between a difference that the LOO
#: noise could make and one it could not)
FAR_BEHIND = 4.0

#: run columns that identify the data (compared when both fits have them)
_IDENTITY = ("N", "batch_tokens", "target_loss", "steps_to_target", "step", "loss", "D", "run_id")


def _observed(fit) -> dict[str, np.ndarray]:
    if "observed_data" not in fit.tree.children:
        return {}
    ds = fit.tree["observed_data"].to_dataset()
    return {k: np.asarray(ds[k].values) for k in ds.data_vars}


def same_data(a, b, name_a: str = "first fit", name_b: str = "second fit") -> None:
    """Raise `ModelError` unless fits `a` and `b` were fit to the same observed data."""
    if a.attrs.get("table_kind") != b.attrs.get("table_kind"):
        raise ModelError(f"{name_b} was fit to a {b.attrs.get('table_kind')!r} table, {name_a} to a "
                         f"{a.attrs.get('table_kind')!r} table: LOO compares fits of the same data only")
    oa, ob = _observed(a), _observed(b)
    if set(oa) != set(ob):
        raise ModelError(f"{name_b} observes {', '.join(sorted(ob)) or 'nothing'} but {name_a} observes "
                         f"{', '.join(sorted(oa)) or 'nothing'}: their likelihoods are of different quantities, "
                         "so LOO cannot rank them")
    for k in oa:
        va, vb = oa[k], ob[k]
        if va.shape != vb.shape:
            raise ModelError(f"{name_b} has {vb.size} observations of {k!r}, {name_a} has {va.size}: not the same data")
    ra, rb = a.runs, b.runs
    if len(ra) != len(rb):
        raise ModelError(f"{name_b} was fit to {len(rb)} rows, {name_a} to {len(ra)}: not the same data")
    for c in _IDENTITY:
        if c in ra.columns and c in rb.columns:
            x, y = ra[c].to_numpy(), rb[c].to_numpy()
            if x.dtype.kind in "fc" or y.dtype.kind in "fc":
                x, y = x.astype(float), y.astype(float)
                diff = ~(np.isclose(x, y, rtol=1e-9, atol=0) | (np.isnan(x) & np.isnan(y)))
            else:
                diff = x.astype(str) != y.astype(str)
            if diff.any():
                i = int(np.flatnonzero(diff)[0])
                raise ModelError(f"{name_b} and {name_a} differ in row {i}, column {c!r} ({y[i]!r} vs {x[i]!r}): "
                                 "not the same data")


def _loo(fit, name: str):
    from arviz_stats import loo

    if "log_likelihood" not in fit.tree.children:
        raise ModelError(f"{name}: the fit has no log-likelihood group (method {fit.method}); refit with nuts")
    post = fit.posterior
    if post.sizes["chain"] * post.sizes["draw"] < 10:
        raise ModelError(f"{name}: {post.sizes['chain'] * post.sizes['draw']} draw(s) (method {fit.method}); "
                         "LOO needs posterior draws: refit with nuts")
    return loo(fit.tree, pointwise=True, var_name="obs")


def compare_fits(fits: Mapping[str, Any]) -> pd.DataFrame:
    """Rank fits of the same data by PSIS-LOO.

    Parameters
    ----------
    fits : mapping of str to Fit or path
        Name -> a `Fit` (or a fit file, loaded with `scalinfer.load_fit`). At least two.

    Returns
    -------
    pandas.DataFrame
        One row per fit, best first: ``rank``, ``model``, ``elpd_loo`` (expected log predictive density,
        higher is better), ``se``, ``elpd_diff`` (to the best, <= 0), ``dse`` (its standard error),
        ``p_loo`` (effective parameters), ``weight`` (stacking), ``bad_k`` (observations with Pareto
        k > 0.7, where the LOO estimate is unreliable), ``n_obs``, ``method``.

    Raises
    ------
    ModelError
        Fewer than two fits, fits of different data, or a fit without posterior draws.
    """
    from arviz_stats import compare

    if len(fits) < 2:
        raise ModelError("compare needs at least two fits of the same data")
    loaded = {name: (load_fit(f) if isinstance(f, (str, os.PathLike)) else f) for name, f in fits.items()}
    names = list(loaded)
    for other in names[1:]:
        same_data(loaded[names[0]], loaded[other], names[0], other)
    elpd = {name: _loo(f, name) for name, f in loaded.items()}
    table = compare(elpd, round_to="none")
    rows = []
    for name in table.index:
        e = elpd[name]
        k = np.asarray(e.pareto_k).ravel()
        rows.append({"fit": name, "rank": int(table.loc[name, "rank"]), "model": loaded[name].attrs["model"],
                     "elpd_loo": float(table.loc[name, "elpd"]), "se": float(table.loc[name, "se"]),
                     "elpd_diff": float(table.loc[name, "elpd_diff"]), "dse": float(table.loc[name, "dse"]),
                     "p_loo": float(table.loc[name, "p"]), "weight": float(table.loc[name, "weight"]),
                     "bad_k": int(np.sum(k > 0.7)), "n_obs": int(k.size), "method": loaded[name].method})
    return pd.DataFrame(rows).set_index("fit")


def loo_table(table: pd.DataFrame) -> str:
    """The comparison as a fixed-width text table."""
    head = (f"{'rank':>4} {'fit':<28} {'model':<13} {'elpd_loo':>10} {'se':>7} {'elpd_diff':>10} {'dse':>7} "
            f"{'p_loo':>6} {'weight':>6} {'k>0.7':>5}")
    lines = [head]
    for name, r in table.iterrows():
        label = str(name) if len(str(name)) <= 28 else "..." + str(name)[-25:]
        lines.append(f"{r['rank']:>4} {label:<28} {r['model']:<13} {r['elpd_loo']:>10.2f} {r['se']:>7.2f} "
                     f"{r['elpd_diff']:>10.2f} {r['dse']:>7.2f} {r['p_loo']:>6.1f} {r['weight']:>6.2f} "
                     f"{r['bad_k']:>5d}")
    return "\n".join(lines)


def far_behind(table: pd.DataFrame) -> dict[str, str]:
    """The fits of a `compare_fits` table whose out-of-sample score is far behind the best: an ``elpd_diff``
    below -`FAR_BEHIND` and more than two of its standard errors (``dse``) from 0. Fit name -> the warning
    `stacked_prediction` gives it (the fit, its model, the gap with its error and its stacking weight)."""
    out = {}
    for name, r in table.iterrows():
        if r["elpd_diff"] < -FAR_BEHIND and r["elpd_diff"] + 2 * r["dse"] < 0:
            out[str(name)] = (f"{name} ({r['model']}): its out-of-sample score is far behind the best fit's "
                              f"(elpd_loo {r['elpd_diff']:+.1f} +- {r['dse']:.1f}); stacking weight {r['weight']:.2f}")
    return out


def mix_draws(draws: Mapping[str, Mapping[str, np.ndarray]], weights: Mapping[str, float], n: int, seed: int = 0
              ) -> dict[str, np.ndarray]:
    """Draws of a mixture of posteriors: `n` draws in all, the count from each source multinomial with its
    weight, each source's share taken from its draws at random (without replacement where it has enough).

    `draws`: source -> quantity -> array (n_source_draws, ...); every source has the same quantities. Returns
    quantity -> array (n, ...), the sources' draws in the order of `draws`."""
    names = list(draws)
    w = np.array([max(float(weights[k]), 0.0) for k in names])
    if not np.isfinite(w).all() or w.sum() <= 0:
        raise ModelError(f"stacking weights must be non-negative with a positive sum, got {dict(weights)}")
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, w / w.sum())
    out: dict[str, list[np.ndarray]] = {}
    for name, c in zip(names, counts):
        have = len(next(iter(draws[name].values())))
        idx = rng.choice(have, size=int(c), replace=int(c) > have)
        for q, v in draws[name].items():
            out.setdefault(q, []).append(np.asarray(v)[idx])
    return {q: np.concatenate(parts, axis=0) for q, parts in out.items()}


def stacked_prediction(fits: Mapping[str, Any], ci: float = 0.9, seed: int = 0, **targets):
    """The answer of several fits of the same data at `targets`, as the stacked posterior predictive (Yao,
    Vehtari, Simpson and Gelman 2018): each fit's draws, mixed with the stacking weights `compare_fits` gives
    (the weights that maximize the mixture's leave-one-out log score: which fit predicts data it has not seen).

    Only the quantities every fit reports with the same unit and definition are stacked
    (`scalinfer.quantities`: ``batch_crit`` is E_min / S_min in every batch model, but OpenAI's 2x-overhead
    point only under batch-openai's hyperbola, so it is stacked only among fits of one model); the others are
    named in a warning. Warnings: each fit's own (prefixed with its name) where its weight is 0.01 or more, and
    one per fit whose out-of-sample score is far behind the best (`far_behind`).

    Returns (`scalinfer.predict.Prediction`, the comparison table of `compare_fits`). The prediction's draws
    number as many as the fit with the fewest; its ``model`` is the heaviest fit's."""
    from scalinfer.predict import Prediction
    from scalinfer.quantities import describe

    loaded = {name: (load_fit(f) if isinstance(f, (str, os.PathLike)) else f) for name, f in fits.items()}
    table = compare_fits(loaded)
    preds = {name: loaded[name].predict(ci=ci, sensitivity=False, **targets) for name in table.index}
    models = {name: loaded[name].attrs["model"] for name in table.index}
    first = next(iter(preds.values()))
    common, dropped = [], []
    for q in first.draws:
        defs = {(describe(q, models[n]).unit, describe(q, models[n]).definition) for n in preds if q in preds[n].draws}
        (common if len(defs) == 1 and all(q in p.draws for p in preds.values()) else dropped).append(q)
    weights = {name: float(table.loc[name, "weight"]) for name in table.index}
    n = min(len(next(iter(p.draws.values()))) for p in preds.values())
    mixed = mix_draws({name: {q: p.draws[q] for q in common} for name, p in preds.items()}, weights, n, seed)
    warnings, behind = [], far_behind(table)
    for name in table.index:
        if name in behind:
            warnings.append(behind[name])
        if weights[name] >= 0.01:
            warnings.extend(f"{name}: {w}" for w in preds[name].warnings)
    if dropped:
        warnings.append(f"not stacked: {', '.join(dropped)} (not reported by every fit, or defined differently by "
                        f"their models: {', '.join(sorted(set(models.values())))}); predict each fit alone for them")
    best = max(weights, key=weights.get)
    pred = Prediction(draws=mixed, units={q: first.units[q] for q in common if q in first.units},
                      targets=first.targets, extrapolation=preds[best].extrapolation, ci=ci,
                      warnings=tuple(warnings), model=models[best])
    return pred, table
