"""Trainer configuration, WSD schedules, per-module LRs and muP factors, schedule files (no training)."""

from __future__ import annotations

import dataclasses
import doctest
import json
import math

import numpy as np
import pytest

from scalinfer.errors import TrainError
from scalinfer.schedules import wsd
from scalinfer.schedules.file import load_schedule, validate_schedule, write_schedule
from scalinfer.schedules.wsd import branch_schedule, wsd_schedule
from scalinfer.train import config as cfg_lib
from scalinfer.train.config import ModelConfig, MupConfig, OptimizerConfig, apply_overrides, load_config, preset
from scalinfer.train.model import param_counts
from scalinfer.train.optimizer import lr_multipliers, weight_decays
from scalinfer.train.token_plan import make_plan

# --- WSD -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["linear", "cosine", "1-sqrt"])
def test_wsd_exact_at_boundaries(shape):
    peak, final = 3e-3, 0.1
    s = wsd_schedule(peak, total=1000, warmup=100, decay=200, shape=shape, final_fraction=final)
    assert float(s(0)) == 0.0
    assert float(s(50)) == pytest.approx(peak / 2)
    assert float(s(100)) == np.float32(peak)          # exactly the peak at the end of warmup
    assert float(s(799)) == np.float32(peak)          # still the peak just before the decay
    assert float(s(800)) == np.float32(peak)          # the decay starts from the peak
    assert float(s(1000)) == np.float32(peak * final)  # exactly the final value at the end
    assert float(s(5000)) == np.float32(peak * final)
    decay = np.array([float(s(t)) for t in range(800, 1001, 10)])
    assert np.all(np.diff(decay) < 0), "the decay is strictly decreasing"


def test_wsd_decay_shapes_midpoint():
    mid = {shape: float(wsd_schedule(1.0, 100, 0, 100, shape)(50)) for shape in ("linear", "cosine", "1-sqrt")}
    assert mid["linear"] == pytest.approx(0.5)
    assert mid["cosine"] == pytest.approx(0.5)
    assert mid["1-sqrt"] == pytest.approx(1 - math.sqrt(0.5))


def test_wsd_rejects_overlong_phases():
    with pytest.raises(TrainError, match="exceed"):
        wsd_schedule(1.0, total=100, warmup=60, decay=50)


def test_wsd_docstring_examples():
    """The module's doctests: the schedule is the peak at the end of warmup and the floor at the end of decay."""
    assert doctest.testmod(wsd).failed == 0


@pytest.mark.parametrize("shape", ["linear", "cosine", "1-sqrt"])
def test_branch_is_the_main_decay_forked_earlier(shape):
    """A branch forked at F decays like the main run's decay started at F: peak before, floor from F + K on."""
    peak, final = 3e-3, 0.1
    main = wsd_schedule(peak, total=1000, warmup=100, decay=200, shape=shape, final_fraction=final)
    branch = branch_schedule(peak, fork=300, decay=200, shape=shape, final_fraction=final)
    assert float(branch(0)) == np.float32(peak) and float(branch(300)) == np.float32(peak)
    assert float(branch(500)) == np.float32(peak * final) and float(branch(10_000)) == np.float32(peak * final)
    assert [float(branch(t)) for t in range(300, 501, 10)] == [float(main(t + 500)) for t in range(300, 501, 10)]
    with pytest.raises(TrainError, match="unknown decay shape"):
        branch_schedule(peak, fork=300, decay=200, shape="step")


# --- config ----------------------------------------------------------------------------------


def test_overrides_types_and_errors():
    c = apply_overrides(preset("tiny"), ["lr=1e-3", "model.d_model=64", "decay_shape=1-sqrt", "warmup=10",
                                         "decay=0.25", "decay_points=[0.5, 2e5]", "model.mup={}"])
    assert c.optimizer.lr == 1e-3 and c.model.d_model == 64 and c.optimizer.decay_shape == "1-sqrt"
    assert c.optimizer.warmup == 10 and isinstance(c.optimizer.warmup, int)   # int: steps
    assert c.optimizer.decay == 0.25 and isinstance(c.optimizer.decay, float)  # float: fraction
    assert c.decay_points == (0.5, 2e5) and c.model.mup == MupConfig()
    with pytest.raises(TrainError, match="no config field 'nope'"):
        apply_overrides(c, ["nope=1"])
    with pytest.raises(TrainError, match="model.d_model: expected an integer"):
        apply_overrides(c, ["model.d_model=wide"])
    with pytest.raises(TrainError, match="decay_shape.*not one of"):
        apply_overrides(c, ["decay_shape=quadratic"])
    with pytest.raises(TrainError, match="top_k=5 must be between 1 and model.n_experts=4"):
        apply_overrides(c, ["top_k=5"])
    with pytest.raises(TrainError, match="not a multiple of micro_batch_tokens"):
        apply_overrides(c, ["batch_tokens=3072", "micro_batch_tokens=2048"])
    with pytest.raises(TrainError, match="unknown preset"):
        preset("huge")


