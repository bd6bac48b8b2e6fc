"""Per-position teacher-forced accuracy of the DFlash drafter and EAGLE-3 heads on the same continuations.

The two drafters are trained and validated differently (random anchors in DFlash blocks,
every position of unrolled EAGLE-3 windows), so their own validation numbers do not
compare.  Here both are scored at the same roots: every position of a validation
header's generated continuation (prompt positions excluded, as decoding never drafts
there) that leaves a whole DFlash block inside the document.  Position ``k`` is the
``k``-th token after the root: DFlash's block position ``k``, the head's unrolled step
``k - 1`` (:mod:`dflash.eagle3.ttt`).  Labels are the target's argmax; both read the
target's fp32 features of the same forward.

    python -m tools.tiny_pair.teacher_accuracy --data valid.npy --prompt-file valid_prompts.jsonl \\
        --head shipped=dflash/assets/tiny/eagle3 --head new=run/head --out accuracy.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from dflash import DFlashDraftModel
from dflash import train_setup as ts
from dflash.distill_data import load_prompt_file
from dflash.eagle3.checkpoint import load_eagle3
from dflash.eagle3.ttt import ttt_scores
from dflash.train import Trainer


def documents(data: np.ndarray, prompts: list[np.ndarray], eos: int) -> list[tuple[np.ndarray, int]]:
    """(document, prompt length) pairs: the data's EOS-separated documents, each starting with its prompt."""
    ends = np.nonzero(data == eos)[0]
    docs = np.split(data, ends + 1)
    docs = [d[:-1] if d.size and d[-1] == eos else d for d in docs if d.size]
    if len(docs) != len(prompts):
        raise SystemExit(f"error: {len(docs)} documents but {len(prompts)} prompts; give the prompt file the data "
                         "was generated from (same --max-prompt-tokens)")
    for i, (d, p) in enumerate(zip(docs, prompts)):
        if d.size < p.size or not np.array_equal(d[: p.size], p):
            raise SystemExit(f"error: document {i} does not start with prompt {i}; give the matching prompt file")
    return [(d, p.size) for d, p in zip(docs, prompts)]


@torch.no_grad()
def score(target, drafter: DFlashDraftModel, heads: dict, docs: list[tuple[np.ndarray, int]], steps: int) -> dict:
    """Hits and counts per position, for the drafter and every head, at the same roots."""
    b = drafter.config.block_size
    trainer = Trainer(target, drafter.eval(), argparse.Namespace(gamma=7.0, labels="argmax", compile=False),
                      torch.device("cpu"), None)
    sums = {name: [np.zeros(steps), np.zeros(steps)] for name in ["dflash", *heads]}
    head_taps = {name: head.config.layer_ids(ts.target_num_layers(target)) for name, head in heads.items()}
    for doc, p_len in docs:
        t_len = doc.size
        if t_len - b < p_len:
            continue  # no root with a whole block after it
        ids = torch.from_numpy(doc.astype(np.int64))[None]
        roots = torch.arange(p_len, t_len - b + 1)  # root a: the block [a, a + b) lies in the document
        correct = trainer.step(ids, roots[None]).correct[:, :steps]  # [roots, steps]: position k = column k - 1
        sums["dflash"][0] += correct.float().sum(0).numpy()
        sums["dflash"][1] += correct.shape[0]
        out = target(input_ids=ids, output_hidden_states=True, use_cache=False)
        mark = torch.zeros(1, t_len, dtype=torch.bool)
        mark[0, roots] = True
        for name, head in heads.items():
            feats = torch.cat([out.hidden_states[i + 1] for i in head_taps[name]], dim=-1).float()
            for k, s in enumerate(ttt_scores(head, feats, ids, out.logits.float(), steps, mark, True)):
                sums[name][0][k] += int(s.hits)
                sums[name][1][k] += int(s.counted)
    return {name: {"acc": [round(float(h / max(c, 1)), 4) for h, c in zip(*v)], "roots": int(v[1][0])}
            for name, v in sums.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m tools.tiny_pair.teacher_accuracy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="dflash/assets/tiny/target")
    ap.add_argument("--drafter", default="dflash/assets/tiny/drafter")
    ap.add_argument("--head", action="append", default=[], help="name=folder of an EAGLE-3 head (repeatable)")
    ap.add_argument("--data", required=True, help="validation continuations (.npy from dflash.distill_data)")
    ap.add_argument("--prompt-file", required=True, help="the .jsonl of prompts the data was generated from")
    ap.add_argument("--max-prompt-tokens", type=int, default=512)
    ap.add_argument("--positions", type=int, default=7, help="positions after the root (the head unrolls this far)")
    ap.add_argument("--out", default=None, help="write the result as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    target = ts.load_target(args.target, torch.float32, torch.device("cpu"))
    tok = ts.load_tokenizer(args.target)
    heads = {}
    for item in args.head:
        name, sep, folder = item.partition("=")
        if not sep or not name or name == "dflash":
            raise SystemExit(f"error: --head {item!r}: give name=folder (any name but 'dflash')")
        heads[name] = load_eagle3(folder, target.config)
        heads[name].attach_target_embeddings(target.get_input_embeddings())
    drafter = DFlashDraftModel.from_pretrained(args.drafter, dtype=torch.float32)
    prompts = load_prompt_file(args.prompt_file, tok, args.max_prompt_tokens)
    data = np.load(args.data).astype(np.int64)
    docs = documents(data, prompts, int(tok.eos_token_id))
    result = score(target, drafter, heads, docs, args.positions)
    for name, r in result.items():
        print(f"{name:>12}: " + " ".join(f"{a:.3f}" for a in r["acc"]) + f"   ({r['roots']} roots)")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
