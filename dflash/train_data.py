"""Data side of drafter training: token streams, anchors, block masks and labels.

Everything here is pure tensor bookkeeping with no model in sight, so it can be tested
exactly (the block mask and the label gather are where a silent off-by-one would make a
drafter learn the wrong thing while its loss still goes down).

Conventions (they mirror what the drafter sees at inference, see ``dflash.model``):

* a training window is ``T`` consecutive token ids; the target is run once over it;
* an *anchor* ``a`` is the position of the last committed token: the block is
  ``[ids[a], mask, ..., mask]`` at positions ``a .. a+b-1`` and its context is the target
  features of positions ``p < a``;
* block position ``k`` (1..b-1) predicts the token at position ``a+k``, whose label is the
  target's own prediction for it, i.e. the target logits at position ``a+k-1``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

# ----------------------------------------------------------------------------- token data


class DataError(ValueError):
    """Training data is missing, malformed or too short."""


def load_token_ids(path: str | Path, tokenizer=None, cache_dir: str | Path | None = None) -> np.ndarray:
    """Return a flat int64 array of token ids from ``path``.

    Accepted formats (chosen by extension):

    * ``.npy``: a 1-D array of any integer dtype (e.g. written by ``train_target.py``);
    * ``.bin``: raw little-endian ``uint16`` ids (the usual packed-corpus format);
    * anything else: UTF-8 text, tokenized with ``tokenizer``.  If the tokenizer has an
      EOS token and the text contains its string, the text is split into documents on it
      and each document is followed by the EOS id (the tiny corpus' convention).

    Text tokenization is cached as ``<cache_dir>/<name>.tokens.npy`` when ``cache_dir`` is
    given, because re-tokenizing a large corpus on every resume wastes minutes.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"training data {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        arr = np.load(path, mmap_mode="r")
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise DataError(f"{path} must hold a 1-D integer array of token ids, got {arr.dtype} {arr.shape}")
        return np.asarray(arr, dtype=np.int64)
    if suffix == ".bin":
        return np.fromfile(path, dtype="<u2").astype(np.int64)
    if tokenizer is None:
        raise DataError(f"{path} is text, but no tokenizer was found next to the target to tokenize it")
    cache = None
    if cache_dir is not None:
        cache = Path(cache_dir) / f"{path.name}.tokens.npy"
        if cache.exists() and cache.stat().st_mtime >= path.stat().st_mtime:
            return np.load(cache).astype(np.int64)
    ids = tokenize_text(path.read_text(encoding="utf-8"), tokenizer)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp.npy")
        np.save(tmp, ids.astype(np.int32))
        tmp.replace(cache)
    return ids


def tokenize_text(text: str, tokenizer, batch: int = 256) -> np.ndarray:
    """Tokenize ``text``, splitting on the tokenizer's EOS string when it occurs.

    Documents are encoded in batches (the fast tokenizer parallelises a batch) and each is
    followed by the EOS id, so document boundaries survive as the target saw them.
    """
    eos = getattr(tokenizer, "eos_token", None)
    eos_id = getattr(tokenizer, "eos_token_id", None)
    docs = [d for d in text.split(eos) if d] if eos and eos in text else [text]
    out: list[int] = []
    for i in range(0, len(docs), batch):
        enc = tokenizer(docs[i : i + batch], add_special_tokens=False)["input_ids"]
        for ids in enc:
            out.extend(ids)
            if eos_id is not None and len(docs) > 1:
                out.append(int(eos_id))
    return np.asarray(out, dtype=np.int64)


def document_starts(tokens: np.ndarray, eos_id: int, seq_len: int) -> np.ndarray:
    """Offsets where a document begins (0 and every position after an EOS) that leave room
    for a whole window of ``seq_len`` ids."""
    starts = np.concatenate([[0], np.nonzero(np.asarray(tokens) == eos_id)[0] + 1])
    starts = starts[starts + seq_len <= len(tokens)]
    if starts.size == 0:
        raise DataError(f"no document start leaves room for a window of --seq-len {seq_len}")
    return starts.astype(np.int64)


def sample_windows(tokens: np.ndarray, batch_size: int, seq_len: int, gen: torch.Generator,
                   starts: np.ndarray | None = None) -> torch.Tensor:
    """Draw ``batch_size`` random windows of ``seq_len`` ids -> LongTensor [B, T].

    Random offsets (not fixed chunks) so that every token is seen in every context offset
    over a long run; ``gen`` makes the draw reproducible and resumable.  With ``starts``
    (e.g. ``document_starts``) a window begins at one of those offsets instead, so a
    document is seen from position 0, as a prompt is at inference.
    """
    n = len(tokens)
    if n < seq_len:
        raise DataError(f"the data has {n} tokens, fewer than one window of --seq-len {seq_len}")
    if starts is not None:
        pick = torch.randint(0, len(starts), (batch_size,), generator=gen).numpy()
        starts = np.asarray(starts)[pick].tolist()
    else:
        starts = torch.randint(0, n - seq_len + 1, (batch_size,), generator=gen).tolist()
    return torch.from_numpy(np.stack([np.asarray(tokens[s : s + seq_len], dtype=np.int64) for s in starts]))


# ----------------------------------------------------------------------------- anchors


def sample_anchors(
    batch_size: int, seq_len: int, block_size: int, n_anchors: int, gen: torch.Generator
) -> torch.Tensor:
    """Distinct sorted anchor positions per sequence -> LongTensor [B, A].

    An anchor needs at least one context token before it (``a >= 1``) and a full block
    after it inside the window (``a + b - 1 <= T - 1``), so ``a`` ranges over ``1..T-b``.
    """
    lo, hi = 1, seq_len - block_size  # inclusive range
    room = hi - lo + 1
    if room < n_anchors:
        raise DataError(
            f"--seq-len {seq_len} leaves room for only {max(room, 0)} anchors with block size {block_size}; "
            f"asked for --anchors-per-seq {n_anchors}"
        )
    keys = torch.rand(batch_size, room, generator=gen)  # [B, room]
    picks = keys.argsort(dim=1)[:, :n_anchors] + lo  # distinct positions
    return picks.sort(dim=1).values


def block_positions(anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """Absolute positions of all blocks: [B, A] -> [B, A*b] (block j at a_j .. a_j+b-1)."""
    offs = torch.arange(block_size, device=anchors.device)
    return (anchors[:, :, None] + offs).flatten(1)


def block_token_ids(ids: torch.Tensor, anchors: torch.Tensor, block_size: int, mask_token_id: int) -> torch.Tensor:
    """Block inputs ``[ids[a_j], mask * (b-1)]`` for every anchor: -> LongTensor [B, A*b]."""
    b, a = anchors.shape
    out = torch.full((b, a, block_size), int(mask_token_id), dtype=ids.dtype, device=ids.device)
    out[:, :, 0] = ids.gather(1, anchors)
    return out.flatten(1)


def build_block_mask(anchors: torch.Tensor, ctx_len: int, block_size: int) -> torch.Tensor:
    """Attention mask letting all blocks of a sequence share ONE drafter forward.

    Keys are ``[context positions 0..C-1 ; block 0 ; block 1 ; ...]``.  Block ``j``'s queries
    see context keys ``p < a_j`` (what inference would have committed) and the ``b`` keys of
    their own block (non-causally), never another block.

    anchors [B, A] -> bool [B, 1, A*b, C + A*b], True = attend.
    """
    bsz, n_anchor = anchors.shape
    q = n_anchor * block_size
    dev = anchors.device
    q_block = torch.arange(q, device=dev) // block_size  # [Q] block index of each query
    ctx = torch.arange(ctx_len, device=dev)[None, None, :] < anchors.repeat_interleave(block_size, dim=1)[:, :, None]
    same = q_block[:, None] == q_block[None, :]  # [Q, Q]
    blk = same[None].expand(bsz, q, q)
    return torch.cat([ctx, blk], dim=2)[:, None]  # [B, 1, Q, C+Q]


# ----------------------------------------------------------------------------- labels


def label_source_positions(anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """Positions whose target logits label block positions 1..b-1: ``a + k - 1`` -> [B, A, b-1]."""
    k = torch.arange(1, block_size, device=anchors.device)
    return anchors[:, :, None] + k - 1


def gather_argmax_labels(target_logits: torch.Tensor, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """Hard labels: argmax of the target logits at ``a+k-1`` -> LongTensor [B, A, b-1].

    ``target_logits`` [B, T, V] (or precomputed argmax ids [B, T]).
    """
    pred = target_logits if target_logits.dim() == 2 else target_logits.argmax(dim=-1)  # [B, T]
    src = label_source_positions(anchors, block_size)  # [B, A, b-1]
    return pred.gather(1, src.flatten(1)).view_as(src)


def gather_soft_labels(target_logits: torch.Tensor, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """Soft labels: the target's full distribution at ``a+k-1`` -> float [B, A, b-1, V]."""
    src = label_source_positions(anchors, block_size)  # [B, A, b-1]
    v = target_logits.shape[-1]
    picked = target_logits.gather(1, src.flatten(1)[:, :, None].expand(-1, -1, v))  # [B, A*(b-1), V]
    return picked.float().softmax(dim=-1).view(*src.shape, v)


def position_weights(block_size: int, gamma: float, device=None) -> torch.Tensor:
    """Loss weights ``w_k = exp(-(k-1)/gamma)`` for block positions k = 1..b-1 -> [b-1].

    Early positions matter most: a draft is accepted only up to its first miss, so an
    error at position 1 costs the whole block while one at position b-1 costs one token.
    """
    k = torch.arange(1, block_size, device=device, dtype=torch.float32)
    if gamma <= 0 or math.isinf(gamma):
        return torch.ones_like(k)
    return torch.exp(-(k - 1) / gamma)


def expected_acceptance(correct: torch.Tensor) -> torch.Tensor:
    """Greedy acceptance length tau from per-position hits [N, b-1] (bool) -> scalar.

    A block is accepted up to its first miss, plus the target's bonus token, so
    ``tau = 1 + mean(sum_k prod_{j<=k} hit_j)``: the number a decoder would measure.
    """
    return 1.0 + correct.float().cumprod(dim=-1).sum(dim=-1).mean()
