"""Fitting the batch models: recovery and a small calibration run, the batch-size schedule, the CLI
(`predict`, `compare`, `schedule`) and the figures.

Cost: one NUTS fit of ``batch-floor`` on simulated loss curves (shared by every test here that needs a
posterior, via a module fixture; it is the small version of `benchmarks/calibration_batch.py`) and two
short NUTS fits of a simulated steps-to-target table for the LOO comparison.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import scalinfer
from scalinfer.cli import main as cli
from scalinfer.errors import ModelError
from scalinfer.models.batch import OPENAI
from scalinfer.runs.schema import validate
from scalinfer.schedules.batch import batch_schedule, segment_batches, segment_bounds, write_schedule
from support import batch_calibration


@pytest.fixture(scope="module")
def floor_run():
    """(calibration row, fit, module) of one simulated data set with known B_min and B_opt.

    Seed 1001 is fixed once; the truth is drawn by `support.batch_calibration.draw_truth`. 2 chains x 300 draws
    after 300 warmup: enough for 90% intervals (bulk ESS > 200 on this model)."""
    row, fit = batch_calibration.one(seed=1001, chains=2, warmup=300, samples=300, n_records=8, return_fit=True)
    return row, fit, batch_calibration


@pytest.fixture(scope="module")
def table_fits(tmp_path_factory):
    """Two short NUTS fits of batch-openai to one simulated steps-to-target table (seeds 0 and 1), saved.

    NUTS, not Laplace: on these hierarchical posteriors Laplace draws give PSIS-LOO nothing to work with
    (every Pareto k > 0.7). The same model twice keeps the test cheap (the second fit reuses the compiled
    programs); benchmarks/zhang_batch.py ranks the three models against each other on real data."""
    df = OPENAI.simulate(OPENAI.true_params(), OPENAI.default_design(), seed=3)
    runs = validate(df, "simulated table", "steps_to_target", row_offset=None)
    d = tmp_path_factory.mktemp("table_fits")
    out = {}
    for seed in (0, 1):
        f = scalinfer.fit(runs, model="batch-openai", chains=2, warmup=200, samples=200, seed=seed)
        out[f"openai-{seed}"] = (f, f.save(d / f"openai-{seed}.nc"))
    return out


@pytest.mark.slow
def test_floor_recovers_known_batch_min_and_batch_opt(floor_run):
    row, fit, _ = floor_run
    # the truth of a data set simulated from the model falls inside the 90% posterior intervals; over many
    # data sets this happens ~90% of the time (benchmarks/calibration_batch.py measures it); this seed is fixed
    assert row["batch_min_in90"] and row["batch_opt_in90"], row
    # and the medians are close: the curves pin B_min to a few percent (10% allows ~2 posterior sd)
    assert row["batch_min_median"] == pytest.approx(row["batch_min"], rel=0.1)
    assert row["batch_opt_median"] == pytest.approx(row["batch_opt"], rel=0.1)


@pytest.mark.slow
def test_calibration_small_version_reports_coverage(floor_run):
    row, _, mod = floor_run
    out = mod.summarize([row])
    assert set(out["coverage_50"]) == set(out["coverage_90"]) == {"batch_min", "batch_opt"}
    assert out["n_datasets"] == 1
    assert out["coverage_90"] == {"batch_min": 1.0, "batch_opt": 1.0}
    json.dumps(out)  # the benchmark's last line is this object


def test_segment_bounds_and_batches_are_pure_and_exact():
    np.testing.assert_array_equal(segment_bounds(100.0, 30.0, 80.0), [0, 30, 60, 80])
    np.testing.assert_array_equal(segment_bounds(100.0, 50.0, 100.0), [0, 50])
    target, rounded = segment_batches(np.array([10.0, 300.0, 5000.0]), np.array([20.0, 100.0, 100.0]),
                                      max_batch=4000.0, multiple_of=64)
    np.testing.assert_array_equal(target, [20.0, 300.0, 4000.0])
    np.testing.assert_array_equal(rounded, [64, 320, 3968])  # at least one multiple; never above the max
    with pytest.raises(ModelError, match="no finite positive batch"):
        segment_batches(np.array([np.inf]), np.array([np.inf]))


@pytest.mark.slow
def test_schedule_follows_the_posterior_median_batch_opt_clipped(floor_run, tmp_path):
    _, fit, _ = floor_run
    N, D = 3e8, 1.2e10
    free = batch_schedule(fit, N=N, D=D, lr_peak=3e-3)
    max_batch = 0.8 * max(s.batch_opt for s in free.segments if math.isfinite(s.batch_opt))
    sched = batch_schedule(fit, N=N, D=D, max_batch=max_batch, lr_peak=3e-3, multiple_of=512)
    # recompute independently from the posterior draws with the closed forms of docs/laws.md section 5.3, at this
    # fitted size
    d, c = fit.draws(), fit.constants
    k = [i for i in range(int(c["n_sizes"])) if math.isclose(c[f"size_N_{i}"], N)][0]
    alpha = d["alpha"]
    L_inf = np.exp(d["log_L_inf"][:, k])
    a = np.exp(d["log_a"][:, k] + alpha * c["m_S"])
    cc = np.exp(d["log_c"][:, k] + c["m_B"])
    K = (1 + 1 / alpha) * (1 + alpha) ** (1 / alpha) * cc * a ** (1 / alpha)
    stable = [s for s in sched.segments if math.isfinite(s.loss)]
    assert len(stable) == 8 and sched.segments[-1].from_tokens == pytest.approx(0.8 * D)
    for s in stable:
        loss = np.median(L_inf + (K / s.at_tokens) ** (alpha / (1 + alpha)))
        b_min = np.median(cc / (loss - L_inf))
        b_opt = np.median((1 + 1 / alpha) * cc / (loss - L_inf))
        assert s.at_tokens == pytest.approx(0.5 * (s.from_tokens + s.to_tokens))
        assert s.loss == pytest.approx(loss, rel=1e-10)
        assert s.batch_target == pytest.approx(min(max(b_opt, b_min), max_batch), rel=1e-10)
        assert abs(s.batch_tokens - s.batch_target) <= 512 and s.batch_tokens % 512 == 0
    batches = [s.batch_target for s in stable]
    assert all(np.diff(batches) >= 0) and batches[-1] == pytest.approx(max_batch)  # grows, then capped
    assert sched.segments[-1].batch_tokens == stable[-1].batch_tokens  # held through the LR decay
    # it is a valid trainer schedule, written atomically by the trainer's own writer
    from scalinfer.schedules.file import load_schedule, validate_schedule

    validate_schedule(sched.to_trainer_dict())
    path = write_schedule(sched, tmp_path / "schedule.json")
    loaded = load_schedule(path)
    assert [b.batch_tokens for b in loaded.batch] == [st["batch_tokens"] for st in sched.stages()]
    assert loaded.lr.peak == 3e-3 and loaded.lr.decay_start_tokens == pytest.approx(0.8 * D)
    assert loaded.batch_tokens_at(0.0) == stable[0].batch_tokens


@pytest.mark.slow
def test_cli_predict_schedule_and_plots_from_a_saved_floor_fit(floor_run, tmp_path, capsys):
    _, fit, _ = floor_run
    path = fit.save(tmp_path / "floor.nc")
    assert cli(["predict", str(path), "--N", "3e8", "--target-loss", "2.8", "--batch", "65536,262144",
                "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for q in ("batch_min", "batch_opt", "batch_crit"):
        assert out[q]["lo"] <= out[q]["median"] <= out[q]["hi"]
    assert len(out["steps_to_target"]["median"]) == 2 and len(out["tokens_to_target"]["hi"]) == 2
    assert out["batch_min"]["median"] < out["batch_opt"]["median"]
    # a target below every draw's floor (the truth's: 2.5 at 3e8): no batch reaches it, and predict says so
    assert cli(["predict", str(path), "--N", "3e8", "--target-loss", "2.0", "--json", "--no-sensitivity"]) == 0
    out = json.loads(capsys.readouterr().out)
    n = fit.n_draws
    assert out["batch_min"]["median"] is None and out["batch_opt"]["lo"] is None
    assert [w for w in out["warnings"] if f"at or below the fitted floor L_inf in {n} of {n} draws" in w]
    sched_file, png = tmp_path / "s.json", tmp_path / "s.png"
    assert cli(["schedule", str(path), "--N", "3e8", "--D", "1.2e10", "--max-batch", "2e5", "--lr", "3e-3",
                "--json", "-o", str(sched_file), "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schedule"] == json.loads(sched_file.read_text())
    assert out["schedule"]["format"] == "scalinfer.schedule/1" and png.stat().st_size > 10_000
    with pytest.raises(SystemExit) as e:  # argparse refuses a non-positive D before anything runs
        cli(["schedule", str(path), "--N", "3e8", "--D", "-1"])
    assert e.value.code == 2 and "positive" in capsys.readouterr().err
    for kind in ("batch-curves", "batch-schedule"):
        out_png = tmp_path / f"{kind}.png"
        assert cli(["plot", str(path), kind, "-o", str(out_png)]) == 0
        assert out_png.stat().st_size > 10_000


@pytest.mark.slow
def test_cli_compare_ranks_fits_of_one_table_and_refuses_other_data(table_fits, floor_run, tmp_path, capsys):
    paths = [str(p) for _, p in table_fits.values()]
    assert cli(["compare", *paths, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["comparison"]
    assert [r["rank"] for r in rows] == [0, 1]
    assert rows[0]["elpd_loo"] >= rows[1]["elpd_loo"] and rows[0]["elpd_diff"] == 0
    assert all(r["n_obs"] == 42 and r["model"] == "batch-openai" for r in rows)
    # two chains of the same model on the same data: their elpd agree within the Monte Carlo error
    assert abs(rows[1]["elpd_diff"]) < 2.0
    assert cli(["compare", *paths]) == 0
    assert "elpd_loo" in capsys.readouterr().out
    # a fit of other data (the floor model's loss curves): refused, with the reason
    _, floor_fit, _ = floor_run
    other = floor_fit.save(tmp_path / "floor.nc")
    assert cli(["compare", paths[0], str(other)]) == 2
    assert "LOO compares fits of the same data only" in capsys.readouterr().err
    assert cli(["compare", paths[0]]) == 2
    assert "at least two" in capsys.readouterr().err


def test_mix_draws_takes_each_source_in_proportion():
    """The stacked posterior's mixture: counts multinomial in the weights (a source of weight 0 gives nothing),
    every quantity drawn from the same source draws (rows stay together), shapes kept."""
    from scalinfer.inference.compare import mix_draws

    a = {"x": np.zeros(400), "y": np.zeros((400, 3))}
    b = {"x": np.ones(1000), "y": np.ones((1000, 3))}
    c = {"x": np.full(50, 2.0), "y": np.full((50, 3), 2.0)}
    out = mix_draws({"a": a, "b": b, "c": c}, {"a": 0.25, "b": 0.75, "c": 0.0}, n=4000, seed=0)
    assert out["x"].shape == (4000,) and out["y"].shape == (4000, 3)
    assert np.all(out["y"] == out["x"][:, None])
    # multinomial(4000, (0.25, 0.75, 0)): the share of b within 3 sd (0.0068) of 0.75, no draw of c
    assert abs(np.mean(out["x"] == 1.0) - 0.75) < 0.021 and not np.any(out["x"] == 2.0)
    with pytest.raises(ModelError, match="stacking weights"):
        mix_draws({"a": a}, {"a": 0.0}, n=10)


def test_far_behind_names_only_a_fit_whose_elpd_gap_is_both_large_and_sure():
    """The far-behind rule of `stacked_prediction`'s warnings on a hand-made `compare_fits` table: behind by more
    than FAR_BEHIND (4) and by more than two standard errors of the difference; either alone is not enough."""
    import pandas as pd

    from scalinfer.inference.compare import FAR_BEHIND, far_behind

    table = pd.DataFrame({"fit": ["best.nc", "close.nc", "noisy.nc", "edge.nc", "floor.nc"],
                          "model": ["batch-openai", "batch-wsd", "batch-wsd", "batch-wsd", "batch-floor"],
                          "elpd_diff": [0.0, -3.5, -10.0, -FAR_BEHIND, -102.0],
                          "dse": [0.0, 0.5, 6.0, 0.1, 12.0],
                          "weight": [0.8, 0.2, 0.0, 0.0, 0.0]}).set_index("fit")
    said = far_behind(table)
    assert list(said) == ["floor.nc"]  # close: sure but small; noisy: large but within 2 se; edge: not beyond 4
    assert said["floor.nc"] == ("floor.nc (batch-floor): its out-of-sample score is far behind the best fit's "
                                "(elpd_loo -102.0 +- 12.0); stacking weight 0.00")


@pytest.mark.slow
def test_cli_predict_stacks_fits_of_one_table(table_fits, capsys):
    """``predict --fits``: the stacked posterior of the two fits of one table, with the weights; each quantity's
    median lies between the two fits' own (a mixture's median does, up to the subsampling of draws: 2%)."""
    paths = [str(p) for _, p in table_fits.values()]
    target = ["--N", "3e8", "--target-loss", "3.1", "--batch", "65536,262144", "--json"]
    assert cli(["predict", "--fits", *paths, *target]) == 0
    out = json.loads(capsys.readouterr().out)
    w = {k: v["weight"] for k, v in out["stacking"].items()}
    assert set(w) == set(paths) and sum(w.values()) == pytest.approx(1.0)
    # two chains of one model on one table: neither is far behind (their elpd agree within 2: compare's test)
    assert not [m for m in out["warnings"] if "far behind" in m]
    single = []
    for p in paths:
        assert cli(["predict", p, *target, "--no-sensitivity"]) == 0
        single.append(json.loads(capsys.readouterr().out))
    for q in ("batch_crit", "steps_to_target", "tokens_to_target"):
        meds = np.array([np.ravel(s[q]["median"]) for s in single], float)
        lo, hi = meds.min(axis=0), meds.max(axis=0)
        got = np.ravel(out[q]["median"]).astype(float)
        assert np.all((lo * 0.98 <= got) & (got <= hi * 1.02)), (q, got, lo, hi)
        assert out[q]["unit"] == single[0][q]["unit"] and out[q]["definition"] == single[0][q]["definition"]
    assert cli(["predict", "--fits", paths[0], *target]) == 2
    assert "two or more" in capsys.readouterr().err
    assert cli(["predict", paths[0], "--fits", *paths, *target]) == 2
    assert "not both" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_table_model_figures_and_schedule_refusal(table_fits, capsys, tmp_path):
    _, path = table_fits["openai-0"]
    assert cli(["schedule", str(path), "--N", "3e8", "--D", "1e10"]) == 2
    assert "no token-optimal batch" in capsys.readouterr().err
    for kind in ("batch-steps", "batch-sizes"):
        out_png = tmp_path / f"{kind}.png"
        assert cli(["plot", str(path), kind, "-o", str(out_png)]) == 0
        assert out_png.stat().st_size > 10_000
