"""What one EAGLE-3 draft is made of, unfused (the static engine) and fused (the compiled engine).

The static engine captures a step's whole draft (the context pass, every round, the
rerank) as one CUDA graph of the head's module operations; the compiled engine runs the
head's layer and rounds as fused functions (:mod:`bastion.engines.fused_eagle3`).  For
each engine this drafts once at a context of ``--context`` tokens, after a short decode,
and reports:

* on a CPU (no GPU needed): one draft's work as the profiler sees it, with every function
  the compiled engine compiles on CUDA compiled here by Inductor's C++ backend
  (``Compilation.choose(compile=True)``; ``--cpu-compile off`` keeps them uncompiled).
  Counted: ``compiled_calls``, calls into compiled graphs (``Torch-Compiled Region``), of
  ``graphs`` distinct ones; ``inductor_kernels``, the kernels Inductor generated that ran
  (``cpp_fused_*``); ``extern_ops``, operators the compiled code calls (matrix products,
  top-k); ``eager_ops``, operators run outside compiled code.  An operator counts once,
  at its outermost call, unless it only makes a view or allocates (``NO_WORK``), and the
  code that wraps a compiled graph's inputs is left out.  ``launches`` is the sum of the
  last three: on a GPU each is at least one kernel.  Inductor's CPU and GPU backends fuse
  alike but not identically, so the CPU count is an estimate of the GPU's;
* on CUDA: ``launches``, the kernels (and ``copies``, the memory copies and sets) that one
  replay of the captured draft graph runs, from the profiler's device trace, and
  ``draft_ms``, the replay's GPU time; ``ar_step_ms``, a decoded AR token's wall time on
  the same engine (graphs captured, its decode's host syncs included) and the ratio of
  the two.

Random weights of a named shape (``--shape``, :mod:`benchmarks.shapes`, with an EAGLE-3 head
of the public heads' shape), or the bundled tiny pair (``--shape tiny``).  One JSON line per
row on stdout, ``eagle3_draft_kernels.json`` in ``--out``; ``--table FILE..`` prints the
rows of such files (and the whole EAGLE-3 step of ``eagle3_cost.json`` files) as one table.

    python -m benchmarks.eagle3_draft_kernels --device cpu --shape small --out /tmp/k   # CPU counts
    python -m benchmarks.eagle3_draft_kernels --shape qwen3-8b --out out/k8b            # GPU
    python -m benchmarks.eagle3_draft_kernels --table out/k*/eagle3_draft_kernels.json out/e3/eagle3_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.methods import Eagle3Policy
from benchmarks.launch_count import cpu_launches, gpu_launches
from benchmarks.shapes import SHAPES, random_eagle3_head, random_target


def load_pair(shape: str, device: torch.device, dtype: torch.dtype):
    """The target and the EAGLE-3 head of ``shape``: the bundled tiny pair, or random weights."""
    if shape == "tiny":
        from bastion.models import registry as models

        target = models.load_target(str(models.tiny_dir("target")), dtype, device)
        return target, models.load_eagle3_head(models.resolve_eagle3("tiny"), target, "tiny", dtype, device)
    model = random_target(shape, device, dtype)
    return Target(model), random_eagle3_head(shape, model, device, dtype)


def ready_engine(target: Target, e3: Eagle3Drafter, fused: bool, compile: bool | None, prompt: list[int]):
    """An engine that has decoded ``prompt`` a few steps (graphs captured, functions compiled), and
    the window of its next draft, drafted once."""
    eng = StaticEngine(target, None, len(prompt) + 256, e3.tree_size, fused=fused, compile=compile, eagle3=e3)
    StaticDecoder(eng, "eagle3").generate(prompt, 4)
    prop = eng.proposers["eagle3"]
    committed = int(eng.buffers.length)
    prop.step(eng.runner, committed)  # captures (CUDA) the draft graph of this window
    return eng, eng.buffers.window(committed + prop.width)


def ar_step_ms(eng: StaticEngine, prompt: list[int], steps: int) -> float:
    """A decoded AR token's wall time: the difference of two decodes, so the prefill cancels out."""
    dec = StaticDecoder(eng, "ar")
    dec.generate(prompt, steps + 4)  # captures AR's graphs
    times = {}
    for n in (4, steps + 4):
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            dec.generate(prompt, n)
            runs.append(time.perf_counter() - t0)
        times[n] = statistics.median(runs)
    return 1e3 * (times[steps + 4] - times[4]) / steps


def draft_ms(eng: StaticEngine, kv: int, device: torch.device, iters: int) -> float:
    """One draft's time: GPU time per replay of its captured graph, or the plain call's wall time."""
    prop = eng.proposers["eagle3"]
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(iters):
            prop.draft(kv)
        return 1e3 * (time.perf_counter() - t0) / iters
    graph = eng.runner.graphs[("eagle3", kv)]
    graph.replay()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) / iters


