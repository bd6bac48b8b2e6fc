"""Train the tiny pair's byte-level BPE tokenizer on the stdlib corpus.

Byte-level BPE (no normaliser, ``add_prefix_space=False``) is used so that
``decode(encode(text)) == text`` holds exactly for any source file --
indentation, tabs, trailing spaces and non-ASCII characters included -- which
the speculative-decoding harness relies on when it compares texts.  A small
vocabulary (4096) keeps the tiny models' embedding tables small.

Special tokens have fixed ids because the model configs refer to them:
``<|endoftext|>`` = 0 (EOS and padding, also the corpus document separator)
and ``<|mask|>`` = 1 (the DFlash drafter's mask token).  No chat template is
set: the harness feeds raw text to tokenizers without one.

Usage::

    python -m tools.tiny_pair.tokenizer --corpus /work/tiny_build/corpus \\
        --out /work/tiny_build/tokenizer --vocab-size 4096
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

EOS_TOKEN = "<|endoftext|>"
MASK_TOKEN = "<|mask|>"
SPECIAL_TOKENS = (EOS_TOKEN, MASK_TOKEN)  # ids 0 and 1, in this order


def split_documents(text: str) -> list[str]:
    """Split corpus text on the document separator, dropping empty pieces."""
    return [doc for doc in text.split(EOS_TOKEN) if doc]


def _batches(docs: list[str], size: int = 64) -> Iterator[list[str]]:
    for i in range(0, len(docs), size):
        yield docs[i : i + size]


def train_bpe(docs: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2):
    """Train a byte-level BPE ``tokenizers.Tokenizer`` on ``docs``.

    Documents are fed one by one (not the joined text) so the separator
    string never takes part in merges.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    docs = list(docs)
    tok.train_from_iterator(_batches(docs), trainer=trainer, length=len(docs))
    for want_id, token in enumerate(SPECIAL_TOKENS):
        got = tok.token_to_id(token)
        if got != want_id:
            raise RuntimeError(f"{token} got id {got}, expected {want_id}")
    return tok


def to_hf(tok):
    """Wrap a ``tokenizers.Tokenizer`` as a transformers fast tokenizer."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        mask_token=MASK_TOKEN,
        # The default clean-up rewrites " ." -> "." etc. and would break the
        # exact round trip on source code.
        clean_up_tokenization_spaces=False,
    )


def roundtrip_failures(hf_tok, texts: Iterable[str]) -> list[int]:
    """Indices of texts that do not survive encode -> decode unchanged."""
    bad = []
    for i, text in enumerate(texts):
        ids = hf_tok(text, add_special_tokens=False)["input_ids"]
        if hf_tok.decode(ids, skip_special_tokens=False) != text:
            bad.append(i)
    return bad


def count_tokens(tok, docs: list[str]) -> int:
    """Total tokens of ``docs`` (batch-encoded, using the library's threads)."""
    return sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="directory with train.txt etc.")
    parser.add_argument("--out", type=Path, required=True, help="output tokenizer directory")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--min-frequency", type=int, default=2)
    parser.add_argument(
        "--stats", type=Path, default=None,
        help="optional JSON file for the statistics (kept out of the tokenizer folder, which ships)",
    )
    args = parser.parse_args(argv)

    train_docs = split_documents((args.corpus / "train.txt").read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    tok = train_bpe(train_docs, args.vocab_size, args.min_frequency)
    train_s = time.perf_counter() - t0

    hf_tok = to_hf(tok)
    args.out.mkdir(parents=True, exist_ok=True)
    hf_tok.save_pretrained(str(args.out))

    # Check the saved folder, as the harness will load it.
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(args.out))
    held_docs = split_documents((args.corpus / "heldout.txt").read_text(encoding="utf-8"))
    bad = roundtrip_failures(loaded, held_docs)
    held_tokens = count_tokens(tok, held_docs)
    held_bytes = sum(len(d.encode("utf-8")) for d in held_docs)

    t0 = time.perf_counter()
    train_tokens = count_tokens(tok, train_docs)
    encode_s = time.perf_counter() - t0
    train_bytes = sum(len(d.encode("utf-8")) for d in train_docs)

    stats = {
        "vocab_size": tok.get_vocab_size(),
        "eos_id": loaded.eos_token_id,
        "pad_id": loaded.pad_token_id,
        "mask_id": loaded.mask_token_id,
        "train_docs": len(train_docs),
        "train_bytes": train_bytes,
        "train_seconds": round(train_s, 2),
        "train_tokens": train_tokens,
        "train_encode_seconds": round(encode_s, 2),
        "heldout_docs": len(held_docs),
        "heldout_tokens_per_byte": round(held_tokens / held_bytes, 4),
        "heldout_roundtrip_failures": len(bad),
    }
    if args.stats is not None:
        args.stats.write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")
    for key, value in stats.items():
        print(f"{key:28s} {value}")
    if bad:
        raise SystemExit(f"round-trip failed on {len(bad)} held-out documents")


if __name__ == "__main__":
    main()
