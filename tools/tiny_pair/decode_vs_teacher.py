"""Does the drafter accept in decoding what the training code's teacher forcing predicts?

The bundled drafter's teacher-forced validation τ (5.10, docs/tiny-pair.md) is well above
its decoded τ (3.98).  That gap is either the validation windows' distribution (random
anchors in target continuations, headers included) or a mismatch between how the
drafter is trained and how the engines run it.  This decodes prompts with DFlash, then
scores the same drafter with the training step (:class:`dflash.train.Trainer`) at exactly
the block starts the decoder used, on the decoded sequence: equal counts mean the engines
run the drafter as it was trained.

    python -m tools.tiny_pair.decode_vs_teacher --dataset stdlib-heldout --max-samples 8
"""

from __future__ import annotations

import argparse
import statistics
from types import SimpleNamespace

import torch

from bastion.data import registry as datasets
from bastion.models.registry import load_tokenizer, tiny_dir
from bastion.runs.run import DecodeRun
from dflash import train as dtrain
from dflash import train_setup
from dflash.model import DFlashDraftModel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="stdlib-heldout")
    ap.add_argument("--max-samples", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--cache-dir", default="cache", help="where the decode run keeps its calibration")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    target_dir, drafter_dir = str(tiny_dir("target")), str(tiny_dir("drafter"))
    run = DecodeRun(model=target_dir, draft_model=drafter_dir, dataset=args.dataset, methods=("dflash",),
                    max_samples=args.max_samples, max_new_tokens=args.max_new_tokens, engine="compiled",
                    cache_dir=args.cache_dir, quiet=True)
    records = run.execute()
    prompts = datasets.load_prompts(args.dataset, args.max_samples, seed=run.data_seed, cache_dir=args.cache_dir)
    tok = load_tokenizer(target_dir)
    target = train_setup.load_target(target_dir, torch.float32, torch.device("cpu"))
    drafter = DFlashDraftModel.from_pretrained(drafter_dir).float().eval()
    trainer = dtrain.Trainer(target, drafter, SimpleNamespace(gamma=7.0, compile=False, labels="hard"),
                             torch.device("cpu"), None)
    block = drafter.config.block_size
    decoded, forced = [], []
    for rec in records:
        prompt_ids = tok(prompts[rec["prompt_index"]]["turns"][0])["input_ids"]
        if len(prompt_ids) != rec["num_prompt_tokens"]:
            raise SystemExit(f"prompt {rec['prompt_index']}: {len(prompt_ids)} tokens here, "
                             f"{rec['num_prompt_tokens']} in the decode run; is the tokenizer the run's?")
        seq = torch.tensor(prompt_ids + rec["output_ids"])
        starts, at = [], rec["num_prompt_tokens"]  # each step's block starts at the last committed token
        for committed in rec["acceptance_lengths"]:
            starts.append(at)
            at += committed
        keep = [i for i, a in enumerate(starts) if a <= len(seq) - block]  # blocks the sequence covers
        with torch.no_grad():
            hits = trainer.step(seq[None], torch.tensor([starts[i] for i in keep])[None]).correct  # [A, b-1]
        forced += hits.float().cumprod(-1).sum(-1).tolist()
        decoded += [rec["acceptance_lengths"][i] - 1 for i in keep]
    same = sum(a == b for a, b in zip(decoded, forced)) / len(decoded)
    print(f"{len(decoded)} steps of {len(records)} prompts: decoded τ {1 + statistics.mean(decoded):.3f}, "
          f"teacher-forced τ at the same block starts {1 + statistics.mean(forced):.3f}, "
          f"the same accepted count in {100 * same:.1f}% of steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