def measure(args, device: torch.device, dtype: torch.dtype) -> list[dict]:
    target, head = load_pair(args.shape, device, dtype)
    depth, top_k, total = (int(x) for x in args.tree.split(","))
    e3 = Eagle3Drafter.bind(head, target, Eagle3Policy(depth, top_k, total))
    vocab = int(target.config.vocab_size)
    prompt = torch.randint(0, vocab - 2, (args.context,), generator=torch.Generator().manual_seed(0)).tolist()
    compile = None if device.type == "cuda" else args.cpu_compile == "on"  # CUDA: the engine's own choice
    rows = []
    for name in args.engines.split(","):
        eng, kv = ready_engine(target, e3, name == "compiled", compile, prompt)
        prop = eng.proposers["eagle3"]
        if device.type == "cuda":
            counts = gpu_launches(lambda: eng.runner.graphs[("eagle3", kv)].replay(), device)
        else:
            counts = cpu_launches(lambda: prop.draft(kv))
        row = {"shape": args.shape, "engine": name, "fused_head": prop.fused_head is not None,
               "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "dtype": str(dtype).removeprefix("torch."), "compiled": bool(eng.compilation.compile),
               "tree": [depth, top_k, total], "nodes": e3.tree_size, "context": args.context, "kv_window": kv,
               **counts, "draft_ms": round(draft_ms(eng, kv, device, args.iters), 4)}
        if args.ar_steps:
            row["ar_step_ms"] = round(ar_step_ms(eng, prompt, args.ar_steps), 4)
            row["draft_per_ar_step"] = round(row["draft_ms"] / row["ar_step_ms"], 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _made_of(r: dict) -> str:
    if "inductor_kernels" not in r:
        return f"{r.get('copies', 0)} copies"
    return (f"{r['inductor_kernels']} Inductor + {r['extern_ops']} extern + {r['eager_ops']} eager; "
            f"{r['compiled_calls']} calls of {r['graphs']} graphs")


def table(docs: list[dict]) -> str:
    """Markdown: a row per (shape, engine) of ``eagle3_draft_kernels.json`` files, with the whole
    EAGLE-3 step (``step_ms``) of ``eagle3_cost.json`` files at the same shape, engine and context."""
    steps = {(d["meta"]["shape"], s["engine"], s["context"]): s.get("step_ms")
             for d in docs if "meta" in d for s in d.get("step", [])}
    lines = ["| shape | engine | fused head | device, dtype | context | tree | launches per draft | made of | "
             "draft ms | AR step ms | draft / AR step | EAGLE-3 step ms |",
             "|---|---|---|---|---:|---|---:|---|---:|---:|---:|---:|"]
    for r in (r for d in docs for r in d.get("kernels", [])):
        step = steps.get((r["shape"], r["engine"], r["context"]))
        cells = [r["shape"], r["engine"], "yes" if r["fused_head"] else "no", f"{r['device']}, {r['dtype']}",
                 r["context"], "/".join(map(str, r["tree"])), r["launches"], _made_of(r), r["draft_ms"],
                 r.get("ar_step_ms", ""), r.get("draft_per_ar_step", ""), "" if step is None else step]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.eagle3_draft_kernels", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=["tiny", *sorted(SHAPES)], default="qwen3-8b")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    p.add_argument("--engines", default="static,compiled", help="comma list of static (unfused), compiled (fused)")
    p.add_argument("--tree", default="7,10,60", help="EAGLE-3 depth,top-k,total tokens")
    p.add_argument("--context", type=int, default=512, help="prompt tokens before the measured draft")
    p.add_argument("--cpu-compile", choices=["on", "off"], default="on",
                   help="on a CPU, compile the engine's functions with Inductor (as on CUDA) or not")
    p.add_argument("--iters", type=int, default=20, help="drafts timed")
    p.add_argument("--ar-steps", type=int, default=16, help="AR tokens timed (0: no AR step)")
    p.add_argument("--out", help="folder for eagle3_draft_kernels.json")
    p.add_argument("--table", nargs="+", metavar="FILE", help="print these result files as one table, measure nothing")
    return p


@torch.no_grad()
def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)
    if args.table:
        missing = [f for f in args.table if not Path(f).is_file()]
        if missing:  # a run that failed leaves no file: its rows are left out, and said so
            print(f"[eagle3_draft_kernels] no such result file: {', '.join(missing)}", file=sys.stderr)
        print(table([json.loads(Path(f).read_text()) for f in args.table if f not in missing]))
        return []
    device = torch.device(args.device)
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32, "bfloat16": torch.bfloat16,
             "float32": torch.float32}[args.dtype]
    if device.type == "cpu" and args.cpu_compile == "on":
        import torch._inductor.config as inductor

        inductor.cpp.enable_kernel_profile = True  # each generated kernel shows in the profiler
    rows = measure(args, device, dtype)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "eagle3_draft_kernels.json").write_text(json.dumps({"kernels": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
