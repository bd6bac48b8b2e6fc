"""The tiny target's training data: a corpus split as cached token ids, cut into windows.

Kept apart from the training loop so that the token cache, which is keyed on the text and
the tokenizer together, has one owner: a stale cache would silently train on other ids.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def _fingerprint(text_path: Path, tokenizer_dir: Path) -> str:
    """Identify a (text, tokenizer) pair so a stale token cache is never reused."""
    h = hashlib.sha256()
    st = text_path.stat()
    h.update(f"{text_path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode())
    tok = tokenizer_dir / "tokenizer.json"
    if tok.exists():
        h.update(tok.read_bytes())
    return h.hexdigest()[:16]


def load_split(corpus: Path, split: str, tokenizer, tokenizer_dir: Path, cache_dir: Path):
    """Token ids of one split as int32 numpy (cached in ``cache_dir``)."""
    import numpy as np

    from dflash.train_data import tokenize_text

    src = corpus / f"{split}.txt"
    if not src.is_file():
        raise FileNotFoundError(f"{src} is missing: the corpus folder needs train.txt, valid.txt and heldout.txt")
    cache = cache_dir / f"{split}.npy"
    meta = cache_dir / f"{split}.json"
    fp = _fingerprint(src, tokenizer_dir)
    if cache.exists() and meta.exists() and json.loads(meta.read_text()).get("fingerprint") == fp:
        return np.load(cache)
    ids = tokenize_text(src.read_text(encoding="utf-8"), tokenizer).astype(np.int32)
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.save(cache, ids)
    meta.write_text(json.dumps({"fingerprint": fp, "tokens": int(len(ids)), "source": str(src)}) + "\n")
    return ids


def pack(ids, seq_len: int):
    """Flat ids -> LongTensor [N, T] of non-overlapping windows (the tail is dropped)."""
    import torch

    n = len(ids) // seq_len
    if n == 0:
        raise ValueError(f"only {len(ids)} tokens: not one window of --seq-len {seq_len}")
    return torch.from_numpy(ids[: n * seq_len].astype("int64")).view(n, seq_len)


class WindowSampler:
    """Random windows without replacement within an epoch (every window once per epoch)."""

    def __init__(self, n: int, seed: int) -> None:
        import torch

        self.n = n
        self.gen = torch.Generator().manual_seed(seed)
        self.order = torch.randperm(n, generator=self.gen)
        self.pos = 0
        self.epoch = 0

    def take(self, k: int):
        import torch

        parts = []
        while k > 0:
            if self.pos == self.n:
                self.order, self.pos = torch.randperm(self.n, generator=self.gen), 0
                self.epoch += 1
            m = min(k, self.n - self.pos)
            parts.append(self.order[self.pos : self.pos + m])
            self.pos += m
            k -= m
        return torch.cat(parts)
