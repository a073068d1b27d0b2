"""A real language-modelling workload that every machine has offline: the Python standard library's source.

The corpus is every ``*.py`` file under ``sysconfig.get_paths()["stdlib"]`` (``site-packages`` left out),
read in sorted relative-path order, as raw bytes: a byte-level tokenizer (256 symbols, token = byte) needs
no vocabulary file and no download. The split is by **file**: a file goes to validation when the CRC-32 of
its relative path, modulo 100, is below ``val_percent`` (default 5), so the split is the same on every
machine for the files they share and never cuts a file in two. With ``test_percent`` > 0 the files whose
CRC-32 modulo 100 lies in ``[val_percent, val_percent + test_percent)`` form a third, test stream, so that a
choice made on validation (a learning rate) is reported on files it never saw. Python versions ship different standard
libraries, so every record carries :meth:`TextCorpus.summary` (Python version, file and byte counts, a
SHA-256 of both streams): compare target losses only between runs whose ``sha256`` agree.

Training batches are random windows of ``seq_len + 1`` bytes (inputs and next-byte targets), drawn by a
generator seeded with ``(seed, step)``: every rank draws the same global batch and takes its own rows, so
the data order does not depend on the world size's timing and is the same for every method (Han et al.
2024, https://arxiv.org/abs/2407.01378, compare methods at equal data). Validation uses fixed,
non-overlapping windows of the validation stream.

>>> c = load_corpus(limit_train=4096, limit_val=1024)
>>> c.train.dtype, len(c.train), c.vocab_size
(torch.uint8, 4096, 256)
"""
from __future__ import annotations

import hashlib
import sys
import sysconfig
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

__all__ = ["TextCorpus", "load_corpus", "stdlib_files", "is_validation_file", "split_of", "VOCAB_SIZE", "VAL_PERCENT"]

VOCAB_SIZE = 256   # byte-level: one token per byte
VAL_PERCENT = 5    # files whose crc32(relative path) % 100 < this go to validation


