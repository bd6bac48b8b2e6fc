"""EAGLE-3's step costs on the static/compiled engine: draft per depth, whole draft, verify.

A random Qwen3-8B-shaped target (``--shape qwen3-8b``, the default) with a random EAGLE-3
head of the public heads' shape (one Llama layer as wide as the target, 32k draft
vocabulary).  Random weights: the numbers are per-step costs, not speedups.  At each
context length (``--contexts``):

* ``depth``: the head's drafting with ``depth`` = 0, 1, ..., D expansion rounds (D =
  ``--depth``); ``draft_ms`` is the whole tree drafting (context pair + root top-k + d
  rounds + rerank), ``round_ms`` the cost the d-th round adds;
* ``draft``: the whole draft at the reference tree (depth 7, top-k 10, 60 nodes);
* ``verify``: one 60-node verification of the target (the engine's graph, tapping the
  head's three layers), and one commit;
* ``step``: phase medians of a real eagle3 decode on the engine (``collect_stats=True``:
  each phase between device synchronisations), and ``step_ms``, the median whole step of
  another decode timed by CUDA events at the phase boundaries (``collect_stats="events"``:
  it runs as untimed; on a CPU the synchronised phases' sum).

The ``depth`` and ``draft`` sections run the head eagerly on its growing cache (the eager
engine's drafting); in ``step`` the engine drafts through its own graph per window (on the
compiled engine with the fused head, :mod:`bastion.engines.fused_eagle3`).
Output: one JSON line per row on stdout and ``eagle3_cost.json`` in ``--out``.

    python -m benchmarks.eagle3_cost --out results_dir                       # GPU, Qwen3-8B shape
    python -m benchmarks.eagle3_cost --shape small --device cpu --out /tmp/x   # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from bastion.calibration.peaks import median_time
from bastion.defaults import EAGLE3_DEPTH, EAGLE3_TOPK, EAGLE3_TOTAL_TOKENS
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.methods import Eagle3Policy
from benchmarks.shapes import SHAPES, random_eagle3_head, random_target
from dflash.eagle3.tree import draft_tree, extend_context


PHASES = ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit")


def _ms(x: float) -> float:
    return round(1e3 * x, 4)


class Report:
    def __init__(self, out: Path, meta: dict) -> None:
        self.path = out / "eagle3_cost.json"
        out.mkdir(parents=True, exist_ok=True)
        self.data: dict = {"meta": meta}
        self._write()

    def add(self, section: str, row: dict) -> None:
        self.data.setdefault(section, []).append(row)
        print(json.dumps({"section": section, **row}), flush=True)
        self._write()

    def _write(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=1))


def _head_at_context(e3: Eagle3Drafter, c: int, feat_dim: int, device, dtype, gen):
    """A head cache holding ``c`` committed pairs, and one new pair to draft from."""
    cache = e3.new_cache()
    vocab = int(e3.head.t2d.shape[0])
    feats = torch.randn(c + 1, feat_dim, generator=gen).to(device, dtype)
    toks = torch.randint(0, vocab, (c + 1,), generator=gen).to(device)
    extend_context(e3.head, cache, feats[:c], toks[:c])
    return cache, feats[c:], toks[c:]


def section_depth(rep, e3, c, feat_dim, device, dtype, gen, args):
    cache, f1, t1 = _head_at_context(e3, c, feat_dim, device, dtype, gen)
    prev = None
    for d in range(args.depth + 1):
        def fn(d=d):
            draft_tree(e3.head, cache, f1, t1, args.total_tokens, d, args.topk)
            cache.crop(c)  # the call committed the new pair: back to c
        t, spread = median_time(fn, device, args.warmup, args.repeats)
        row = {"context": c, "depth": d, "draft_ms": _ms(t), "spread_ms": _ms(spread),
               "round_ms": None if prev is None else _ms(t - prev)}
        prev = t
        rep.add("depth", row)
    rep.add("draft", {"context": c, "depth": args.depth, "topk": args.topk, "total_tokens": args.total_tokens,
                      "nodes": e3.tree_size, "draft_ms": _ms(prev)})
    return cache, f1, t1


def section_verify(rep, name, eng: StaticEngine, e3, c, cache, f1, t1, device, args):
    drafts = eng.proposers["eagle3"]
    n = drafts.tree_size
    eng.ensure_capacity(c + n, nodes=n)
    kv = eng.window(c + n)
    eng.buffers.length.fill_(c)
    eng.buffers.cache.length = c
    drafts.write_tree(e3.tree(cache, f1, t1))  # a real drafted tree in the tree buffers
    cache.crop(c)
    verify = lambda: eng.runner(("verify", n, kv, True, "eagle3"), lambda: eng.verify(n, kv, True, "eagle3"))  # noqa: E731
    tv, sv = median_time(verify, device, args.warmup, args.repeats)

    def commit():  # commit advances the committed length: put it back (outside the timed graph's work)
        eng.runner(("commit", n, "eagle3"), lambda: eng.steps.commit(n, "eagle3"), writes=eng.state())
        eng.buffers.length.fill_(c)
        eng.buffers.cache.length = c
    tc, _ = median_time(commit, device, args.warmup, args.repeats)
    rep.add("verify", {"engine": name, "context": c, "nodes": n, "kv_window": kv, "verify_ms": _ms(tv), "spread_ms": _ms(sv),
                       "commit_ms": _ms(tc)})


def section_step(rep, name, eng: StaticEngine, c, vocab, gen, args):
    dec = StaticDecoder(eng, "eagle3")
    prompt = torch.randint(0, vocab - 2, (c,), generator=gen).tolist()
    dec.generate(prompt, 4, collect_stats=True)  # graphs captured here
    steps = dec.generate(prompt, args.steps + 2, collect_stats=True).steps[1:]
    row = {"engine": name, "context": c, "steps": len(steps), "nodes": steps[0].tree_size}
    for ph in PHASES:
        row[ph + "_ms"] = _ms(statistics.median(getattr(s, ph) for s in steps))
    # the whole step as it runs untimed: CUDA events at the phase boundaries, no syncs between them
    timed = dec.generate(prompt, args.steps + 2, collect_stats="events" if eng.device.type == "cuda" else True)
    row["step_ms"] = _ms(statistics.median(sum(getattr(s, ph) for ph in PHASES) for s in timed.steps[1:]))
    rep.add("step", row)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.eagle3_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    p.add_argument("--engines", default="static,compiled", help="comma list of static, compiled")
    p.add_argument("--contexts", default="512,2048,8192")
    p.add_argument("--depth", type=int, default=EAGLE3_DEPTH)
    p.add_argument("--topk", type=int, default=EAGLE3_TOPK)
    p.add_argument("--total-tokens", type=int, default=EAGLE3_TOTAL_TOKENS)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--steps", type=int, default=16, help="decode steps timed per context (section step)")
    p.add_argument("--out", default="results/eagle3_cost")
    return p


@torch.no_grad()
def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32, "bfloat16": torch.bfloat16,
             "float32": torch.float32}[args.dtype]
    contexts = [int(x) for x in args.contexts.split(",")]
    model = random_target(args.shape, device, dtype)
    target = Target(model)
    head = random_eagle3_head(args.shape, model, device, dtype)
    e3 = Eagle3Drafter.bind(head, target, Eagle3Policy(args.depth, args.topk, args.total_tokens))
    feat_dim = 3 * int(model.config.hidden_size)
    vocab = int(model.config.vocab_size)
    meta = {"shape": args.shape, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dtype": str(dtype).removeprefix("torch."), "torch": torch.__version__, "layer_ids": e3.layer_ids,
            "draft_vocab": head.config.draft_vocab_size, "tree": [args.depth, args.topk, args.total_tokens],
            "nodes": e3.tree_size}
    rep = Report(Path(args.out), meta)
    gen = torch.Generator().manual_seed(0)
    engines = {name: StaticEngine(target, None, max(contexts) + 256, e3.tree_size, fused=name == "compiled", eagle3=e3)
               for name in args.engines.split(",")}
    for c in contexts:
        cache, f1, t1 = section_depth(rep, e3, c, feat_dim, device, dtype, gen, args)
        for name, eng in engines.items():
            section_verify(rep, name, eng, e3, c, cache, f1, t1, device, args)
            section_step(rep, name, eng, c, vocab, gen, args)
    return rep.data


if __name__ == "__main__":
    main()
