"""The model interface (`scalinfer.models.base`): declared once, options are data.

Every registered model is a frozen dataclass whose fields are its options: equal options make equal models
that hash equal (so they share compiled programs), an unknown option is a one-line error naming the valid
ones, and a fit saves the options so that `Fit.model`, fresh or reloaded, is the model that was fitted.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import scalinfer
from scalinfer.errors import FitFileError, ModelError
from scalinfer.models import MODEL_NAMES, get_model, model_version
from scalinfer.models.base import LossCurve, Model


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_is_a_frozen_dataclass_of_its_options(name):
    m = get_model(name)
    assert isinstance(m, Model) and dataclasses.is_dataclass(m)
    assert m.options() == {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}
    again = m.with_options(**m.options())
    assert again == m and hash(again) == hash(m) and again is not m
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.name_of_no_field = 1  # type: ignore[attr-defined]
    with pytest.raises(ModelError, match=f"model '{name}' takes .*not colour"):
        m.with_options(colour="red")


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_registry_knows_each_models_version(name):
    """Reading a fit file checks the model's version against the registry, without importing the model."""
    assert model_version(name) == get_model(name).version


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(ModelError, match="takes options target_losses, interpolate; not colour"):
        get_model("batch-wsd").with_options(colour="red")
    with pytest.raises(ModelError, match="'chinchilla' takes no options; not size_scatter"):
        get_model("chinchilla").with_options(size_scatter=True)
    with pytest.raises(ModelError, match="takes no options"):  # through fit(): before any work
        scalinfer.fit(scalinfer.simulate("chinchilla"), model="chinchilla", size_scatter=True)


def test_options_are_validated_and_normalized():
    wsd = get_model("batch-wsd")
    a = wsd.with_options(target_losses=[3.0, 2.7])
    assert a.target_losses == (3.0, 2.7) and a == wsd.with_options(target_losses=np.array([3, 2.7]))
    assert a != wsd and a.with_options(target_losses=None) == wsd
    with pytest.raises(ModelError, match="target_losses must be positive"):
        wsd.with_options(target_losses=[3.0, -1.0])
    with pytest.raises(ModelError, match="vertex must be"):
        get_model("classic").with_options(vertex="middle")


def test_the_interface_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        Model()  # type: ignore[abstract]

    @dataclasses.dataclass(frozen=True)
    class NoPredict(Model):
        name = "no-predict"

        def prepare(self, runs):
            return {}, {}

        def simulate(self, params, design, seed=0):
            return design

        def default_design(self, seed=0):
            return None

        def true_params(self):
            return {}

    with pytest.raises(TypeError, match="predict"):
        NoPredict()  # type: ignore[abstract]


def test_loss_curve_models_are_declared():
    have = {name for name in MODEL_NAMES if isinstance(get_model(name), LossCurve)}
    assert have == {"batch-wsd", "batch-floor"}


@pytest.mark.slow
def test_equal_batch_models_with_options_compile_once():
    """Two equal ``batch-wsd`` models built apart (same options) share every compiled program: a second fit
    of new data of the same shapes compiles nothing."""
    from support.compile_log import CompileLog

    wsd = get_model("batch-wsd")
    tables = [scalinfer.simulate("batch-wsd", seed=s) for s in (1, 2)]
    fits, logs = [], []
    for table in tables:
        m = wsd.with_options(target_losses=[3.0, 2.9])  # a new object each time, equal to the other
        with CompileLog() as log:
            fits.append(scalinfer.fit(table, model=m, method="laplace", chains=1, samples=20, seed=0))
        logs.append(log)
    assert fits[0].model == fits[1].model and fits[0].model is not fits[1].model
    assert logs[0].compiles + logs[0].hits > 0, "the first fit compiled nothing"
    assert logs[1].compiles == 0 and logs[1].hits == 0, sorted(logs[1].by_name)


def test_options_are_saved_and_the_fitted_model_comes_back(tmp_path):
    runs = scalinfer.simulate("classic", seed=3)
    f = scalinfer.fit(runs, model="classic", vertex="best", window=0.7, samples=20, chains=1)
    fitted = get_model("classic").with_options(vertex="best", window=0.7)
    assert f.model == fitted
    again = scalinfer.load_fit(f.save(tmp_path / "f.nc"))
    assert again.model == fitted and again.model != get_model("classic")
    np.testing.assert_array_equal(again.predict(N=1e10, D=2e11)["lr_opt"], f.predict(N=1e10, D=2e11)["lr_opt"])


def test_a_fit_file_without_options_reads_as_the_defaults(tmp_path):
    f = scalinfer.fit(scalinfer.simulate("classic", seed=3), model="classic", samples=20, chains=1)
    del f.tree.attrs["model_options"]  # as files written before options were saved
    assert scalinfer.load_fit(f.save(tmp_path / "old.nc")).model == get_model("classic")


def test_a_fit_file_with_options_this_model_does_not_take_is_refused(tmp_path):
    f = scalinfer.fit(scalinfer.simulate("classic", seed=3), model="classic", samples=20, chains=1)
    f.tree.attrs["model_options"] = '{"colour": "red"}'
    with pytest.raises(FitFileError, match="options .*colour"):
        scalinfer.load_fit(f.save(tmp_path / "odd.nc"))
