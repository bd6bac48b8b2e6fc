"""Steps without a draft against AR's, with the held row set aside by one kernel or by torch's writes.

    python -m benchmarks.held_steps --device cuda --rounds 3

At T = 1 this project's rule takes AR's step almost everywhere, but each such step still
taps the target's layers and sets its row aside for the next draft
(:meth:`bastion.engines.dflash_proposer.StaticDFlash.hold_row`).  On CUDA the compiled
engine does that in one Triton launch (:mod:`bastion.engines.hold_kernel`); engine B here
is the same engine made to take torch's three writes instead.  Each engine decodes the
stdlib-heldout prompts with AR and with ``bastion_plus`` held at steps without a draft (its
gate stopped for good), the four decoders in turn prompt by prompt, unsynchronised (the
decode seconds of ``generate``), and prints each round's rates and each engine's time a
token against AR's.  Last, one prompt decoded on both engines must leave the same rows set
aside, bit for bit.  Off CUDA both engines take torch's writes (a smoke run).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.speculative.gate import DraftGate
from bastion.speculative.policy import TreePolicy

NAMES = ("ar A", "plus A", "ar B", "plus B")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prompts", type=int, default=8, help="stdlib-heldout prompts a round")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    return ap


def _seeded(device: str, seed: int) -> torch.Generator:
    """The sampling generator of prompt ``seed``, the same for every decoder (draws on the device)."""
    return torch.Generator(device=device).manual_seed(seed)


def _decoders(target, drafter) -> tuple[dict, dict]:
    """Engines A (the kernel where it serves) and B (torch's writes), and AR and held bastion_plus on each."""
    engines = {k: Engine("compiled", target, drafter, n_max=256) for k in "AB"}
    engines["B"].static.proposers["dflash"]._hold_in_one = lambda parts: False
    decoders = {}
    for k, engine in engines.items():
        decoders[f"ar {k}"] = engine.decoder("ar", TreePolicy(budget=16))
        held = engine.decoder("bastion_plus", TreePolicy(budget=32))
        held.gate = DraftGate(lambda c: 1.0, lambda n, c: 1e9)  # never pays: stopped for good
        held.gate.drafting, held.gate.backoff, held.gate.wait = False, 10**9, 10**9
        decoders[f"plus {k}"] = held
    return engines, decoders


def _rounds(decoders: dict, prompts: list, args: argparse.Namespace) -> dict[str, list[float]]:
    """Each decoder's time a token, prompt by prompt, over ``args.rounds`` rounds in turn."""
    per_token: dict[str, list[float]] = {n: [] for n in NAMES}
    for r in range(args.rounds):
        secs, toks = {n: 0.0 for n in NAMES}, {n: 0 for n in NAMES}
        for i, prompt in enumerate(prompts):
            for n in NAMES[i % 4:] + NAMES[: i % 4]:
                res = decoders[n].generate(prompt, args.tokens, 1.0, [], _seeded(args.device, i))
                if n.startswith("plus") and any(s.drafted for s in res.steps):
                    raise RuntimeError(f"{n} drafted: the held decoder must take AR's steps only")
                secs[n] += res.decode_seconds
                toks[n] += len(res.output_ids)
                per_token[n].append(res.decode_seconds / len(res.output_ids))
        print(f"round {r}: tok/s " + ", ".join(f"{n} {toks[n] / secs[n]:,.0f}" for n in NAMES))
    return per_token


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    target = models.load_target(str(models.tiny_dir("target")), dtype, args.device)
    drafter = models.load_drafter(str(models.tiny_dir("drafter")), dtype, args.device)
    builder = PromptBuilder(models.load_tokenizer(str(models.tiny_dir("target"))))
    prompts = [builder.encode([], p["turns"][0]) for p in datasets.load_prompts("stdlib-heldout")[: args.prompts]]
    engines, decoders = _decoders(target, drafter)
    for n in NAMES:  # graphs captured before any timed decode
        decoders[n].generate(prompts[0], 32, 1.0, [], _seeded(args.device, 0))
    per_token = _rounds(decoders, prompts, args)
    for k in "AB":
        ar, plus = statistics.mean(per_token[f"ar {k}"]), statistics.mean(per_token[f"plus {k}"])
        print(f"engine {k}: AR {1e3 * ar:.4f} ms a token, bastion_plus without drafts {1e3 * plus:.4f} ms, "
              f"x AR {ar / plus:.3f}")
    held = {}
    for k in "AB":
        decoders[f"plus {k}"].generate(prompts[-1], args.tokens, 1.0, [], _seeded(args.device, 5))
        proposer = engines[k].static.proposers["dflash"]
        held[k] = proposer.wide[0, : int(proposer.held)].clone()
    same = held["A"].shape == held["B"].shape and torch.equal(held["A"], held["B"])
    print(f"rows set aside after one prompt: {held['A'].shape[0]} and {held['B'].shape[0]}, equal bits: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
