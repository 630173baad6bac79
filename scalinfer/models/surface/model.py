r"""``surface``: one posterior over the loss surface in (N, D, LR, batch) (docs/models.md, "surface"; the laws in
docs/laws.md).

Every run enters the likelihood, optimal or not, converged or diverged. Runs are grouped in *settings*
s = (N, D[, group]); each setting has a joint optimum (eta*_s, B*_s) and a loss there, L*_s.

The surface
-----------
With x = log eta (peak learning rate), z = log B (batch in tokens) and y = log loss (nats/token), all
centered on the data's middles (`scalinfer.models.surface.loss`):

.. math::

    y = \ell_s + V_\eta(u) + V_B(v), \qquad v = z - z^*_s, \qquad
    u = x - \big(x^*_s + \kappa_1 v + \tfrac12 \kappa_2 v^2\big)

- the batch valley :math:`V_B(v) = C^B_\pm \tfrac{2}{p_B}\big((1 + v^2)^{p_B/2} - 1\big)` around the
  loss-optimal batch z*_s, and the LR valley V_eta of the same form (`scalinfer.laws.lr.valley`): C v^2 near
  the optimum, a power |v|^p far from it, smooth everywhere;
- the LR valley sits around the optimal LR *at that batch*, the LR-batch ridge
  (`scalinfer.laws.lr.log_lr_opt_at_batch`); at z = z*_s it passes through x*_s, so (x*_s, z*_s) is the
  joint optimum of the setting and :math:`\ell_s` the log loss there;
- each valley has its own curvature below (C_-) and above (C_+) the optimum,
  :math:`\log C_\pm = c_0 + c_N \tilde n + c_D \tilde d \pm \delta`, and its own far-field exponent p in
  (0.5, 4). The curvatures, delta, p and the ridge (kappa_1, kappa_2) are shared by all settings.

The laws
--------
With :math:`\tilde n = (\log N - m_N)/h_N`, :math:`\tilde d = (\log D - m_D)/h_D` in [-1, 1]:

.. math::

    x^*_s &= m_\eta + a_0 + a_N \tilde n_s + a_D \tilde d_s + \tau_\eta\, \epsilon^\eta_s \\
    z^*_s &= m_B + b_0 + b_N \tilde n_s + b_D \tilde d_s + \tau_B\, \epsilon^B_s \\
    \ell_s &\sim \mathcal N(m_y + g_0 + g_N \tilde n_s + g_D \tilde d_s,\; \tau_L),
    \qquad \epsilon_s \sim \mathcal N(0, 1)

i.e. eta*(N, D) = c N^alpha D^beta (`scalinfer.laws.lr.log_lr_opt_law`), B*(N, D) = c_B N^alpha_B D^beta_B
(`scalinfer.laws.batch.log_batch_opt_law`) and L*(N, D) = c_L N^alpha_L D^beta_L, with partial pooling: each
setting's optimum sits off the law by an offset tau * epsilon_s, and its loss level off the loss law by a
centered one (a setting's runs pin its loss level far tighter than tau_L). NUTS samples each optimum through
a *pin*, its place and precision as the runs give them at the posterior mode: the same prior, in coordinates
without a funnel whatever tau (`scalinfer.models.surface.numpyro_model`, "Settings' optima, pinned";
`Surface.nuts_kwargs`). The natural exponents are the scaled slopes over h (``lr_opt_exp_N = a_N / h_N``...),
reported by `Surface.derived`. The loss law is local (no Chinchilla floor): with per-setting offsets it only
carries L* to the target, and says how well through tau_L.

With size scatter (the option ``size_scatter``) each model size (distinct N) also sits off the laws by a level
of its own, so a prediction at a new N carries how far a new size sits off them
(`scalinfer.models.surface.size_scatter`). Predictions are for a new setting
(`scalinfer.models.surface.predict`).

Likelihood
----------
Converged runs are Student-t about the surface; diverged runs are censored (their loss is only known to exceed
a level). The math is in `scalinfer.models.surface.numpyro_model`'s docstring, beside `surface_model`, the
NumPyro model of the whole, which a fit imports when it traces it (reading a fit and predicting import neither
NumPyro nor JAX).

Priors: `scalinfer.models.surface.priors`.

Reduced designs (`scalinfer.models.surface.design`): a table with one batch is fitted as the model at
z*_s = 0 with no batch site (an LR-only problem, answered at that batch), one with one LR as the model at
x*_s = 0 with no LR site; in both the remaining valley is a parabola in its log (p = 2) and the noise's nu is
3, fixed rather than sampled, because at one batch (one LR) they trade with where each setting's optimum sits
and open second modes.

Geometry: the fit starts from a per-setting point estimate (`Surface.init_values`) refined to the joint mode;
NUTS then runs on coordinates scaled by the Laplace standard deviations, with a dense mass matrix for the
correlation that is left (between the laws' intercepts and the curvatures).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from scalinfer.errors import ModelError
from scalinfer.models.base import Arrays, Model
from scalinfer.models.surface import predict as _predict
from scalinfer.models.surface import simulate as _simulate
from scalinfer.models.surface.data import DIVERGENCE_RATIO, diverged_mask, prepare_runs, settings_of
from scalinfer.models.surface.design import DESIGN_CODE, DESIGNS, LEFT_OUT, design_of, resolve_design, unvaried
from scalinfer.models.surface.population import PRIOR_SETS
from scalinfer.models.surface.priors import LAW_N, PINNED, PINNED_LOSS, PRIORS, SETTING, SIZE, VALLEY_BY_BATCH
from scalinfer.models.surface.size_scatter import size_basis
from scalinfer.runs.schema import RunTable

if TYPE_CHECKING:
    from scalinfer.inference.fit import Fit

__all__ = ["Surface", "MODEL", "PRIOR_CODE", "prior_of"]

#: the option ``prior`` as the fit's constant ``prior``
PRIOR_CODE = {"default": 0.0, "population": 1.0}


def prior_of(constants: dict[str, float]) -> str:
    """The prior a fit used, from its constants (a fit written before the option existed: ``default``)."""
    code = constants.get("prior", 0.0)
    return next(k for k, v in PRIOR_CODE.items() if v == code)


@dataclasses.dataclass(frozen=True)
class Surface(Model):
    """The hierarchical loss surface over (N, D, LR, batch); see the module docstring for the math.

    Parameters
    ----------
    divergence_ratio : a finite loss above this multiple of its setting's best converged loss counts as a
        diverged (censored) run.
    n_kind : ``"total"`` or ``"active"``: for MoE tables with both ``N_total`` and ``N_active``, which one is N
        (None: the table's ``N`` as loaded, see ``load_runs(n_kind=...)``).
    size_scatter : each model size (distinct N) sits off the laws by its own level, so a prediction at a new N
        carries that scatter. None (default): on when the table has two or more sizes (with one, the N
        exponents are the prior's, which dwarfs a size's scatter at any other N). `prepare` resolves it once,
        into the constant ``size_scatter`` (0 or 1), which every later step (and a reloaded fit) reads.
    design : ``"full"``, ``"fixed_batch"`` (an LR sweep at one batch) or ``"fixed_lr"`` (a batch sweep at one
        LR); None (default): from the table (`scalinfer.models.surface.design`: one batch in the whole table is
        ``fixed_batch``, one LR ``fixed_lr``, else ``full``). ``"full"`` forces the whole surface. `prepare`
        resolves it once, into the constant ``design`` (`DESIGN_CODE`).
    prior : ``"population"`` (default: the prior learned across published sweeps,
        `scalinfer.models.surface.population`) or ``"default"`` (the broad prior of
        `scalinfer.models.surface.priors`). `prepare` records it as the constant ``prior`` (`PRIOR_CODE`); a fit
        file written before the option existed was fitted with ``default`` and reloads so.
    lr_valley_by_batch : the LR valley's log curvature and asymmetry move with the batch's distance from B*
        (sites ``c_lr_B``, ``delta_lr_B``; the math in `scalinfer.models.surface.loss`), instead of the separable
        valley. The full design only: in a reduced one the batch is one value (or the LR valley absent), so
        there is nothing to couple, and the constant ``lr_valley_by_batch`` that `prepare` records is 0.
    """

    divergence_ratio: float = DIVERGENCE_RATIO
    n_kind: str | None = None
    size_scatter: bool | None = None
    design: str | None = None
    prior: str = "population"
    lr_valley_by_batch: bool = False

    name = "surface"
    version = "1"
    table_kind = "runs"
    required_columns = ("N", "D", "loss", "lr", "batch_tokens")
    #: every input is a centered log and every sampled parameter O(1), so float32 loses nothing NUTS can see
    potential_dtype = "float32"
    predicts = {"lr_opt": "peak learning rate", "batch_opt": "tokens", "loss_opt": "nats/token",
                "lr_opt_at_batch": "peak learning rate", "loss": "nats/token",
                "loss_opt_at_batch": "nats/token", "batch_opt_at_lr": "tokens", "loss_opt_at_lr": "nats/token"}
    targets = ("N", "D", "lr", "batch")
    observed = ("log_loss", "diverged_obs")
    #: the noise floor and the loss levels' scatter: with few runs per setting the joint density grows without
    #: bound as sigma0 -> 0 with each setting's valley through one of its runs (benchmarks/README.md, "why the
    #: (Mis)Fitting mode search fails"), and as tau_loss -> 0 with every setting's loss level ell (sampled
    #: centered) on the loss law, where the valleys' own freedom keeps the likelihood finite (benchmarks/README.md,
    #: "a thin table's second spike"); NUTS then starts from the mode given sigma0 at its `init_values` value, or
    #: given both where that search does not converge either
    mode_held = ("sigma0", "tau_loss")
    dims = {**{k: ["setting"] for k in SETTING + PINNED + (PINNED_LOSS,)}, **{k: ["size"] for k in SIZE},
            **{f"{v}_size_line": ["law_dir"] for v in LAW_N}, **{f"{v}_size_resid": ["size_resid"] for v in LAW_N},
            **{f"{v}_law_std": ["law_coef"] for v in LAW_N}}

    def __post_init__(self):
        if not (np.isfinite(self.divergence_ratio) and self.divergence_ratio > 1):
            raise ModelError(f"divergence_ratio must be a number above 1, got {self.divergence_ratio!r}")
        if self.n_kind not in (None, "total", "active"):
            raise ModelError(f"n_kind must be 'total' or 'active', got {self.n_kind!r}")
        if self.size_scatter is not None and not isinstance(self.size_scatter, bool):
            raise ModelError(f"size_scatter must be True, False or None (on with two or more model sizes), got "
                             f"{self.size_scatter!r}")
        if self.design is not None and self.design not in DESIGNS:
            raise ModelError(f"design must be one of {', '.join(DESIGNS)} or None (from the table), got "
                             f"{self.design!r}")
        if not isinstance(self.lr_valley_by_batch, bool):
            raise ModelError(f"lr_valley_by_batch must be True or False, got {self.lr_valley_by_batch!r}")
        if self.prior not in PRIOR_SETS:
            raise ModelError(f"prior must be one of {', '.join(map(repr, PRIOR_SETS))}, got {self.prior!r}")

    # ---- data -------------------------------------------------------------------------------------------
    def prepare(self, runs: RunTable) -> tuple[Arrays, dict[str, float]]:
        """Run table -> (data, constants) (`scalinfer.models.surface.data.prepare_runs`)."""
        self.check(runs)
        data, constants = prepare_runs(runs, self.divergence_ratio, self.n_kind, self.size_scatter)
        df = runs.df.reset_index(drop=True)
        design = resolve_design(df, self.design, str(runs.source))
        constants["design"] = DESIGN_CODE[design]
        constants["prior"] = PRIOR_CODE[self.prior]
        constants["lr_valley_by_batch"] = float(self.lr_valley_by_batch and design == "full")
        if design == "full":  # no setting varies the batch (LR) though the table has several: its valley is the prior's
            for k in unvaried(df, settings_of(df)[0]):
                constants[f"unvaried_{k}"] = 1.0
        return data, constants

    def diverged_mask(self, df: pd.DataFrame, s_idx: np.ndarray) -> np.ndarray:
        """Runs treated as diverged: flagged, non-finite loss, or loss > divergence_ratio x setting best."""
        return diverged_mask(df, s_idx, self.divergence_ratio)

    def coords(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        out = {"setting": np.arange(len(data["n_s"]))}
        if constants["size_scatter"]:
            M = len(data["n_size"])
            out.update(size=np.arange(M), law_coef=["intercept", "N"], law_dir=np.arange(min(M, 2)),
                       size_resid=np.arange(max(M - 2, 0)))
        return out

    # ---- the NumPyro model ---------------------------------------------------------------------------------
    def model(self, **kwargs: Any) -> None:
        """`scalinfer.models.surface.numpyro_model.surface_model` of `model_kwargs` (imported here, on the first
        trace: the rest of the model imports no NumPyro nor JAX)."""
        from scalinfer.models.surface.numpyro_model import surface_model

        surface_model(**kwargs)

    def model_kwargs(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        # the sizes' scaled log N as a tuple: static, so the law's QR is computed once when the program is built;
        # the optima's pins 0 (w = eps, non-centered: the mode search's coordinates), as arrays, so that NUTS's
        # program, compiled before the mode is known, takes `nuts_kwargs`'s pins; the loss levels' none (centered;
        # pinned after a mode with tau_loss held, whose NUTS program then compiles once the mode is known)
        S = len(data["n_s"])
        return {**data, "h_N": constants["h_N"], "h_D": constants["h_D"],
                "size_scatter": bool(constants["size_scatter"]), "design": design_of(constants),
                "prior": prior_of(constants),
                "lr_valley_by_batch": bool(constants.get("lr_valley_by_batch", 0.0)),
                "n_size": tuple(float(v) for v in data["n_size"]),
                "pin_lr": np.zeros((2, S)), "pin_b": np.zeros((2, S)), "pin_ell": None}

    def nuts_kwargs(self, kwargs: dict[str, Any], point) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Pin each setting's optimum where the mode found with `kwargs` (pins 0) puts it
        (`scalinfer.models.surface.numpyro_model`, "Settings' optima, pinned"): xhat_s = the setting's x*_s at the
        mode, D_s = (H_ss - 1) / tau^2 from the potential's curvature H_ss in eps_s there (its prior's is 1; 0 where
        the curvature is not finite or below the prior's). The mode's tau is far above the posterior's (the joint
        mode of non-centered offsets favours a large tau), which makes D tau^2 there large: D is what the runs say
        about x*_s whatever tau. Returns (kwargs with the pins, the mode's values in the new coordinates).

        Where `point` is the mode given held sites (`mode_held`), the optima keep pins 0 (NUTS samples eps itself):
        sigma0 held at its start value makes every run's likelihood, and so D, as sharp as that start says, not as
        the posterior's sigma0: on (Mis)Fitting's table (held sigma0) such pins made tau_lr mix worse than no pins
        (benchmarks/README.md, "defaults.py", the settings' optima pinned), and so did pins of the loss levels (220
        leapfrog steps per draw against 121); there it returns None. Where the search held tau_loss too, its walk
        down tau_loss says that ell, sampled centered, has a funnel within NUTS's reach: one chain in some seeds
        entered it and stayed, most of its draws divergent. There the settings' loss levels are pinned (`pin_ell`:
        xhat_s the mode's ell_s, D_s = H_ss - 1/tau_loss^2 from the curvature in ell_s itself) and the optima are
        not (benchmarks/README.md, "the loss levels pinned on thin tables"). Where the mode is not held, the runs
        pin every ell_s far tighter than tau_loss, and ell stays centered (pinned, the quickstart's fits diverged
        more often)."""
        if point.held and "tau_loss" not in point.held:
            return None
        from scalinfer.laws.batch import log_batch_opt_law
        from scalinfer.laws.lr import log_lr_opt_law
        from scalinfer.models.surface.size_scatter import size_offsets

        c = point.params
        curvature = point.objective.unravel(np.diag(point.hessian()))
        n_s, d_s = np.asarray(kwargs["n_s"], float), np.asarray(kwargs["d_s"], float)
        size_s = kwargs["size_s"] if kwargs["size_scatter"] else None
        # the sampled sites only: the start's keys as `init_values`'s (one start program for both searches)
        kwargs, start = dict(kwargs), {k: np.asarray(c[k], float) for k in point.z}
        for v, k, law, coef in (("lr", "x_star", log_lr_opt_law, ("a0", "a_N", "a_D")),
                                ("b", "z_star", log_batch_opt_law, ("b0", "b_N", "b_D"))):
            if f"w_{v}" not in point.z or point.held:  # a valley the design leaves out, or a held mode
                continue
            tau, eps = float(c[f"tau_{v}"]), np.asarray(c[f"eps_{v}"], float)
            center = law(n_s, d_s, *(float(c[q]) for q in coef))
            if size_s is not None:
                center = center + size_offsets(c, n_s, size_s, keys=(k,))[k]
            h = np.asarray(curvature[f"w_{v}"], float)
            D = np.maximum(h - 1.0, 0.0) / tau ** 2
            D = np.where(np.isfinite(D), D, 0.0)
            pin = np.stack([center + tau * eps, D])
            kwargs[f"pin_{v}"] = pin
            # the mode's w in the pinned coordinates (`pinned_offset`, inverted)
            r = D * tau ** 2
            start[f"w_{v}"] = (eps - r / (1 + r) * (pin[0] - center) / tau) * np.sqrt(1 + r)
        if not point.held:
            return kwargs, start
        # the settings' loss levels, pinned at the mode's: ell_s itself is the site searched, D_s = H_ss - 1/tau^2
        tau, ell = float(c["tau_loss"]), np.asarray(c["ell"], float)
        center = float(c["g0"]) + float(c["g_N"]) * n_s + float(c["g_D"]) * d_s
        if size_s is not None:
            center = center + size_offsets(c, n_s, size_s, keys=("ell",))["ell"]
        D = np.maximum(np.asarray(curvature["ell"], float) - 1.0 / tau ** 2, 0.0)
        D = np.where(np.isfinite(D), D, 0.0)
        kwargs["pin_ell"] = np.stack([ell, D])
        r = D * tau ** 2
        start.pop("ell")
        start["w_ell"] = (ell - center) / tau / np.sqrt(1 + r)
        return kwargs, start

    def init_values(self, data: Arrays, constants: dict[str, float]) -> dict[str, Any]:
        """Per-setting best runs regressed on (n, d) (least squares, minimum-norm where n and d are collinear):
        rough laws for eta*, B*, L*; offsets from the residuals."""
        S = len(data["n_s"])
        s, x, z, y = data["s_obs"], data["x_obs"], data["z_obs"], data["log_loss"]
        best = np.array([np.flatnonzero(s == k)[np.argmin(y[s == k])] if np.any(s == k) else -1 for k in range(S)])
        have = best >= 0
        X = np.column_stack([np.ones(S), data["n_s"], data["d_s"]])[have]
        out: dict[str, Any] = {}
        # (w_lr, w_b: the optima's offsets, eps, with the model's kwargs' pins, which are 0: `model_kwargs`)
        for target, (c0, cN, cD), tau, eps in ((x, ("a0", "a_N", "a_D"), 0.3, "w_lr"),
                                               (z, ("b0", "b_N", "b_D"), 0.3, "w_b"),
                                               (y, ("g0", "g_N", "g_D"), 1.0, "ell")):
            # rcond: where n and d are collinear (one token budget per parameter, D = k N) their slopes are not
            # separable, and the minimum-norm split is the start, not one blown up by rounding
            coef, *_ = np.linalg.lstsq(X, target[best[have]], rcond=1e-8)
            coef = np.where(np.isfinite(coef), coef, 0.0)
            out.update({c0: coef[0], cN: coef[1], cD: coef[2]})
            resid = np.zeros(S)
            resid[have] = target[best[have]] - X @ coef
            out[eps] = np.clip(resid / tau, -2.5, 2.5)
        out["ell"] = out["ell"] + np.column_stack([np.ones(S), data["n_s"], data["d_s"]]) @ [
            out["g0"], out["g_N"], out["g_D"]]
        if constants["size_scatter"]:  # each size on the regressed law (no residuals), u at its mean
            Q, _, Q_perp = size_basis(data["n_size"])
            k = Q_perp.shape[1]
            pr = PRIOR_SETS[prior_of(constants)]
            for v, (k0, kN, _, _) in LAW_N.items():
                mean0, meanN = pr.law(v)[:2]
                if k:
                    out[f"{v}_size_resid"] = np.zeros(k)
                out[f"{v}_size_u"] = pr.size(v)[0] + 0.5 * k
                # the zero-mean levels A_0 = A - (mean0 + meanN h_N n) (numpyro_model's `_size_levels`)
                out[f"{v}_size_line"] = Q.T @ (out.pop(k0) - mean0 + (out.pop(kN) - meanN * constants["h_N"])
                                               * data["n_size"])
                out[f"{v}_law_std"] = np.zeros(2)  # the law then at its conditional mean (not a sampled site)
        out.update({"tau_lr": 0.3, "tau_b": 0.3, "tau_loss": 0.01, "kappa1": 0.5, "kappa2": 0.0,
                    "c_lr0": -4.0, "c_lr_N": 0.0, "c_lr_D": 0.0, "delta_lr": 0.5, "p_lr_unit": 0.33,
                    "c_b0": -4.0, "c_b_N": 0.0, "c_b_D": 0.0, "delta_b": 0.0, "p_b_unit": 0.33,
                    "sigma0": 0.003, "sigma1": 0.2, "nu": 5.0})
        if constants.get("lr_valley_by_batch"):
            out.update({k: 0.0 for k in VALLEY_BY_BATCH})
        left_out, left_out_setting, law = LEFT_OUT[design_of(constants)]
        drop = (set(left_out) | {k.replace("eps_", "w_") for k in left_out_setting}  # an offset eps is sampled as w
                | ({f"{law}_{k}" for k in ("size_resid", "size_u", "size_line", "law_std")} if law else set()))
        return {k: np.asarray(v, dtype=float) for k, v in out.items() if k not in drop}

    # ---- natural-scale parameters ----------------------------------------------------------------------------
    def derived(self, draws: Arrays, c: dict[str, float]) -> Arrays:
        """Natural exponents and prefactors of the three laws: eta* = lr_opt_coef N^lr_opt_exp_N D^lr_opt_exp_D
        (at B*), B* (tokens) and L* (nats/token) likewise; the valley exponents and curvature ratios. A reduced
        design has the laws it fits, named for what they are: ``lr_opt_at_batch_*`` and ``loss_opt_at_batch_*``
        at the table's batch (``fixed_batch``), ``batch_opt_at_lr_*``, ``loss_opt_at_lr_*`` (``fixed_lr``)."""
        at = {"full": "", "fixed_batch": "_at_batch", "fixed_lr": "_at_lr"}[design_of(c)]
        out = {}
        for law, (k0, kN, kD), m in (("lr_opt", ("a0", "a_N", "a_D"), c["m_lr"]),
                                     ("batch_opt", ("b0", "b_N", "b_D"), c["m_b"]),
                                     ("loss_opt", ("g0", "g_N", "g_D"), c["m_y"])):
            if k0 not in draws:  # a law the design leaves out
                continue
            eN, eD = draws[kN] / c["h_N"], draws[kD] / c["h_D"]
            name = law + at
            out[f"{name}_exp_N"], out[f"{name}_exp_D"] = eN, eD
            out[f"{name}_log_coef"] = m + draws[k0] - eN * c["m_N"] - eD * c["m_D"]
        for v, name in (("lr", "lr"), ("b", "batch")):
            if f"p_{v}_unit" in draws:
                out[f"p_{v}"] = PRIORS.p(draws[f"p_{v}_unit"])
                out[f"{name}_curvature_ratio"] = np.exp(2 * draws[f"delta_{v}"])
        return out

    def prior_label(self, site: str) -> str:
        """Size scatter's sites are a reparameterization (`scalinfer.models.surface.size_scatter`): ``<v>_law_std``
        and ``<v>_size_line`` carry the prior of law v's intercept and N exponent, ``<v>_size_resid`` and
        ``<v>_size_u`` the size scatter's (tau_<v>_size); ``w_<v>`` (the pinned optima, whose offsets are
        ``eps_<v>``) the settings' scatter about the law. Each is named with the `Priors` fields that set it
        (``Priors.scaled`` changes one)."""
        law = {"lr": ("log eta*", "optimum_sd, lr_exp_N"), "b": ("log B*", "optimum_sd, batch_exp_N"),
               "loss": ("log L*", "loss_sd, loss_exponent_sd")}
        for v, (what, fields) in law.items():
            if site in (f"{v}_law_std", f"{v}_size_line"):
                return f"{site} (the law of {what}: its intercept and N exponent, priors {fields})"
            if site in (f"{v}_size_resid", f"{v}_size_u"):
                return f"{site} (the model sizes' scatter about the law of {what}, tau_{v}_size: prior {v}_size)"
        if site == PINNED_LOSS:
            return f"{site} (the settings' loss levels' scatter about the loss law, tau_loss: prior tau_loss_sd)"
        if site in PINNED or site in SETTING[:2]:  # eps_<v>: the sampled site of fits written before the pins
            v = site.split("_", 1)[1]
            return f"{site} (the settings' scatter of the optimum about its law, tau_{v}: prior tau_optimum_sd)"
        return site

    def fit_warnings(self, fit: Fit) -> list[str]:
        out = []
        if fit.method == "laplace":
            # the Gaussian at the joint mode misplaces tau_lr and its covariance (benchmarks/README.md)
            out.append("method=laplace on this hierarchical model: the Gaussian at the joint mode misplaces the "
                       "settings' scatter (tau_lr, tau_b) and so the width of predictions at a new setting; "
                       "use it for a first look only, and nuts for intervals")
        c = fit.constants
        k = int(c.get("n_censored_by_ratio", 0))
        if k:
            out.append(f"{k} run(s) with a finite loss above {c['divergence_ratio']:g}x their setting's best were "
                       "treated as diverged (censored), not as losses (option divergence_ratio)")
        if c.get("min_N") == c.get("max_N"):
            out.append("every run has the same N: the N exponents are the prior's, predictions at another N are "
                       "not informed by the data")
        if c.get("min_D") == c.get("max_D"):
            out.append("every run has the same D: the D exponents are the prior's, predictions at another D are "
                       "not informed by the data")
        for k, col in (("batch", "batch_tokens"), ("lr", "lr")):
            if c.get(f"unvaried_{k}"):
                out.append(f"no setting varies its {k} (each (N, D) has one), though the table has several: the "
                           f"{k} valley is confounded with each setting's loss level and is the prior's; cut the "
                           f"table to one {k} (--where \"{col} == ...\") for the design that fits without it")
        return out

    # ---- predictions -----------------------------------------------------------------------------------------
    def predict(self, draws: Arrays, constants: dict[str, float], N=None, D=None, lr=None, batch=None,
                seed: int = 0) -> Arrays:
        """Posterior draws at targets, for a new setting (its own offsets drawn from the population;
        `scalinfer.models.surface.predict`).

        With size scatter, a target N within 0.5% of a fitted model size's N is that size: the new setting sits
        around the size's fitted level (a longer run of a model you trained); any other N is a new size, which
        draws its own level around the laws.

        Parameters
        ----------
        draws : posterior draws (flattened over chains).
        constants : the fit's centering constants.
        N, D : target non-embedding parameters (as fitted: total or active for MoE) and training tokens.
        lr : a proposed peak learning rate: adds ``loss`` there (at ``batch`` if given, else at each draw's B*).
        batch : a batch in tokens: adds ``lr_opt_at_batch`` (the best LR at that batch) and, with ``lr``,
            ``loss``.
        seed : for the new setting's offsets (fixed, so repeated calls agree). With a single draw (a point
            estimate: ``method="map"``) the offsets are 0, so the answer is the laws' value at that point.

        Returns
        -------
        dict with arrays (n_draws, *broadcast target shape): ``lr_opt`` (optimal peak LR at ``batch_opt``),
        ``batch_opt`` (the loss-optimal batch at fixed (N, D), tokens), ``loss_opt`` (nats/token at that joint
        optimum), and as asked ``lr_opt_at_batch``, ``loss``.
        """
        return _predict.predict(draws, constants, N=N, D=D, lr=lr, batch=batch, seed=seed)

    def extrapolation(self, constants: dict[str, float], N=None, D=None, lr=None, batch=None) -> dict[str, Any]:
        """Target N and D over the largest fitted (N_ratio, D_ratio > 1: beyond the data); with size scatter also
        ``fitted_size``: 1 where the target N is a fitted model size's (its level is used), 0 for a new size."""
        out = super().extrapolation(constants, N=N, D=D)
        if constants.get("size_scatter") and N is not None:
            log_Nm = _predict.fitted_log_N(constants)
            out["fitted_size"] = (_predict.fitted_size(log_Nm, np.asarray(N, float)) < len(log_Nm)).astype(float)
        return out

    def predict_warnings(self, constants: dict[str, float], N=None, **targets: Any) -> list[str]:
        """Without size scatter, a target N that is not a fitted size's: its intervals leave out how far a new
        size sits off the law in N. A reduced design says what it does not answer."""
        if design_of(constants) != "full":
            return [_predict.reduced_note(constants)] + self.predict_warnings({**constants, "design": 0.0}, N,
                                                                              **targets)
        if constants.get("size_scatter") or N is None or constants.get("min_N") == constants.get("max_N"):
            return []  # (one fitted N: `fit_warnings` already says that N is the prior's)
        N = np.asarray(N, float)
        log_Nm = _predict.fitted_log_N(constants)
        new = np.unique(N[_predict.fitted_size(log_Nm, N) == len(log_Nm)])
        if not new.size:
            return []
        which = f"N = {new[0]:.3g}" + (f" and {new.size - 1} other N" if new.size > 1 else "")
        return [f"{which}: not a fitted model size. This fit takes every size to sit on the power law in N, so "
                "its intervals there leave out how far a new size sits off it (on Step Law, held-out sizes' best "
                "LR fell inside 7 of 13 such 90% intervals, 10 of 13 with size scatter); refit with "
                "--size-scatter (Python: size_scatter=True) for intervals that carry it"]

    # ---- simulation -----------------------------------------------------------------------------------------
    def true_params(self) -> dict[str, float]:
        """A Step-Law-like truth (`scalinfer.models.surface.simulate.TRUE_PARAMS`)."""
        return dict(_simulate.TRUE_PARAMS)

    def default_design(self, seed: int = 0) -> pd.DataFrame:
        """A Step-Law-shaped grid: 4 model sizes x 3 token budgets (12 settings), LRs 2^-12..2^-6 by sqrt 2
        (13) x 7 batch sizes 64K-4M tokens: 1,092 runs."""
        return _simulate.default_design(seed)

    def simulate(self, params: dict[str, float], design: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
        """Losses on the design's (N, D, lr, batch_tokens) from the surface at natural-scale `params`
        (`scalinfer.models.surface.simulate.simulate`)."""
        return _simulate.simulate(params, design, seed)


MODEL = Surface()
