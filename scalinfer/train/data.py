"""Token streams for the trainer: byte-level text (vocabulary 256) or uint16 token files.

Sources (`DataConfig.source`):

- ``stdlib`` (default, no download): every ``*.py`` file of this Python's standard library
  (``sysconfig.get_paths()["stdlib"]``, site-packages excluded), sorted by path: tens of MB.
- ``text``: the files (or globs, or folders, read recursively) in ``paths``, as bytes.
- ``bin``: the nanoGPT layout, a folder with ``train.bin`` and ``val.bin`` of little-endian
  uint16 tokens, for users with their own tokenizer (set ``model.vocab_size``).

Text files are joined with a NUL byte between documents. The held-out split is fixed and does not
depend on the seed: a file is held out when ``crc32(relative path) mod 10000 < eval_fraction *
10000``; with fewer than 10 files (or if no file falls in the held-out share) the last
``eval_fraction`` of the bytes is held out instead. The joined bytes are cached as .npy files in
the cache folder (`scalinfer.runtime.cache_root`; keyed by the files' names, sizes and modification
times) so later runs start in milliseconds.

Training order: the training stream is cut into windows of ``seq_len + 1`` tokens (consecutive
windows overlap by one token), and epoch ``e`` visits them in the permutation drawn from
``(seed, e)``. The data position of a run is just the number of windows consumed, which makes
resuming exact. Evaluation uses the first windows of the held-out stream.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import sysconfig
import tempfile
import zlib
from pathlib import Path

import numpy as np

from scalinfer.errors import TrainError
from scalinfer.runtime import cache_root
from scalinfer.train.config import DataConfig

__all__ = ["Corpus", "load_corpus", "WindowSampler", "eval_windows", "stdlib_files", "unigram_entropy"]

_CACHE_VERSION = 1
_SEPARATOR = b"\x00"


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Training and held-out token streams (1-D arrays, possibly memory-mapped)."""

    train: np.ndarray
    eval: np.ndarray
    vocab_size: int
    description: str


