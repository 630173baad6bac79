"""`scalinfer plan`: LR grids, aligned decay branches, costs against the full grid, budgets, the sweep file."""

from __future__ import annotations

import math
import tomllib

import pytest

from conftest import run_cli
from scalinfer.errors import TrainError
from scalinfer.laws import step_law_lr_opt
from scalinfer.sweep.plan import (
    PlanSpec, aligned_decay_points, check_plan_configs, dense_counterpart, lr_grid, make_plan, parse_size,
)
from scalinfer.train.token_plan import make_plan as trainer_plan


def test_lr_grid_is_geometric_and_centred():
    lrs = lr_grid(0.01, 6, 2.0)
    assert len(lrs) == 6
    assert math.sqrt(lrs[2] * lrs[3]) == pytest.approx(0.01, rel=2e-3)
    for a, b in zip(lrs, lrs[1:]):
        assert b / a == pytest.approx(2.0, rel=5e-3)
    assert lr_grid(0.01, 3, 3.0) == (0.00333, 0.01, 0.03)
    with pytest.raises(TrainError, match="LR grid"):
        lr_grid(0.01, 4, 1.0)


def test_decay_points_align_so_every_batch_ends_at_the_same_D():
    forks, ends = aligned_decay_points(327_680, 3, 0.2, 2048, 0.05)
    assert forks == (32_768, 65_536, 131_072) and ends == (40_960, 81_920, 163_840)
    with pytest.raises(TrainError, match="stable phase"):
        aligned_decay_points(327_680, 6, 0.2, 2048, 0.05)


def test_parse_size_shapes_presets_and_counts():
    s = parse_size("d64l2h4")
    assert (s.model.d_model, s.model.n_layers, s.model.n_heads, s.model.n_experts) == (64, 2, 4, 8)
    assert s.model.d_ff == 64  # cal-xs keeps d_ff = d_model
    dense = parse_size("d64l2h4-dense")
    assert dense.model.n_experts == 1 and dense.model.d_ff == 128 and dense.model.capacity_factor is None
    assert dense.N_total == s.N_active - 2 * 64 * 8  # the MoE's active parameters less its 2 routers
    assert dense_counterpart(s.model) == dense.model
    assert parse_size("cal-s").model.d_model == 64
    near = parse_size("2.3e5")
    assert abs(math.log(near.N_total / 2.3e5)) < 0.3
    with pytest.raises(TrainError, match="size 'd64x2'"):
        parse_size("d64x2")


def _spec(**kw) -> PlanSpec:
    sizes = tuple(parse_size(s) for s in ("d32l2h2", "d64l2h4"))
    base = dict(sizes=sizes, target_N=5e6, target_D=1e7, lr_count=4, decay_count=2, batches=(512, 1024),
                tokens=65_536, preset="cal-xs")
    base.update(kw)
    return PlanSpec(**base)


def test_plan_costs_and_full_grid():
    plan = make_plan(_spec())
    assert plan.n_runs == 2 * 4 * 2 and plan.n_records == plan.n_runs * 3
    for s in plan.sizes:
        assert s.D_points[-1] == s.total_tokens == 65_536
        forks, ends = s.decay_points, s.D_points[:-1]
        assert s.tokens_per_run == 65_536 + sum(e - f for f, e in zip(forks, ends))
        assert s.flops == pytest.approx(s.size.flops_per_token * s.tokens_per_run * 8)
        assert s.full_grid_flops == pytest.approx(s.size.flops_per_token * sum(s.D_points) * 8)
        # the grid is centred on the prior (Step Law) at the size's geometric middle D
        mid = math.exp(sum(math.log(d) for d in s.D_points) / len(s.D_points))
        assert s.lr_center == pytest.approx(float(step_law_lr_opt(s.size.N_total, mid)), rel=1e-6)
    assert plan.full_grid_flops > plan.flops
    summary = plan.summary()
    assert summary["saving"] == pytest.approx(plan.full_grid_flops / plan.flops)
    assert "full grid" in plan.table()


def test_plan_sweep_file_matches_the_trainer():
    plan = make_plan(_spec(lr_scale=0.5))
    configs = check_plan_configs(plan)
    assert len(configs) == plan.n_runs
    ends = {}
    for cfg in configs:
        p = trainer_plan(cfg)
        ends.setdefault(cfg.model.d_model, set()).add((p.total_tokens, *(b.end_tokens for b in p.branches)))
    # every batch size of a model size ends its branches at the same D: shared (N, D) settings
    assert all(len(v) == 1 for v in ends.values())
    lrs = {cfg.optimizer.lr for cfg in configs if cfg.model.d_model == 32}
    assert set(plan.sizes[0].lrs) == lrs


def test_budget_scales_tokens_or_refuses():
    full = make_plan(_spec(tokens=None, tokens_per_param=2.0))
    budget = full.flops / 3
    fitted = make_plan(_spec(tokens=None, tokens_per_param=2.0, budget_flops=budget))
    assert fitted.flops <= budget and fitted.scaled < 0.4
    assert fitted.sizes[1].total_tokens > fitted.sizes[0].total_tokens  # tokens proportional to N
    with pytest.raises(TrainError, match="over the budget"):
        make_plan(_spec(budget_flops=1e6))


