"""Where the adaptive rule's extra tree-phase time goes on a GPU (CUDA; tools/gpu/rank_graphs.sh calibrates first).

The tiny pair on the compiled engine decodes the same prompts with the adaptive rule and
with fixed trees, then every captured step graph is replayed on its own and timed with
CUDA events (GPU time, no host in between).  The rule's ``rank`` graph differs from a
fixed budget's only by the cost curve and the node count, so comparing the two at the
same ranking width prices exactly that part.  Also prints each policy's median step
phases (host-timed, as ``--step-times``) and the kernel count of the two rank graphs.

    python -m benchmarks.rank_graphs CALIBRATION.json [--prompts 4] [--tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

import torch

from bastion.calibration.store import Calibration
from bastion.data.prompts import PromptBuilder
from bastion.data.registry import load_prompts
from bastion.models import registry
from bastion.runs.session import Session
from bastion.speculative.policy import TreePolicy


def replay_us(graph, repeats: int = 200) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        graph.replay()
    times = []
    for _ in range(5):
        start.record()
        for _ in range(repeats):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / repeats)
    return min(times)


def kernels_in(graph_fn) -> int:
    """Kernel launches of one eager call of ``graph_fn`` (what its graph holds)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph_fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


PHASES = ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("calibration")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--n-min", type=int, default=32)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of the decoding part (no graphs to time)")
    args = ap.parse_args()
    device = torch.device(args.device)
    cal = Calibration.load(args.calibration)
    target_ref, drafter_ref, _ = registry.resolve("tiny")
    session = Session(["bastion"])
    loaded = session.models(["bastion"], target_ref, drafter_ref, None, torch.bfloat16 if device.type == "cuda" else torch.float32, device, "sdpa",
                            None, None)
    builder = PromptBuilder(loaded.tokenizer)
    prompts = [builder.encode([], p["turns"][0]) for p in load_prompts("stdlib-heldout", args.prompts)]
    n_max = min(cal.max_s, 256)
    engine = session.engine("compiled", loaded, n_max=n_max, max_context=2048)
    base = TreePolicy(n_min=args.n_min, n_max=n_max)
    policies = {"rule": base, "fixed128": replace(base, budget=128), "fixed32": replace(base, budget=32)}
    print("| policy | mean nodes | median ms: draft / tree / verify / accept / commit |")
    print("|---|---:|---|")
    for name, policy in policies.items():
        ph = _phases(engine.decoder("bastion", policy, cal.cost_model, cal.overheads), prompts, args.tokens)
        print(f"| {name} | {ph['nodes']:.1f} | " + " / ".join(f"{ph[k]:.3f}" for k in PHASES) + " |")
    if device.type == "cuda":
        _graph_table(engine.static, base, cal)
    sys.stdout.flush()


def _phases(dec, prompts: list, tokens: int) -> dict[str, float]:
    """Median ms of each phase over every prompt's steps but its first, after a warm-up decode that captures the
    graphs; and the mean tree size."""
    dec.generate(prompts[0], tokens)  # warm-up: captures
    steps = []
    for ids in prompts:
        steps += dec.generate(ids, tokens, collect_stats=True).steps[1:]
    phases = {k: statistics.median(getattr(s, k) for s in steps) * 1e3 for k in PHASES}
    phases["nodes"] = statistics.mean(s.tree_size for s in steps)
    return phases


def _graph_table(eng, base: TreePolicy, cal: Calibration) -> None:
    """GPU µs per replay of every captured tree-phase graph, then the kernels each ranking form launches eagerly."""
    rows = []
    for key, graph in eng.runner.graphs.items():
        if key[0] in ("select", "rank", "build", "draft"):
            label = key[0] if key[0] != "rank" else f"rank m={key[1]} {'rule' if key[3].budget is None else 'budget'}"
            if key[0] in ("select", "build"):
                label += f" {key[1:]}"
            rows.append((label, replay_us(graph)))
    print("\n| graph | GPU µs per replay |\n|---|---:|")
    for label, us in sorted(rows):
        print(f"| {label} | {us:.1f} |")
    # the rank step eagerly, under the profiler: how many kernels each form launches
    for m in sorted({k[1] for k in eng.runner.graphs if k[0] == "rank"}):
        for name, policy in (("rule", base), ("budget", replace(base, budget=128))):
            n = kernels_in(lambda: eng.tree_phase.rank(m, policy, cal.cost_model, cal.overheads.fixed))
            print(f"rank m={m} {name}: {n} kernels eagerly")


if __name__ == "__main__":
    main()
