"""Trainer data: byte corpora, uint16 token files, the fixed held-out split, deterministic windows."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from scalinfer.errors import TrainError
from scalinfer.train.config import DataConfig
from scalinfer.train.data import (
    WindowSampler, eval_windows, load_corpus, stdlib_files, unigram_entropy,
)


def test_text_corpus_small_split_by_bytes(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"hello world " * 100)
    (tmp_path / "b.txt").write_bytes(b"\xff\x00 bytes ok " * 50)
    cfg = DataConfig(source="text", paths=(str(tmp_path / "*.txt"),), eval_fraction=0.1,
                     cache_dir=str(tmp_path / "cache"))
    c = load_corpus(cfg, 256)
    joined = (tmp_path / "a.txt").read_bytes() + b"\x00" + (tmp_path / "b.txt").read_bytes()
    assert c.vocab_size == 256 and len(c.train) + len(c.eval) == len(joined)
    assert bytes(c.train) + bytes(c.eval) == joined          # fewer than 10 files: last 10% held out
    assert len(c.eval) == len(joined) - int(len(joined) * 0.9)
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(cached) == 2 and all(n.endswith(".npy") for n in cached)
    again = load_corpus(cfg, 256)                               # from the cache, memory-mapped
    assert isinstance(again.train, np.memmap) and np.array_equal(again.train, c.train)
    (tmp_path / "a.txt").write_bytes(b"changed")                # a changed file invalidates the cache
    assert len(load_corpus(cfg, 256).train) < len(c.train)


def test_text_corpus_split_by_file_hash(tmp_path):
    for i in range(40):
        (tmp_path / f"f{i:02d}.py").write_bytes(f"# file {i}\n".encode() * 5)
    cfg = DataConfig(source="text", paths=(str(tmp_path),), eval_fraction=0.2, cache_dir=str(tmp_path / "c"))
    c = load_corpus(cfg, 256)
    held = [i for i in range(40) if zlib.crc32(f"f{i:02d}.py".encode()) % 10_000 < 2000]
    assert 0 < len(held) < 40
    expected_eval = b"\x00".join((tmp_path / f"f{i:02d}.py").read_bytes() for i in held)
    assert bytes(c.eval) == expected_eval


def test_text_corpus_errors(tmp_path):
    with pytest.raises(TrainError, match="matches no file"):
        load_corpus(DataConfig(source="text", paths=(str(tmp_path / "*.none"),)), 256)
    (tmp_path / "a.txt").write_bytes(b"abc" * 10)
    with pytest.raises(TrainError, match="token ids up to 255 but model.vocab_size is 100"):
        load_corpus(DataConfig(source="text", paths=(str(tmp_path / "a.txt"),), cache_dir=str(tmp_path)), 100)


def test_bin_corpus(tmp_path):
    rng = np.random.default_rng(0)
    rng.integers(0, 1000, 5000).astype("<u2").tofile(tmp_path / "train.bin")
    np.arange(700, dtype="<u2").tofile(tmp_path / "val.bin")
    c = load_corpus(DataConfig(source="bin", paths=(str(tmp_path),)), 1000)
    assert c.train.dtype == np.uint16 and len(c.train) == 5000 and c.vocab_size == 700
    with pytest.raises(TrainError, match="token ids up to 699 but model.vocab_size is 256"):
        load_corpus(DataConfig(source="bin", paths=(str(tmp_path),)), 256)
    s = WindowSampler(c.train, 16, 0, 500, "bin")
    with pytest.raises(TrainError, match="is >= model.vocab_size 500"):
        for start in range(0, 300, 8):
            s.windows(start, 8)
    (tmp_path / "val.bin").unlink()
    with pytest.raises(TrainError, match="no val.bin"):
        load_corpus(DataConfig(source="bin", paths=(str(tmp_path),)), 1000)


def test_windows_deterministic_and_cover_epoch():
    tokens = np.arange(1001, dtype=np.int64) % 256
    s = WindowSampler(tokens, 10, seed=3, vocab_size=256)
    assert s.n_windows == 100
    a = s.windows(0, 250)
    assert np.array_equal(a, WindowSampler(tokens, 10, 3, 256).windows(0, 250))
    assert np.array_equal(a[37:41], s.windows(37, 4))            # any window is a function of its index
    firsts = {tuple(w) for w in a[:100]}
    assert len(firsts) == 100, "one epoch visits every window once"
    assert not np.array_equal(a[:100], a[100:200]), "each epoch has its own order"
    assert not np.array_equal(a, WindowSampler(tokens, 10, 4, 256).windows(0, 250))
    ev = eval_windows(tokens, 10, 95, multiple=4)
    assert ev.shape == (8, 11) and np.array_equal(ev[1], tokens[10:21])


def test_default_corpus_is_the_stdlib():
    root, files = stdlib_files()
    assert len(files) > 500 and all(f.suffix == ".py" for f in files[:50])
    assert not any("site-packages" in f.parts for f in files)
    rel = [f.relative_to(root).as_posix() for f in files]
    assert rel == sorted(rel)


def test_unigram_entropy():
    assert unigram_entropy(np.array([0, 1, 2, 3] * 10)) == pytest.approx(np.log(4))
    assert unigram_entropy(np.zeros(10, int)) == 0.0
