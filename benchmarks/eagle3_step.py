"""EAGLE-3 against AR on the bundled tiny pair, per engine and tree: tok/s, ms per step, tau.

Each repeat decodes every prompt with each (engine, method) in turn, every given tree an
EAGLE-3 method of its own, so a slow spell on a shared machine falls on all of them alike;
the table gives medians over the repeats.
Times are whole ``generate`` calls (prefill and the first draft included), so the
numbers compare across versions that put the first draft in a different phase; on a CPU
``cpu_ms_per_step`` (the process's CPU time, one thread) is steadier than the wall clock
when other jobs share the cores.
``--phases`` adds, per engine, the median phase times of one more EAGLE-3 decode with
``collect_stats=True`` (every phase between device synchronisations).

    python -m benchmarks.eagle3_step                                   # CPU, 1 thread, eager and static
    python -m benchmarks.eagle3_step --device cuda --dtype bfloat16 --engines static,compiled
    python -m benchmarks.eagle3_step --engines compiled --dataset humaneval-pkg,stdlib-heldout \
        --max-samples 8 --prompts 8 --repeats 1 --tree 1,1,3 3,1,5 2,2,6   # the default run's prompts
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.models.eagle3 import Eagle3Drafter
from bastion.speculative.methods import Eagle3Policy

PHASES = ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.eagle3_step", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--engines", default="eager,static", help="comma list of eager, static, compiled")
    p.add_argument("--dataset", default="stdlib-heldout", help="a dataset, or a comma list of them")
    p.add_argument("--max-samples", type=int, help="each dataset's seeded subset of this size, as the pipeline's")
    p.add_argument("--prompts", type=int, default=2, help="each dataset's first N prompts (of the subset, if any)")
    p.add_argument("--tokens", type=int, default=128, help="new tokens per prompt")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: leave as is)")
    p.add_argument("--tree", nargs="+", default=["7,10,60"], help="EAGLE-3 depth,top-k,total tokens; several are "
                   "decoded in turn")
    p.add_argument("--phases", action="store_true", help="also time each phase of one EAGLE-3 decode per engine")
    p.add_argument("--out", help="write the rows as JSON here")
    return p


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _prompts(args: argparse.Namespace, builder: PromptBuilder) -> list[list[int]]:
    """Each dataset's first ``--prompts`` first turns, of its seeded ``--max-samples`` subset when given."""
    return [builder.encode([], p["turns"][0]) for name in args.dataset.split(",")
            for p in datasets.load_prompts(name, args.max_samples)[: args.prompts]]


def _decoders(args: argparse.Namespace, target, head, context: int) -> dict[tuple[str, str], object]:
    """(engine, method) -> decoder: AR, and one EAGLE-3 decoder a tree (method ``eagle3 d/k/t``)."""
    decoders: dict[tuple[str, str], object] = {}
    for name in args.engines.split(","):
        for i, tree in enumerate(args.tree):
            e3 = Eagle3Drafter.bind(head, target, Eagle3Policy(*(int(x) for x in tree.split(","))))
            engine = Engine(name, target, None, n_max=e3.tree_size, max_context=context, eagle3=e3)
            if i == 0:
                decoders[(name, "ar")] = engine.decoder("ar")
            decoders[(name, "eagle3 " + tree.replace(",", "/"))] = engine.decoder("eagle3")
    return decoders


def _timed(decoders: dict, prompts: list[list[int]], tokens: int, repeats: int, device: torch.device):
    """Per decoder, one (seconds, tokens, steps, committed, cpu seconds) a repeat, and its outputs.

    Every prompt is decoded by each decoder in turn, so that drift weighs on all alike.
    """
    runs: dict[tuple[str, str], list[list[float]]] = {key: [] for key in decoders}
    outputs: dict[tuple[str, str], list[list[int]]] = {key: [] for key in decoders}
    for _ in range(repeats):
        for key in decoders:
            runs[key].append([0.0, 0, 0, 0, 0.0])
            outputs[key] = []
        for prompt in prompts:
            for key, dec in decoders.items():
                _sync(device)
                t0, c0 = time.perf_counter(), time.process_time()
                res = dec.generate(prompt, tokens)
                _sync(device)
                r = runs[key][-1]
                r[0], r[4] = r[0] + time.perf_counter() - t0, r[4] + time.process_time() - c0
                r[1], r[2] = r[1] + len(res.output_ids), r[2] + len(res.steps)
                r[3] += sum(res.acceptance_lengths)  # the prefill's token is no step's
                outputs[key].append(res.output_ids)
    return runs, outputs


@torch.no_grad()
def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    tiny = str(models.tiny_dir("target"))
    target = models.load_target(tiny, dtype, device)
    head = models.load_eagle3_head(models.resolve_eagle3("tiny"), target, "tiny", dtype, device)
    prompts = _prompts(args, PromptBuilder(models.load_tokenizer(tiny)))
    decoders = _decoders(args, target, head, max(len(p) for p in prompts) + args.tokens + 256)
    for dec in decoders.values():  # warm-up: graphs captured, caches and allocators settled
        dec.generate(prompts[0], 8)
    runs, outputs = _timed(decoders, prompts, args.tokens, args.repeats, device)
    ar_rate = {e: statistics.median(r[1] / r[0] for r in runs[(e, "ar")]) for e in args.engines.split(",")}
    rows = []
    for (engine, method), reps in runs.items():
        _, tokens, steps, committed, _ = reps[0]
        rate = statistics.median(r[1] / r[0] for r in reps)
        row = {"engine": engine, "method": method, "tok_s": round(rate, 2), "x_ar": round(rate / ar_rate[engine], 3),
               "ms_per_step": round(statistics.median(1e3 * r[0] / r[2] for r in reps), 2),
               "cpu_ms_per_step": round(statistics.median(1e3 * r[4] / r[2] for r in reps), 2),
               "tau": round(committed / steps, 3), "steps": steps, "tokens": tokens,
               "tok_s_each": [round(r[1] / r[0], 2) for r in reps],
               "same_as_ar": outputs[(engine, method)] == outputs[(engine, "ar")]}
        if args.phases and method != "ar":
            st = decoders[(engine, method)].generate(prompts[0], args.tokens, collect_stats=True).steps
            row["phases_ms"] = {ph: round(1e3 * statistics.median(getattr(s, ph) for s in st), 3) for ph in PHASES}
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {"device": str(device), "dtype": args.dtype, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "prompts": [len(p) for p in prompts], "trees": args.tree, "repeats": args.repeats}
    print(json.dumps({"meta": meta}))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=1)
    return rows


if __name__ == "__main__":
    main()