def test_load_config_toml(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('name = "x"\ntotal_tokens = 2e5\ndecay_points = [0.5]\n[model]\nd_model = 48\n'
                    '[optimizer]\nlr = 1e-3\n[optimizer.lr_mult]\nrouter = 0.5\n')
    c = load_config(str(path), ["optimizer.lr=2e-3"], "cal-xs")
    assert (c.name, c.total_tokens, c.model.d_model, c.optimizer.lr, c.optimizer.lr_mult.router) == \
        ("x", 200_000, 48, 2e-3, 0.5)
    assert c.model.n_experts == preset("cal-xs").model.n_experts
    (tmp_path / "bad.toml").write_text("[model]\nwidth = 3\n")
    with pytest.raises(TrainError, match=r"bad.toml.model: unknown key 'width'"):
        load_config(str(tmp_path / "bad.toml"))


def test_presets_span_calibration_sizes():
    sizes = {n: param_counts(c.model) for n, c in cfg_lib.PRESETS.items()}
    cal = [sizes[n].non_embedding for n in ("cal-xs", "cal-s", "cal-m", "cal-l")]
    assert cal == sorted(cal) and 0.1e6 <= cal[0] and cal[-1] <= 1.1e6
    for n in ("cal-xs", "cal-s", "cal-m", "cal-l"):
        moe, dense = sizes[n], sizes[n + "-dense"]
        assert moe.non_embedding_active == pytest.approx(dense.non_embedding, rel=0.02), n
        assert dense.non_embedding == dense.non_embedding_active


def test_param_counts_by_hand():
    m = ModelConfig(vocab_size=256, d_model=16, n_layers=2, n_heads=2, d_ff=8, n_experts=4, top_k=1,
                    shared_expert=True)
    attn, norms, router, expert = 4 * 16 * 16, 2 * 16, 16 * 4, 3 * 16 * 8
    per_layer = attn + norms + router + expert + 4 * expert  # shared + 4 routed
    c = param_counts(m)
    assert c.non_embedding == 2 * per_layer + 16
    assert c.non_embedding_active == 2 * (per_layer - 3 * expert) + 16
    assert c.embedding == 2 * 256 * 16 and c.total == c.non_embedding + c.embedding


# --- per-module LR, muP, weight decay --------------------------------------------------------


def test_lr_multipliers_mup_and_modules():
    base = ModelConfig(d_model=64, n_layers=2, n_heads=2, d_ff=64)
    opt = OptimizerConfig(lr_mult=cfg_lib.LrMultipliers(router=0.5, embedding=2.0))
    assert lr_multipliers(base, opt) == {"embedding": 2.0, "attention": 1.0, "experts": 1.0,
                                         "router": 0.5, "lm_head": 1.0, "norms": 1.0}
    wide = dataclasses.replace(base, d_model=256, n_layers=8, mup=MupConfig(base_d_model=64, base_n_layers=2,
                                                                            depth_alpha=0.5))
    m = lr_multipliers(wide, opt)
    hidden = (1 / 4) * 4 ** (0.5 - 1)    # eta / m_N * m_L^(alpha - 1)
    assert m["attention"] == pytest.approx(hidden) and m["experts"] == pytest.approx(hidden)
    assert m["embedding"] == 2.0 and m["lm_head"] == 1.0 and m["norms"] == 1.0
    assert m["router"] == pytest.approx(0.5)   # "output" rule: LR eta, output multiplier 1/m_N
    hidden_router = dataclasses.replace(wide, mup=dataclasses.replace(wide.mup, router="hidden"))
    assert lr_multipliers(hidden_router, opt)["router"] == pytest.approx(0.5 / 4)


def test_weight_decay_timescale_fixed():
    m = ModelConfig(mup=MupConfig(base_d_model=32))
    opt = OptimizerConfig(lr=1e-2, weight_decay_timescale=0.25)
    steps = 400
    lam, mult = weight_decays(m, opt, steps), lr_multipliers(m, opt)
    for g in lam:   # 1 / (eta_g lambda_g) = tau * steps in every group
        assert 1 / (opt.lr * mult[g] * lam[g]) == pytest.approx(0.25 * steps)


# --- schedule files --------------------------------------------------------------------------

EXAMPLE = {"format": "scalinfer.schedule/1",
           "batch": [{"from_tokens": 0, "batch_tokens": 8192}, {"from_tokens": 2e6, "batch_tokens": 16384}],
           "lr": {"peak": 3e-3, "warmup_tokens": 1e5, "decay_start_tokens": 4e6, "total_tokens": 5e6,
                  "decay_shape": "linear", "final_fraction": 0.0}}


def test_schedule_file_roundtrip(tmp_path):
    path = write_schedule(tmp_path / "sub" / "s.json", EXAMPLE)
    s = load_schedule(path)
    assert s.batch_tokens_at(0) == 8192 and s.batch_tokens_at(2e6 - 1) == 8192
    assert s.batch_tokens_at(2e6) == 16384 and s.batch_tokens_at(1e9) == 16384
    assert s.lr.peak == 3e-3 and s.lr.decay_start_tokens == 4e6
    assert json.loads(path.read_text()) == s.to_dict()
    assert [p.name for p in path.parent.iterdir()] == ["s.json"], "no temp file left behind"
    no_lr = validate_schedule({k: v for k, v in EXAMPLE.items() if k != "lr"})
    assert no_lr.lr is None


@pytest.mark.parametrize("patch, message", [
    ({"format": "other/2"}, "'format' is 'other/2'"),
    ({"batch": []}, "non-empty list"),
    ({"batch": [{"from_tokens": 5, "batch_tokens": 8}]}, r"batch\[0\].from_tokens: the first stage must start at 0"),
    ({"batch": [{"from_tokens": 0, "batch_tokens": 8}, {"from_tokens": 0, "batch_tokens": 16}]},
     r"batch\[1\].from_tokens: 0 does not increase"),
    ({"batch": [{"from_tokens": 0, "batch_tokens": 8.5}]}, "not a positive integer"),
    ({"lr": {**EXAMPLE["lr"], "decay_start_tokens": 6e6}}, "warmup_tokens <= decay_start_tokens <= total_tokens"),
    ({"lr": {**EXAMPLE["lr"], "decay_shape": "step"}}, "decay_shape: 'step'"),
    ({"lr": {"peak": 1e-3}}, "missing decay_start_tokens, total_tokens, warmup_tokens"),
    ({"extra": 1}, "unknown key"),
])
def test_schedule_file_errors(tmp_path, patch, message):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**EXAMPLE, **patch}))
    with pytest.raises(TrainError, match=message):
        load_schedule(path)
    with pytest.raises(TrainError, match=message):
        write_schedule(tmp_path / "w.json", {**EXAMPLE, **patch})
    assert not (tmp_path / "w.json").exists()