def test_plan_rejects_bad_input():
    with pytest.raises(TrainError, match="repeat"):
        make_plan(_spec(sizes=(parse_size("d32l2h2"), parse_size("d32l2h2"))))
    with pytest.raises(TrainError, match="seq_len"):
        make_plan(_spec(batches=(500,)))
    with pytest.raises(TrainError, match="prior 'nolaw'"):
        make_plan(_spec(prior="nolaw"))
    with pytest.raises(TrainError, match="no batch law"):
        make_plan(_spec(prior="zhou2026", batches=()))


def test_plan_cli_writes_a_sweep_file(tmp_path):
    out = tmp_path / "sweep.toml"
    r = run_cli("plan", "--size", "d32l2h2,d48l2h3", "--dense", "d32l2h2", "--target-N", "1e6", "--target-D",
                "1e7", "--batch-count", "2", "--tokens", "131072", "--lrs", "3", "--decays", "2", "-o", out, "--json")
    assert r.code == 0, r.err
    summary = r.json()
    assert [s["label"] for s in summary["sizes"]] == ["d32l2h2", "d48l2h3", "d32l2h2-dense"]
    # without --batches, two batches around Step Law's B* = 0.58 D^0.571 (powers of two times seq_len)
    assert all(len(s["batches"]) == 2 and all(b % 128 == 0 for b in s["batches"]) for s in summary["sizes"])
    data = tomllib.loads(out.read_text())
    assert len(data["grid"]) == 3 and data["sweep"]["preset"] == "cal-xs"
    assert summary["runs"] == 3 * 3 * 2
    bad = run_cli("plan", "--size", "d32l2", "--target-N", "-1", "--target-D", "1e7")
    assert bad.code != 0
    bad = run_cli("plan", "--size", "d32l2h2", "--target-N", "1e6", "--target-D", "1e7", "--batches", "500")
    assert bad.code == 2 and bad.err.startswith("error:") and "seq_len" in bad.err
    # a path that cannot be written (its folder is a file): an error naming it, not a traceback
    bad = run_cli("plan", "--size", "d32l2h2", "--target-N", "1e6", "--target-D", "1e7", "-o", out / "x.toml")
    assert bad.code == 2 and f"{out} is a file, not a folder" in bad.err and "Traceback" not in bad.err
    assert tomllib.loads(out.read_text())["sweep"]["preset"] == "cal-xs"  # the earlier file is untouched
    # more tokens than a TOML integer holds (benchmarks/fuzz_cli.py, seed 0, #1126: a TypeError from NumPy)
    bad = run_cli("plan", "--size", "cal-xs", "--target-N", "1e7", "--target-D", "2e8", "--tokens", "1e30")
    assert bad.code == 2 and "64-bit" in bad.err and "Traceback" not in bad.err


def test_decay_points_are_found_without_enumerating_the_run():
    # the fork point is computed, not searched over every batch of the run: 1e30 tokens answer at once with
    # the same rule (the multiple of the alignment nearest total * 2^-k * (1 - decay fraction))
    total = 10**30 // 256 * 256
    forks, ends = aligned_decay_points(total, 3, 0.2, 256, 0.01)
    ratio = 0.2 / 0.8
    for k, (f, e) in zip((3, 2, 1), zip(forks, ends)):
        assert f % (4 * 256) == 0 and e == f + round(ratio * f)
        assert abs(f - total / 2 ** k * 0.8) <= 4 * 256


def test_parse_size_refuses_empty_shapes():
    for spec in ("d0l2", "d64l0", "d0l0"):
        with pytest.raises(TrainError, match="at least 1"):
            parse_size(spec)


def test_plan_refuses_runs_the_trainer_cannot_set_up_in_one_line():
    # `plan --tokens 9e18` planned runs of 6e8 steps each and set about resolving every step of their token plans
    # (a reproduction had taken 10 GB of memory when it was stopped; the fuzzer's hang after 120 s was a plan of
    # 1e30 tokens); now it answers at once, naming the limit and what to change
    bad = run_cli("plan", "--size", "cal-xs", "--target-N", "1e7", "--target-D", "2e8", "--tokens", "9e18")
    assert bad.code == 2 and "MAX_RUN_STEPS" in bad.err and "--tokens" in bad.err
    assert len(bad.err.strip().splitlines()) == 1
    bad = run_cli("plan", "--size", "d64l2", "--target-N", "1e7", "--target-D", "2e8", "--decays", "40")
    assert bad.code == 2 and "--decays" in bad.err
    # a parameter count no shape is near names the flag, and the range of shapes it could be
    bad = run_cli("plan", "--size", "1e30", "--target-N", "1e7", "--target-D", "2e8")
    assert bad.code == 2 and bad.err.startswith("error: --size '1e30'") and "give a shape" in bad.err