def stdlib_root() -> Path:
    """The standard library's folder of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Optional[str | Path] = None) -> list[Path]:
    """Every ``*.py`` under ``root`` (default: the standard library) outside ``site-packages``, sorted
    by relative path (POSIX form) so the order is the same on every machine."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise FileNotFoundError(f"text corpus: {root} is not a folder (expected Python's standard library, "
                                f"sysconfig.get_paths()['stdlib'])")
    files = [p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def is_validation_file(relpath: str, val_percent: int = VAL_PERCENT) -> bool:
    """Whether the file at ``relpath`` (POSIX, relative to the corpus root) belongs to validation."""
    return zlib.crc32(relpath.encode()) % 100 < val_percent


def split_of(relpath: str, val_percent: int = VAL_PERCENT, test_percent: int = 0) -> str:
    """``"val"``, ``"test"`` or ``"train"``: the stream the file at ``relpath`` belongs to (module docstring)."""
    bucket = zlib.crc32(relpath.encode()) % 100
    if bucket < val_percent:
        return "val"
    return "test" if bucket < val_percent + test_percent else "train"


@dataclass
class TextCorpus:
    """Train, validation and (optionally) test byte streams (uint8 CPU tensors) and where they came from."""

    train: torch.Tensor
    val: torch.Tensor
    info: dict = field(default_factory=dict)
    vocab_size: int = VOCAB_SIZE
    test: Optional[torch.Tensor] = None   # None: no test split (the validation stream serves as test)

    def summary(self) -> dict:
        extra = {} if self.test is None else {"num_test_tokens": len(self.test)}
        return {"dataset": "text", "num_train_tokens": len(self.train), "num_val_tokens": len(self.val),
                **extra, "vocab_size": self.vocab_size, **self.info}

    def windows(self, which: str, seq_len: int, max_windows: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Non-overlapping ``(x, y)`` windows of ``which`` ("train", "val" or "test"): ``x`` [N, seq_len] int64,
        ``y`` the same shifted by one byte."""
        streams = {"train": self.train, "val": self.val, "test": self.test}
        if streams.get(which) is None:
            raise ValueError(f"text corpus: no {which!r} stream; streams: "
                             f"{', '.join(k for k, v in streams.items() if v is not None)}")
        stream = streams[which]
        n = (len(stream) - 1) // seq_len
        if max_windows is not None:
            n = min(n, max_windows)
        if n < 1:
            raise ValueError(f"text corpus: the {which} stream has {len(stream)} tokens, fewer than one window of "
                             f"seq_len + 1 = {seq_len + 1}; raise limit_{'train' if which == 'train' else 'test'} "
                             f"or lower seq_len")
        idx = torch.arange(n)[:, None] * seq_len + torch.arange(seq_len + 1)
        w = stream[idx].long()
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def batch_starts(n_tokens: int, seq_len: int, global_batch: int, seed: int, step: int) -> torch.Tensor:
    """Start offsets of the ``global_batch`` random training windows of ``step`` (seeded by ``(seed, step)``)."""
    if n_tokens < seq_len + 2:
        raise ValueError(f"text corpus: {n_tokens} training tokens are fewer than one window of seq_len + 1 = "
                         f"{seq_len + 1}; raise limit_train or lower seq_len")
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, n_tokens - seq_len - 1, (global_batch,), generator=g)


def gather_windows(stream: torch.Tensor, starts: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` int64 windows at ``starts`` of ``stream`` (on the stream's device)."""
    idx = starts.to(stream.device)[:, None] + torch.arange(seq_len + 1, device=stream.device)
    w = stream[idx].long()
    return w[:, :-1], w[:, 1:]


_CACHE: dict = {}


def load_corpus(root: Optional[str | Path] = None, limit_train: Optional[int] = None,
                limit_val: Optional[int] = None, val_percent: int = VAL_PERCENT,
                test_percent: int = 0) -> TextCorpus:
    """The standard library (or ``root``) as byte streams, split by file (module docstring).

    ``limit_train`` / ``limit_val``: keep the first N bytes of each stream (``limit_val`` bounds the test
    stream too; files are read in order until every stream is full, so a tiny corpus reads only a few
    files). ``test_percent``: the share of files held out as a test stream (0: none)."""
    for name, v in (("limit_train", limit_train), ("limit_val", limit_val)):
        if v is not None and (not isinstance(v, int) or v < 2):
            raise ValueError(f"text corpus: {name} must be None or an integer >= 2 (bytes), got {v!r}")
    if not isinstance(val_percent, int) or not 0 < val_percent < 100:
        raise ValueError(f"text corpus: val_percent must be an integer in 1..99, got {val_percent!r}")
    if (not isinstance(test_percent, int) or isinstance(test_percent, bool) or test_percent < 0
            or val_percent + test_percent >= 100):
        raise ValueError(f"text corpus: test_percent must be an integer >= 0 with val_percent + test_percent < 100 "
                         f"(val_percent is {val_percent}), got {test_percent!r}")
    root = Path(root) if root is not None else stdlib_root()
    key = (str(root), limit_train, limit_val, val_percent, test_percent)
    if key in _CACHE:
        return _CACHE[key]
    names = ("train", "val", "test") if test_percent else ("train", "val")
    parts: dict[str, list[bytes]] = {w: [] for w in names}
    size = {w: 0 for w in names}
    files = {w: 0 for w in names}
    limit = {"train": limit_train, "val": limit_val, "test": limit_val}
    limit = {w: limit[w] for w in names}
    for p in stdlib_files(root):
        rel = p.relative_to(root).as_posix()
        which = split_of(rel, val_percent, test_percent)
        if limit[which] is not None and size[which] >= limit[which]:
            if all(limit[w] is not None and size[w] >= limit[w] for w in limit):
                break
            continue
        data = p.read_bytes() + b"\n"
        parts[which].append(data)
        size[which] += len(data)
        files[which] += 1
    streams = {}
    for which in names:
        raw = b"".join(parts[which])
        if limit[which] is not None:
            raw = raw[:limit[which]]
        if len(raw) < 2:
            raise ValueError(f"text corpus: no {which} files under {root} (val_percent {val_percent})")
        streams[which] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    digest = {w: hashlib.sha256(streams[w].numpy().tobytes()).hexdigest()[:16] for w in streams}
    split = f"crc32(relpath) % 100 < {val_percent}"
    if test_percent:
        split = f"val: {split}; test: {val_percent} <= crc32(relpath) % 100 < {val_percent + test_percent}"
    info = {"source": "python stdlib *.py" if root == stdlib_root() else str(root), "root": str(root),
            "python": sys.version.split()[0], "tokenizer": "bytes", "split": split,
            **{f"{w}_files": files[w] for w in names}, **{f"sha256_{w}": digest[w] for w in names}}
    corpus = TextCorpus(streams["train"], streams["val"], info, test=streams.get("test"))
    _CACHE[key] = corpus
    return corpus