def test_plan_with_schedule_file(tmp_path):
    sched = {"batch": [{"from_tokens": 0, "batch_tokens": 1024}, {"from_tokens": 10_000, "batch_tokens": 2048}],
             "lr": {"peak": 2e-3, "warmup_tokens": 2048, "decay_start_tokens": 16_384, "total_tokens": 20_480}}
    write_schedule(tmp_path / "s.json", sched)
    c = apply_overrides(preset("tiny"), [f"schedule_file={json.dumps(str(tmp_path / 's.json'))}",
                                         "micro_batch_tokens=1024"])
    plan = make_plan(c)
    assert plan.lr_peak == 2e-3 and plan.total_tokens == 20_480 and plan.decay_tokens == 4096
    steps = np.diff((0,) + plan.step_tokens)
    assert list(steps[:10]) == [1024] * 10 and set(steps[10:]) == {2048}   # switch at the first step >= 10k
    assert float(plan.lr_main()(2048)) == np.float32(2e-3)
    bad = apply_overrides(c, ["micro_batch_tokens=2048", "batch_tokens=2048"])
    with pytest.raises(TrainError, match=r"batch\[0\].batch_tokens=1024 is not a multiple of micro_batch_tokens=2048"):
        make_plan(bad)


def test_plan_branches_and_errors(tmp_path):
    c = apply_overrides(preset("tiny"), ["total_tokens=204800", "batch_tokens=2048", "warmup=0.1",
                                         "decay=0.2", "decay_points=[0.25, 0.5]"])
    plan = make_plan(c)
    assert plan.steps == 100 and plan.warmup_tokens == 20480 and plan.decay_tokens == 40960
    b = plan.branches[0]
    assert (b.fork_step, b.fork_tokens) == (25, 51200)
    assert b.decay_tokens == round(0.2 / 0.8 * 51200)   # the decay is 20% of the branch, like the main run
    lr = plan.lr_branch(b)
    assert float(lr(b.fork_tokens)) == np.float32(c.optimizer.lr) and float(lr(b.end_tokens)) == 0.0
    with pytest.raises(TrainError, match=r"decay_points\[0\]=0.9 forks at 184320 tokens, outside the stable phase"):
        make_plan(apply_overrides(c, ["decay_points=[0.9]"]))
    path = write_schedule(tmp_path / "s.json", {"batch": [{"from_tokens": 0, "batch_tokens": 2048}]})
    with pytest.raises(TrainError, match="warmup=5 is in steps, but the batch size changes"):
        make_plan(apply_overrides(c, ["warmup=5", f"schedule_file={json.dumps(str(path))}"]))