def stdlib_files() -> tuple[Path, list[Path]]:
    """The standard library folder and its ``*.py`` files (no site-packages), sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "__pycache__"}
    files = [p for p in root.rglob("*.py")
             if not skip.intersection(p.relative_to(root).parts) and p.is_file()]
    return root, sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _text_files(paths: tuple[str, ...]) -> tuple[Path, list[Path]]:
    files: list[Path] = []
    for pattern in paths:
        p = Path(pattern).expanduser()
        if p.is_dir():
            found = [q for q in p.rglob("*") if q.is_file()]
        else:
            found = [Path(q) for q in glob.glob(str(p), recursive=True) if Path(q).is_file()]
        if not found:
            raise TrainError(f"data.paths: {pattern!r} matches no file")
        files += found
    files = sorted(set(f.resolve() for f in files))
    root = Path(os.path.commonpath([str(f.parent) for f in files]))
    return root, files


def _atomic_save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _bytes_corpus(kind: str, root: Path, files: list[Path], cfg: DataConfig) -> Corpus:
    if not files:
        raise TrainError(f"data: no files found for source {kind!r} under {root}")
    rel = [f.relative_to(root).as_posix() for f in files]
    stats = [f.stat() for f in files]
    h = hashlib.sha256(repr((_CACHE_VERSION, kind, str(root), cfg.eval_fraction,
                             [(r, s.st_size, s.st_mtime_ns) for r, s in zip(rel, stats)])).encode())
    cache = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else cache_root()
    stem = cache / f"corpus-{kind}-{h.hexdigest()[:16]}"
    train_path, eval_path = stem.with_suffix(".train.npy"), stem.with_suffix(".eval.npy")
    desc = f"{kind}: {len(files)} files under {root}"
    if train_path.exists() and eval_path.exists():
        return Corpus(np.load(train_path, mmap_mode="r"), np.load(eval_path, mmap_mode="r"), 256, desc)

    threshold = cfg.eval_fraction * 10_000
    held = [zlib.crc32(r.encode()) % 10_000 < threshold for r in rel]
    by_file = len(files) >= 10 and any(held) and not all(held)
    train_parts, eval_parts = [], []
    for f, is_eval in zip(files, held):
        try:
            data = f.read_bytes()
        except OSError as e:
            raise TrainError(f"data: cannot read {f}: {e.strerror}") from None
        (eval_parts if by_file and is_eval else train_parts).append(data)
    train = np.frombuffer(_SEPARATOR.join(train_parts), np.uint8)
    if by_file:
        evals = np.frombuffer(_SEPARATOR.join(eval_parts), np.uint8)
    else:
        cut = int(len(train) * (1 - cfg.eval_fraction))
        train, evals = train[:cut], train[cut:]
    _atomic_save(train_path, train)
    _atomic_save(eval_path, evals)
    return Corpus(train, evals, 256, desc)


def _bin_corpus(cfg: DataConfig) -> Corpus:
    folder = Path(cfg.paths[0]).expanduser()
    arrays = []
    for name in ("train.bin", "val.bin"):
        path = folder / name
        if not path.is_file():
            raise TrainError(f"data.paths[0]={folder}: no {name} (the nanoGPT layout needs "
                             f"train.bin and val.bin of uint16 tokens)")
        if path.stat().st_size % 2:
            raise TrainError(f"data: {path} has an odd number of bytes; not a uint16 token file")
        arrays.append(np.memmap(path, dtype="<u2", mode="r"))
    vocab = int(arrays[1].max()) + 1 if len(arrays[1]) else 0
    return Corpus(arrays[0], arrays[1], vocab, f"bin: {folder}")


def load_corpus(cfg: DataConfig, vocab_size: int) -> Corpus:
    """Load (or build and cache) the corpus; check it fits ``vocab_size`` (the model's)."""
    if cfg.source == "stdlib":
        corpus = _bytes_corpus("stdlib", *stdlib_files(), cfg)
    elif cfg.source == "text":
        corpus = _bytes_corpus("text", *_text_files(cfg.paths), cfg)
    elif cfg.source == "bin":
        corpus = _bin_corpus(cfg)
    else:
        raise TrainError(f"data.source={cfg.source!r} is not one of stdlib, text, bin")
    if corpus.vocab_size > vocab_size:
        raise TrainError(f"data ({corpus.description}) has token ids up to {corpus.vocab_size - 1} "
                         f"but model.vocab_size is {vocab_size}")
    return corpus


class WindowSampler:
    """Deterministic training windows: window ``j`` of the run is a pure function of (seed, j)."""

    def __init__(self, tokens: np.ndarray, seq_len: int, seed: int, vocab_size: int, source: str = "data"):
        self.tokens, self.seq_len, self.seed = tokens, seq_len, seed
        self.vocab_size, self.source = vocab_size, source
        self.n_windows = (len(tokens) - 1) // seq_len
        if self.n_windows < 1:
            raise TrainError(f"{source}: {len(tokens)} training tokens is fewer than one window of "
                             f"seq_len + 1 = {seq_len + 1}")
        self._epoch, self._perm = -1, None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._perm = np.random.default_rng((self.seed, epoch)).permutation(self.n_windows)
            self._epoch = epoch
        return self._perm

    def windows(self, start: int, count: int) -> np.ndarray:
        """Windows ``start .. start+count-1`` of the run, as int32 [count, seq_len + 1]."""
        j = np.arange(start, start + count)
        ids = np.empty(count, np.int64)
        for epoch in np.unique(j // self.n_windows):   # a batch spans at most a few epochs
            here = j // self.n_windows == epoch
            ids[here] = self._permutation(int(epoch))[j[here] % self.n_windows]
        offsets = ids[:, None] * self.seq_len + np.arange(self.seq_len + 1)[None, :]
        out = np.asarray(self.tokens[offsets], np.int32)
        if self.vocab_size < 65536 and out.max(initial=0) >= self.vocab_size:
            raise TrainError(f"{self.source}: token id {int(out.max())} in windows {start}..{start + count - 1} "
                             f"is >= model.vocab_size {self.vocab_size}")
        return out


def eval_windows(tokens: np.ndarray, seq_len: int, n_tokens: int, multiple: int = 1) -> np.ndarray:
    """The first held-out windows covering about ``n_tokens`` predicted tokens, as int32
    [n, seq_len + 1] with n a multiple of ``multiple`` (devices)."""
    available = (len(tokens) - 1) // seq_len
    n = min(max(1, n_tokens // seq_len), available)
    n = n // multiple * multiple
    if n < 1:
        raise TrainError(f"held-out data has {len(tokens)} tokens: not enough for {multiple} window(s) "
                         f"of seq_len + 1 = {seq_len + 1}")
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return np.asarray(tokens[idx], np.int32)


def unigram_entropy(tokens: np.ndarray, vocab_size: int = 256) -> float:
    """Entropy (nats/token) of the token frequencies: the loss of the best context-free model."""
    counts = np.bincount(np.asarray(tokens), minlength=vocab_size).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
