r"""``classic``: the Fitting paradigm as practised (Zhou et al. 2026; docs/laws.md sections 3-4), with bootstrap
intervals. A baseline for the ``surface`` model.

Stage 1, per setting s = (N, D[, group]), on its converged runs: take the best run (lowest loss) at
(eta_b, B_b); fit the quadratic of docs/laws.md section 3,

.. math:: L(\eta) = L_{min} + C (\log \eta - \log \eta^*_s)^2,

by least squares to the LR sweep at batch B_b (the runs within ``window`` natural-log units of eta_b), and
take its vertex as log eta*_s; likewise the vertex in log B of the batch sweep at eta_b gives log B*_s. A
sweep with fewer than three distinct values, a vertex of a concave fit (C <= 0), or a vertex outside the
swept range falls back to the best run's value (counted in ``fit_warnings``). With ``vertex="best"`` stage 1
is just the best run's (eta_b, B_b) (Step Law's and DeepSeek's practice on a grid).

Stage 2, ordinary least squares across settings:

.. math::

    \log \eta^*_s = \log c + a \log N_s + b \log D_s, \qquad \log B^*_s = \log c_B + a_B \log N_s + b_B \log D_s,

and the same for the best loss, log L_min,s (for ``loss_opt``). A predictor with no spread in the data (e.g.
N total of MoE configurations that share one size) is left out of the regression (its exponent is 0) and
``fit_warnings`` says so.

Intervals: the pairs bootstrap over settings (resample the settings with replacement, refit stage 2; designs
whose predictors lose their spread are redrawn), so each posterior "draw" of this model is one bootstrap
replicate (``default_method = "bootstrap"``). These are confidence intervals of the fitted law, as the papers
report them: they do not include how far a new setting scatters around the law, nor stage 1's error, which
is one reason the classic intervals are narrower than the ``surface`` model's.

Diverged runs (flagged, non-finite loss, or a loss above ``divergence_ratio`` times the setting's best, as in
``surface``) take no part in the vertex fits: the classic pipeline has no use for them. They are counted in
``fit_warnings``, not dropped silently.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.models.base import Arrays, Model, tried_ranges
from scalinfer.models.surface import DIVERGENCE_RATIO, require_lr_and_batch, settings_of
from scalinfer.runs.schema import RunTable

__all__ = ["Classic", "MODEL", "quadratic_vertex", "ols_law"]

#: the three laws stage 2 fits: name in draws -> the per-setting array it regresses
LAWS = {"lr_opt": "setting_log_lr_opt", "batch_opt": "setting_log_batch_opt", "loss_opt": "setting_log_loss_opt"}


def quadratic_vertex(x: np.ndarray, loss: np.ndarray) -> tuple[float, bool]:
    """Vertex of the least-squares parabola loss = c0 + c1 x + c2 x^2 (x in log units).

    Returns (vertex, ok): ok is False (and the vertex the x of the lowest loss) when x has fewer than three
    distinct values, the parabola is not convex, or its vertex lies outside [min x, max x].
    """
    x, loss = np.asarray(x, float), np.asarray(loss, float)
    fallback = float(x[np.argmin(loss)])
    if len(np.unique(x)) < 3:
        return fallback, False
    c2, c1, _ = np.polyfit(x, loss, 2)
    if not (np.isfinite(c2) and c2 > 0):
        return fallback, False
    v = -c1 / (2 * c2)
    if not (x.min() <= v <= x.max()):
        return fallback, False
    return float(v), True


def ols_law(log_N: np.ndarray, log_D: np.ndarray, y: np.ndarray, use_N: bool = True, use_D: bool = True
            ) -> np.ndarray:
    """OLS of y on (1, log N, log D): returns (intercept, exponent of N, exponent of D); a predictor left out
    (``use_N``/``use_D`` False) gets 0. Inputs may carry leading batch dims (..., n_settings): one fit each."""
    log_N, log_D, y = np.broadcast_arrays(np.asarray(log_N, float), np.asarray(log_D, float),
                                          np.asarray(y, float))
    use = [True, use_N, use_D]
    X = np.stack([np.ones_like(log_N), log_N, log_D], axis=-1)[..., use]
    coef = (np.linalg.pinv(X) @ y[..., None])[..., 0]  # (..., n_used)
    out = np.zeros(y.shape[:-1] + (3,))
    out[..., use] = coef
    return np.moveaxis(out, -1, 0)


@dataclasses.dataclass(frozen=True)
class Classic(Model):
    """Per-setting vertices, then OLS laws with pairs-bootstrap intervals (see the module docstring).

    Parameters
    ----------
    vertex : ``"quadratic"`` (the vertex of a parabola in log LR / log batch) or ``"best"`` (the best run).
    window : half-width (natural-log units) of the sweep the parabola is fitted to, around the best run;
        1.05 is three steps of a sqrt(2) grid on each side.
    divergence_ratio : as in the ``surface`` model.
    """

    vertex: str = "quadratic"
    window: float = 1.05
    divergence_ratio: float = DIVERGENCE_RATIO

    name = "classic"
    version = "1"
    table_kind = "runs"
    required_columns = ("N", "D", "loss", "lr", "batch_tokens")
    predicts = {"lr_opt": "peak learning rate", "batch_opt": "tokens", "loss_opt": "nats/token"}
    targets = ("N", "D")
    default_method = "bootstrap"
    observed = ("setting_log_lr_opt", "setting_log_batch_opt", "setting_log_loss_opt")

    def __post_init__(self):
        if self.vertex not in ("quadratic", "best"):
            raise ModelError(f"vertex must be 'quadratic' or 'best', got {self.vertex!r}")
        if not (np.isfinite(self.window) and self.window > 0):
            raise ModelError(f"window must be a positive number of log units, got {self.window!r}")
        if not (np.isfinite(self.divergence_ratio) and self.divergence_ratio > 1):
            raise ModelError(f"divergence_ratio must be a number above 1, got {self.divergence_ratio!r}")

    def prepare(self, runs: RunTable) -> tuple[Arrays, dict[str, float]]:
        self.check(runs)
        df = runs.df.reset_index(drop=True)
        require_lr_and_batch(df, runs.source, "the classic pipeline")
        s_idx, settings = settings_of(df)
        from scalinfer.models.surface import MODEL as SURFACE
        diverged = SURFACE.__class__(divergence_ratio=self.divergence_ratio).diverged_mask(df, s_idx)
        loss = df["loss"].to_numpy(float)
        x, z = np.log(df["lr"].to_numpy(float)), np.log(df["batch_tokens"].to_numpy(float))
        S = len(settings)
        out = {k: np.full(S, np.nan) for k in ("setting_log_lr_opt", "setting_log_batch_opt",
                                               "setting_log_loss_opt")}
        fallbacks = 0
        for s in range(S):
            ok = (s_idx == s) & ~diverged
            if not ok.any():
                raise ModelError(f"{runs.source}: setting N={settings['N'][s]:.4g}, D={settings['D'][s]:.4g} "
                                 "has no converged run; the classic pipeline needs one per setting")
            i = np.flatnonzero(ok)[np.argmin(loss[ok])]
            out["setting_log_loss_opt"][s] = np.log(loss[i])
            if self.vertex == "best":
                out["setting_log_lr_opt"][s], out["setting_log_batch_opt"][s] = x[i], z[i]
                continue
            sweep_lr = ok & np.isclose(z, z[i]) & (np.abs(x - x[i]) <= self.window + 1e-9)
            sweep_b = ok & np.isclose(x, x[i], atol=0.02) & (np.abs(z - z[i]) <= self.window + 1e-9)
            out["setting_log_lr_opt"][s], ok_lr = quadratic_vertex(x[sweep_lr], loss[sweep_lr])
            out["setting_log_batch_opt"][s], ok_b = quadratic_vertex(z[sweep_b], loss[sweep_b])
            fallbacks += (not ok_lr) + (not ok_b)
        log_N, log_D = np.log(settings["N"].to_numpy(float)), np.log(settings["D"].to_numpy(float))
        data = {"setting_log_N": log_N, "setting_log_D": log_D, **out}
        constants = {
            "max_N": float(np.exp(log_N.max())), "max_D": float(np.exp(log_D.max())),
            "min_N": float(np.exp(log_N.min())), "min_D": float(np.exp(log_D.min())),
            "use_N": float(np.ptp(log_N) > 1e-9), "use_D": float(np.ptp(log_D) > 1e-9),
            "n_settings": float(S), "n_diverged": float(diverged.sum()), "n_vertex_fallbacks": float(fallbacks),
            "vertex_quadratic": float(self.vertex == "quadratic"),
            **tried_ranges(df),  # the LRs and batches tried at each size, for the answers' warnings
        }
        if S < 2 + constants["use_N"] + constants["use_D"]:
            raise ModelError(f"{runs.source}: {S} setting(s) cannot fit a law in "
                             f"{'log N and log D' if constants['use_N'] and constants['use_D'] else 'one predictor'}"
                             " by least squares with a residual: need more settings")
        return data, constants

    def fit_draws(self, data: Arrays, constants: dict[str, float], samples: int, seed: int
                  ) -> tuple[dict[str, np.ndarray], None]:
        """Bootstrap replicates of the three laws: each draw refits stage 2 on settings resampled with
        replacement. Returns ({f"{law}_{log_coef|exp_N|exp_D}": (samples,)}, None); the first replicate is
        the fit to all settings."""
        rng = np.random.default_rng(seed)
        log_N, log_D = data["setting_log_N"], data["setting_log_D"]
        use_N, use_D = bool(constants["use_N"]), bool(constants["use_D"])
        S = len(log_N)
        idx = np.empty((samples, S), dtype=int)
        idx[0] = np.arange(S)
        k, tries = 1, 0
        while k < samples:
            cand = rng.integers(0, S, size=(samples, S))
            good = np.ones(samples, bool)
            if use_N:
                good &= np.ptp(log_N[cand], axis=1) > 1e-9
            if use_D:
                good &= np.ptp(log_D[cand], axis=1) > 1e-9
            if use_N and use_D:  # log N and log D must not be collinear in the replicate
                X = np.stack([np.ones(cand.shape), log_N[cand], log_D[cand]], axis=-1)
                good &= np.linalg.matrix_rank(X) == 3
            take = cand[good][: samples - k]
            idx[k:k + len(take)] = take
            k += len(take)
            tries += 1
            if tries > 100:
                raise ModelError("the bootstrap cannot draw designs that identify the law: too few settings")
        draws: dict[str, np.ndarray] = {}
        for law, key in LAWS.items():
            coef = ols_law(log_N[idx], log_D[idx], data[key][idx], use_N, use_D)  # (3, samples)
            draws[f"{law}_log_coef"], draws[f"{law}_exp_N"], draws[f"{law}_exp_D"] = coef
        return draws, None

    def predict(self, draws: Arrays, constants: dict[str, float], N=None, D=None) -> Arrays:
        """Bootstrap draws of ``lr_opt`` (peak LR), ``batch_opt`` (the loss-optimal batch at fixed (N, D),
        tokens) and ``loss_opt`` (nats/token) at (N, D): arrays (n_draws, *broadcast shape)."""
        if N is None or D is None:
            raise ModelError("the classic model predicts at a target N and D (both needed)")
        N, D = np.broadcast_arrays(np.asarray(N, float), np.asarray(D, float))
        if not (np.all(np.isfinite(N) & (N > 0)) and np.all(np.isfinite(D) & (D > 0))):
            raise ModelError("targets N and D must be positive finite numbers")
        lN, lD = np.log(N)[None], np.log(D)[None]
        col = lambda k: np.asarray(draws[k], float).reshape((-1,) + (1,) * N.ndim)  # noqa: E731
        return {law: np.exp(col(f"{law}_log_coef") + col(f"{law}_exp_N") * lN + col(f"{law}_exp_D") * lD)
                for law in LAWS}

    def fit_warnings(self, fit) -> list[str]:
        c = fit.constants
        out = ["classic: bootstrap intervals of the fitted law (pairs bootstrap over settings); they leave out "
               "the scatter of a new setting around the law and the vertex fits' own error"]
        if c.get("n_diverged", 0):
            out.append(f"{int(c['n_diverged'])} diverged run(s) took no part in the vertex fits")
        if c.get("n_vertex_fallbacks", 0):
            out.append(f"{int(c['n_vertex_fallbacks'])} sweep(s) gave no interior convex vertex; the best run's "
                       "value stands in")
        for axis in ("N", "D"):
            if not c.get(f"use_{axis}", 1):
                out.append(f"every setting has the same {axis}: the law leaves log {axis} out (exponent 0), so "
                           f"predictions at another {axis} are not informed by the data")
        return out

    def default_design(self, seed: int = 0) -> pd.DataFrame:
        from scalinfer.models.surface import MODEL as SURFACE
        return SURFACE.default_design(seed)

    def true_params(self) -> dict[str, float]:
        from scalinfer.models.surface import MODEL as SURFACE
        return SURFACE.true_params()

    def simulate(self, params: dict[str, float], design: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
        """The ``surface`` model's simulation (the classic pipeline has no generative model of its own)."""
        from scalinfer.models.surface import MODEL as SURFACE
        return SURFACE.simulate(params, design, seed)


MODEL = Classic()
