"""Progress on stderr (#25): NUTS's bar (`scalinfer.inference.nuts.run_nuts`, ``progress=``) and a sweep's
(`scalinfer.sweep.runner._SweepProgress`). The bar must change no draw, compile no second program, stay off
stdout, and stay off when stderr is not a terminal (here pytest's capture) unless asked for."""

from __future__ import annotations

import io

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import scalinfer  # noqa: F401  (asks for CPU devices before JAX starts)
from scalinfer.inference.nuts import run_nuts
from scalinfer.runtime import configure
from support.compile_log import CompileLog

SD = np.array([1e-3, 1.0, 30.0])


def gauss(sd):
    numpyro.sample("x", dist.Normal(0.0, sd))


def _run(progress, chain_method, seed=4):
    configure(2)
    return run_nuts(gauss, {"sd": SD}, {"x": np.zeros((2, 3))}, chains=2, warmup=30, samples=20, seed=seed,
                    chain_method=chain_method, progress=progress)


@pytest.mark.parametrize("chain_method", ["vectorized", "parallel"])
def test_progress_changes_no_draw_and_compiles_nothing_more(chain_method, capsys):
    plain_draws, plain_stats = _run(False, chain_method)
    assert capsys.readouterr().err == ""
    with CompileLog() as log:  # the same program, called in chunks: nothing new to compile or look up
        draws, stats = _run(True, chain_method)
    shown = capsys.readouterr()
    assert log.compiles == 0 and log.hits == 0, sorted(log.by_name)
    np.testing.assert_array_equal(draws["x"], plain_draws["x"])  # bit for bit, not close
    for k in plain_stats:
        np.testing.assert_array_equal(stats[k], plain_stats[k], err_msg=k)
    assert shown.out == ""
    assert "NUTS" in shown.err and "sampling" in shown.err and "divergent" in shown.err
    assert "50/50" in shown.err  # warmup + draws, the chains together


def test_no_progress_when_stderr_is_not_a_terminal(capsys):
    _run(None, "vectorized")  # pytest's capture is not a terminal
    assert capsys.readouterr().err == ""


def test_sweep_progress_counts_the_workers_lines(capsys):
    from scalinfer.sweep.runner import _SweepProgress

    log = io.StringIO()
    lines = ["[sweep] 3: d32_lr1 (abc123) started", "[sweep] 4: d48_lr2 (def456) started",
             "[sweep] 3: d32_lr1 done in 3.2 s (loss 3.1000)", "[sweep] 4: d48_lr2 failed: ValueError: nan loss",
             "[sweep] 5: d64 (a1) started", "[sweep] 5: d64 stopped early (stop_after_steps); resumable",
             "[sweep] 6: d96 (a2) started", "[sweep] calibration: 3 of 7 runs to do, 2 worker(s)"]
    with _SweepProgress(total=7, done=4, name="calibration", enabled=True) as bar:
        for line in lines:
            bar.saw(line)
            bar.write(f"[w0] {line}\n", log)
        assert (bar.bar.n, sorted(bar.running), bar.failed) == (5, [6], 1)
    assert log.getvalue().count("[w0] [sweep]") == len(lines)  # every line still reaches the log
    err = capsys.readouterr().err
    assert "5/7" in err and "1 running, 1 failed" in err
    with _SweepProgress(total=7, done=4, name="calibration") as bar:  # not a terminal: no bar
        bar.saw(lines[0])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("chain_method", ["vectorized", "parallel"])
def test_more_draws_continue_the_chains_bit_for_bit(chain_method, capsys):
    # three blocks of 20 draws, continuing the chains, are one run of 60: same draws and stats, same warmup
    configure(2)
    args = (gauss, {"sd": SD}, {"x": np.zeros((2, 3))})
    opts = dict(chains=2, warmup=30, seed=4, chain_method=chain_method)
    long_draws, long_stats = run_nuts(*args, samples=60, **opts)
    seen = []

    def never(draws, stats):  # records what it was shown: the draws and stats so far
        seen.append((draws["x"].shape, stats["diverging"].shape))
        return False

    draws, stats = run_nuts(*args, samples=20, max_samples=60, enough=never, progress=True, **opts)
    assert seen == [((2, 20, 3), (2, 20)), ((2, 40, 3), (2, 40))]  # asked after each block but the last
    np.testing.assert_array_equal(draws["x"], long_draws["x"])
    for k in long_stats:
        np.testing.assert_array_equal(stats[k], long_stats[k], err_msg=k)
    # the bar grows by a block each time: 30 + 3 x 20 iterations per chain
    assert "90/90" in capsys.readouterr().err


def test_shorter_blocks_continue_the_chains_bit_for_bit():
    # blocks of 7 after a first of 20 write the program's 20 slots round and round (slots 14-19, then 0), the last
    # block cut to 6 at max_samples: the draws are still one run's
    configure(2)
    args = (gauss, {"sd": SD}, {"x": np.zeros((2, 3))})
    opts = dict(chains=2, warmup=30, seed=4, chain_method="vectorized")
    long_draws, long_stats = run_nuts(*args, samples=40, **opts)
    seen = []
    draws, stats = run_nuts(*args, samples=20, max_samples=40, extend_by=7, enough=lambda d, s: seen.append(
        d["x"].shape[1]) and False, **opts)
    assert seen == [20, 27, 34]
    np.testing.assert_array_equal(draws["x"], long_draws["x"])
    for k in long_stats:
        np.testing.assert_array_equal(stats[k], long_stats[k], err_msg=k)
    with pytest.raises(ValueError, match="extend_by must be from 1 to samples=20"):
        run_nuts(*args, samples=20, max_samples=40, extend_by=21, **opts)


def test_no_more_draws_once_enough():
    configure(2)
    calls = []
    draws, _ = run_nuts(gauss, {"sd": SD}, {"x": np.zeros((2, 3))}, chains=2, warmup=30, samples=20, seed=4,
                        chain_method="vectorized", max_samples=100, enough=lambda d, s: calls.append(1) or True)
    assert draws["x"].shape == (2, 20, 3) and calls == [1]
    with pytest.raises(ValueError, match="max_samples must be at least samples=20"):
        run_nuts(gauss, {"sd": SD}, {"x": np.zeros((2, 3))}, chains=2, warmup=30, samples=20, max_samples=10)
