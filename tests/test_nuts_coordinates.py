"""NUTS's coordinates chosen from the mode (`Model.nuts_kwargs`) and `fit`'s return to the model's own where they
diverge.

The known case is Neal's funnel, v ~ N(0, 3^2), x ~ N(0, e^v): written non-centered (x = e^(v/2) x_raw) NUTS
samples it without divergences; written centered it cannot reach the neck without them. The toy model below
takes the centering c as an argument (x_raw ~ N(0, e^(c v/2)), x = e^((1 - c) v/2) x_raw: the same joint law
of (v, x) for every c), and its `nuts_kwargs` proposes c."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd

from scalinfer.inference.fit import fit
from scalinfer.models.base import Model
from scalinfer.runs.schema import validate


@dataclasses.dataclass(frozen=True)
class Funnel(Model):
    """Neal's funnel with centering c (module docstring), and two far observations of x (y ~ N(x, 1000^2)), so the
    posterior is the funnel itself. (At y ~ N(x, 10^2) they pinned x_raw at large v, e^v / 50 against its prior's 1,
    a funnel of the non-centered form's own that 600 draws reached or not with the rounding: 2 divergent under
    jax 0.12.1, none under 0.12.0.) `proposed`: the c that `nuts_kwargs` proposes (None: it proposes nothing);
    `own`: the model's own c."""

    proposed: float | None = None
    own: float = 0.0

    name = "test-funnel"
    observed = ("y",)
    predicts = {"x": "units"}

    def prepare(self, runs):
        return {"y": np.zeros(2)}, {}

    def model(self, y, c):
        v = numpyro.sample("v", dist.Normal(0.0, 3.0))
        x_raw = numpyro.sample("x_raw", dist.Normal(0.0, jnp.exp(c * v / 2)))
        x = numpyro.deterministic("x", jnp.exp((1 - c) * v / 2) * x_raw)
        with numpyro.plate("run", y.shape[0]):
            numpyro.sample("obs", dist.Normal(x, 1000.0), obs=y)

    def model_kwargs(self, data, constants):
        return {"y": data["y"], "c": np.float64(self.own)}

    def init_values(self, data, constants):
        return {"v": 0.0, "x_raw": 0.0}

    def predict(self, draws, constants, N=None, D=None):
        return {"x": np.asarray(draws["x"], float)}

    def default_design(self, seed=0):
        return pd.DataFrame({"N": [1e8], "D": [2e9]})

    def true_params(self):
        return {}

    def simulate(self, params, design, seed=0):
        return design.assign(loss=3.0)

    def nuts_kwargs(self, kwargs, point):
        if self.proposed is None:
            return None
        c = np.float64(self.proposed)
        x_raw = np.exp(point.params["v"] / 2) ** -c * point.params["x"]  # the mode's x_raw at centering c
        return {**kwargs, "c": c}, {"v": point.params["v"], "x_raw": x_raw}


RUNS = validate(pd.DataFrame({"N": [1e8, 2e8], "D": [2e9, 2e9], "loss": [3.0, 3.0]}), source="toy", kind="runs")


def _fit(proposed, own=0.0, quiet=True, target_accept=None):
    return fit(RUNS, model=Funnel(proposed, own), chains=2, warmup=300, samples=300, max_samples=300, seed=0,
               quiet=quiet, target_accept=target_accept)


def test_own_coordinates_without_a_proposal():
    f = _fit(None)
    assert "nuts_coordinates" not in f.attrs
    assert f.divergences == 0  # the non-centered funnel: the premise of the tests below


def test_coordinates_from_the_mode_kept_when_they_do_not_diverge():
    f = _fit(0.0)  # proposes the non-centered form again: no divergence, no second run
    assert f.attrs["nuts_coordinates"] == "from the mode"
    assert f.divergences == 0


def test_diverging_coordinates_from_the_mode_give_way_to_the_models_own(capsys):
    """Proposed centered (c = 1), NUTS diverges in the neck; `fit` stops that run at its first divergent draws,
    samples again in the model's own coordinates (non-centered, no divergence) and keeps those draws, with the log
    likelihood of their kwargs."""
    f = _fit(1.0, quiet=False)
    said = capsys.readouterr().err
    # stopped, and again from warmup's terminal window with a smaller step (target_accept 0.9 -> 0.95), which cannot
    # reach the neck either
    assert "from the mode; sampled again there from warmup's terminal window (iteration 250)" in said
    n = int(said.split("a divergent transition at target_accept 0.95 after ")[1].split(" draws")[0])
    assert n < 300
    assert "sampling in full" not in said
    assert f.attrs["nuts_coordinates"] == "the model's own (fewer divergences)"
    assert f.attrs["target_accept"] == 0.9  # the model's own run at the target asked for
    assert f.divergences == 0
    x = f.arrays("posterior", ["x", "v"])
    # the funnel's v is N(0, 3^2) (the data barely inform it): 600 draws put its sd within 2.2-3.8 (a chain that
    # cannot reach the neck, the centered form's failure, gives ~1.5)
    assert 2.2 < float(np.std(x["v"])) < 3.8


def test_coordinates_from_the_mode_run_in_full_when_the_models_own_diverge_too(capsys):
    """Both centered (proposed and own c = 1): the run from the mode stopped at its first divergent draws is run
    again in full (the same draws, then the rest), and the fit keeps whichever coordinates diverge less, with all
    its draws."""
    f = _fit(1.0, own=1.0, quiet=False)
    said = capsys.readouterr().err
    assert "divergent transitions in the model's own coordinates; sampling in full" in said
    assert f.posterior.sizes["draw"] == 300
    assert f.divergences > 0
    assert f.attrs["nuts_coordinates"] in ("from the mode", "the model's own (fewer divergences)")


def test_coordinates_from_the_mode_run_again_with_a_smaller_step_where_they_diverge(monkeypatch, capsys):
    """Where the run from the mode diverges, NUTS goes again there from warmup's terminal window at target_accept
    halfway to 1 (`run_nuts`'s ``careful_target_accept``, whose own test is in tests/test_nuts.py) and `fit` keeps
    that run where it does not diverge, before it would turn to the model's own coordinates. The divergence at 0.9
    is made here (`run_nuts` answers as its careful run would: the run at the terminal target 0.95), so the test
    does not hang on where a real one falls."""
    from scalinfer.inference import nuts

    real = nuts.run_nuts

    def run_nuts(*args, careful_target_accept=None, stop_when_divergent=False, **kwargs):
        if careful_target_accept is not None:  # the run at 0.9 "diverged": what its careful run gives
            assert stop_when_divergent
            return real(*args, terminal_target_accept=careful_target_accept, stop_when_divergent=True, **kwargs)
        return real(*args, stop_when_divergent=stop_when_divergent, **kwargs)

    monkeypatch.setattr(nuts, "run_nuts", run_nuts)
    f = _fit(0.0, quiet=False)  # non-centered: no real divergence at any target
    said = capsys.readouterr().err
    assert "sampled again there from warmup's terminal window (iteration 250) with target_accept 0.95" in said
    assert "model's own" not in said
    assert f.attrs["nuts_coordinates"] == "from the mode"
    assert f.attrs["target_accept"] == 0.95
    assert f.divergences == 0
    monkeypatch.setattr(nuts, "run_nuts", real)
    plain = _fit(0.0)
    assert plain.attrs["target_accept"] == 0.9
    # the careful run's draws kept, not those of the run at 0.9
    v, v_plain = (x.arrays("posterior", ["v"])["v"] for x in (f, plain))
    assert not np.array_equal(v, v_plain)
