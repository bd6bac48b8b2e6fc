"""Where a static-engine step's time goes outside the two forwards (GPU only).

Each step function (draft, select, rank, build, verify, commit) is replayed from its CUDA
graph back to back and timed with CUDA events, so the numbers are GPU time per call with
no host synchronisation in between; a kernel table from ``torch.profiler`` shows what each
phase is made of.  Optional variants (``--variants``) time alternative implementations of
the tree phase on the same inputs, for choosing between them.

    PYTHONPATH=$PWD python -m benchmarks.tree_phase --out tp
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from bastion.calibration.peaks import measure_peaks
from bastion.engines.graphs import GraphRunner
from bastion.engines.static_attention import grouped_attention
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from benchmarks.flex_tree import flex_blocks, flex_tree_attention
from benchmarks.graph_timing import graph_us, kernels, replay_us
from benchmarks.shapes import random_pair
from benchmarks.static_engine import Report, event_medians, section_ar, section_overhead

def section_phases(rep, engine, prompt, nodes: int) -> None:
    """Replay every captured graph of a ``nodes``-node BASTION step, of the DFlash chain and of AR."""
    for method, policy in (("bastion", TreePolicy(budget=nodes)), ("dflash", None), ("ar", None)):
        engine.runner = GraphRunner(engine.device, enabled=True)
        dec = StaticDecoder(engine, method, policy)
        dec.generate(prompt, 8)  # captures every graph of the step
        if not engine.runner.enabled:
            return
        state = engine.state()
        total = 0.0
        # the last graph of each function: earlier ones were captured for smaller attention windows
        latest = {key[0]: (key, graph) for key, graph in engine.runner.graphs.items()}
        length = int(engine.buffers.length)
        for key, graph in latest.values():
            window_need = {"verify": lambda: length + key[1] <= key[2], "draft": lambda: length + engine.block <= key[1]}
            if not window_need.get(key[0], lambda: True)():  # the graph's window no longer holds the state
                rep.add("phases", {"method": method, "graph": str(key[:3]), "skipped": "window"})
                continue
            us = replay_us(graph, 5 if key[0] in ("verify", "draft") else 50, restore=state)
            size = {"bastion": nodes, "dflash": engine.block, "ar": 1}[method]
            row = {"method": method, "nodes": size, "graph": str(key[:3]), "us": us}
            tree_graph = key[0] in ("select", "rank", "build", "commit")
            if tree_graph or key[0] in ("draft", "verify"):  # what each graph is made of
                rows = kernels(graph.replay)
                for t, old in zip(state, [t.clone() for t in state]):
                    t.copy_(old)
                row.update(launches=sum(r["count"] for r in rows), top=rows[:12])
            if tree_graph:
                total += us
            rep.add("phases", row)
        rep.add("phases", {"method": method, "tree_and_commit_graphs_us": round(total, 1)})


def section_variants(rep, engine, prompt, nodes: int) -> None:
    """Alternative select / rank / build / commit implementations on the engine's own inputs."""
    StaticDecoder(engine, "bastion", TreePolicy(budget=nodes)).generate(prompt, 4)  # real draft, top-k table, paths
    phase = engine.tree_phase
    _select_variants(rep, engine, phase)
    for m in (31, nodes - 1, 2 * nodes - 1):
        _rank_variants(rep, engine, phase.logq, m)
    # plain: the step functions as written; engine: as the engine runs them (compiled on the compiled engine's CUDA)
    rep.add("variants", {"variant": f"build_plain_{nodes}", "us": graph_us(lambda: phase.build(True, nodes))})
    rep.add("variants", {"variant": f"build_engine_{nodes}", "us": graph_us(lambda: engine.steps.build(True, nodes))})
    st = engine.state()
    rep.add("variants", {"variant": f"commit_plain_{nodes}", "us": graph_us(lambda: engine.commit(nodes, "dflash"), restore=st)})
    rep.add("variants", {"variant": f"commit_engine_{nodes}", "us": graph_us(lambda: engine.steps.commit(nodes, "dflash"),
                                                                          restore=st)})


def _select_variants(rep, engine, phase) -> None:
    """Each way to pick every depth's top-k of the draft logits [D, V], timed and checked against the top-k-first values."""
    from bastion.speculative.tree import draft_topk

    x, k = phase.draft_out, phase.topk  # [D, V] draft logits

    def select_softmax():  # the previous form: log-probabilities of the whole vocabulary, then top-k
        v, i = torch.log_softmax(x.float(), dim=-1).topk(k, dim=-1)
        phase.logq.copy_(v)
        phase.top_tok.copy_(i)

    def select_topk_first():
        v, i = draft_topk(x, 0.0, k)
        phase.logq.copy_(v)
        phase.top_tok.copy_(i)

    def two_stage(chunk):  # each chunk's top-k, then the top-k of those: the same values
        def fn():
            d, v = x.shape
            c = -(-v // chunk)
            xp = torch.nn.functional.pad(x, (0, c * chunk - v), value=float("-inf"))
            v1, i1 = xp.view(d * c, chunk).topk(k, dim=-1)  # [D*C, k]
            i1 = i1 + (torch.arange(c, device=x.device) * chunk).repeat(d)[:, None]
            v2, j = v1.view(d, c * k).topk(k, dim=-1)
            lse = torch.logsumexp(x.float(), dim=-1, keepdim=True)
            phase.logq.copy_(v2.float() - lse)
            phase.top_tok.copy_(i1.view(d, c * k).gather(1, j))
        return fn

    selects = [("select_softmax", select_softmax), ("select_topk_first", select_topk_first)]
    selects += [(f"select_two_stage_{chunk}", two_stage(chunk)) for chunk in (1024, 2048, 4096, 8192) if chunk >= k]
    if engine.device.type == "cuda":  # as the compiled engine runs it
        selects.append(("select_topk_first_compiled", torch.compile(select_topk_first)))
    select_topk_first()
    want = phase.logq.clone()
    for name, fn in selects:
        row = {"variant": name, "us": graph_us(fn)}
        fn()
        row["same_values_as_topk"] = bool(torch.equal(phase.logq, want))
        rep.add("variants", row)


def _rank_variants(rep, engine, logq: torch.Tensor, m: int) -> None:
    """The ``m`` best paths of ``logq`` [D, K] by torch and, where Triton runs, by its kernels at several program
    sizes, with their equality checked on the draft's values and on values full of exact ties."""
    from bastion.speculative import fused, path_rank

    for name, fn in (("torch", path_rank._rank_torch), ("triton", path_rank._rank_triton)):
        if name == "triton" and not fused.use_triton(engine.device):
            continue
        rep.add("variants", {"variant": f"rank_{name}_m{m}", "us": graph_us(lambda f=fn: f(logq, m))})
    if not fused.use_triton(engine.device):
        return
    from bastion.speculative import path_rank_kernels as kern

    default = kern.LANES, kern.WARPS
    for lanes, warps in ((512, 4), (1024, 4), (2048, 8), (4096, 8)):  # program size: lanes and warps per program
        kern.LANES, kern.WARPS = lanes, warps
        rep.add("variants", {"variant": f"rank_triton_m{m}_lanes{lanes}_warps{warps}",
                             "us": graph_us(lambda: path_rank._rank_triton(logq, m))})
    kern.LANES, kern.WARPS = default
    # same paths, bit for bit, also with many exact ties
    tied = torch.sort(torch.randint(-40, 0, logq.shape, device=engine.device).float() / 4, dim=-1, descending=True).values
    same = [all(torch.equal(a, b) for a, b in zip(path_rank._rank_torch(q, m), path_rank._rank_triton(q, m)))
            for q in (logq, tied)]
    rep.add("variants", {"variant": f"rank_triton_equals_torch_m{m}", "drafted": same[0], "tied": same[1]})


def section_attention(rep, engine, contexts, sizes=(1, 16, 64, 128, 256, 512, 1024, 2048)) -> None:
    """36 layers' tree attention over a window, by form: SDPA (default and cuDNN), two batched
    multiplies (plain and compiled), and compiled FlexAttention."""
    import functools

    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = engine.target.config
    hq, hkv, d, layers = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.num_hidden_layers
    dev, dt = engine.device, engine.dtype
    bmm = functools.partial(grouped_attention, matmul_rows=1 << 30)
    sdpa = functools.partial(grouped_attention, matmul_rows=0)
    flex = torch.compile(flex_tree_attention, dynamic=True) if dev.type == "cuda" else flex_tree_attention

    def cudnn(*a):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(*a)

    forms = {"sdpa": sdpa, "bmm": bmm, "bmm_compiled": torch.compile(bmm, dynamic=True), "flex_compiled": None}
    if dev.type == "cuda":
        forms["sdpa_cudnn"] = cudnn
    for c in contexts:
        kv = engine.window(c + max(sizes))
        ks = [torch.randn(1, hkv, kv, d, device=dev, dtype=dt) for _ in range(layers)]
        vs = [torch.randn(1, hkv, kv, d, device=dev, dtype=dt) for _ in range(layers)]
        for s in sizes:
            q = torch.randn(1, hq, s, d, device=dev, dtype=dt)
            # the live context, then a random tree-like lower-triangular block
            mask = (torch.arange(kv, device=dev) < c)[None].expand(s, kv).clone()
            mask[:, c : c + s] = torch.rand(s, s, device=dev).tril_() < 0.3
            mask[:, c : c + s].diagonal().fill_(True)
            mask = mask[None, None]
            row = {"context": c, "window": kv, "s": s, "rows_per_kv_head": hq // hkv * s}
            for name, fn in forms.items():
                if name.startswith("bmm") and s > 256:  # materialised scores: slow and large past here
                    continue
                if name == "flex_compiled":
                    blocks = flex_blocks(s, kv, dev)
                    fn = functools.partial(flex, blocks=blocks)
                try:
                    row[f"{name}_us_36_layers"] = graph_us(lambda f=fn: [f(q, k, v, mask, d**-0.5) for k, v in zip(ks, vs)], 10)
                except Exception as exc:  # e.g. a backend that does not take this mask
                    row[f"{name}_error"] = repr(exc)[:200]
            ref = sdpa(q, ks[0], vs[0], mask, d**-0.5)
            got = functools.partial(flex, blocks=flex_blocks(s, kv, dev))(q, ks[0], vs[0], mask, d**-0.5)
            row["flex_max_abs_diff"] = float((got.float() - ref.float()).abs().max())
            rep.add("attention", row)


def section_readwait(rep, engine, prompts, nodes: int) -> None:
    """Event-timed overhead of ``nodes``-node steps (GPU), the host blocking in the sync or polling, alternately."""
    if not engine.runner.enabled:
        return
    saved = engine.spin_read
    for rnd in range(2):
        for spin in (False, True):
            engine.spin_read = spin
            for ctx, prompt in prompts.items():
                dec = StaticDecoder(engine, "bastion", TreePolicy(budget=nodes))
                dec.generate(prompt, 6)  # captures
                rep.add("readwait", {"round": rnd, "spin": spin, "context": ctx, "nodes": nodes,
                                     **event_medians(dec, prompt, 16)})
    engine.spin_read = saved


def section_trace(rep, engine, prompt, nodes: int, out: Path) -> None:
    """Chrome trace (host and GPU) of a few BASTION steps: where the GPU waits for the host."""
    import gzip

    from torch.profiler import ProfilerActivity, profile

    dec = StaticDecoder(engine, "bastion", TreePolicy(budget=nodes))
    dec.generate(prompt, 8)  # captures outside the trace
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        res = dec.generate(prompt, 10)
    raw = out / f"trace_{nodes}.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb") as dst:
        dst.write(src.read())
    raw.unlink()
    rep.add("trace", {"nodes": nodes, "steps": len(res.steps), "file": raw.name + ".gz"})


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--contexts", default="512,4096")
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--sections", default="phases,variants,attention,ar,overhead")
    ap.add_argument("--out", default="results/tree_phase")
    ap.add_argument("--drafters", default="fused",
                    help="comma list: 'fused' (the compiled engine's drafter functions), 'plain' (the drafter "
                         "module); the sections run once for each, after a 'drafter' row")
    return ap


def _section(sec: str, rep, engine, prompts: dict, args: argparse.Namespace, out: Path) -> None:
    """One section on ``engine``; ``prompts`` maps each context to its random prompt."""
    shortest, longest, device, target = min(prompts), max(prompts), engine.device, engine.target
    if sec == "phases":
        section_phases(rep, engine, prompts[shortest], args.nodes)
    elif sec == "variants":
        section_variants(rep, engine, prompts[shortest], args.nodes)
    elif sec == "readwait":
        section_readwait(rep, engine, prompts, args.nodes)
    elif sec == "trace":
        section_trace(rep, engine, prompts[longest], args.nodes, out)
    elif sec == "attention":
        section_attention(rep, engine, list(prompts))
    elif sec == "ar":  # the compiled engine, then the same with attention left uncompiled
        peaks = measure_peaks(device, engine.dtype)
        engine.runner = GraphRunner(device, enabled=True)
        section_ar(rep, target, {"compiled": engine}, prompts, peaks, 32)
        attend, engine.fused.attend = engine.fused.attend, grouped_attention
        engine.runner = GraphRunner(device, enabled=True)
        section_ar(rep, target, {"compiled_plain_attention": engine}, prompts, peaks, 32)
        engine.fused.attend, engine.runner = attend, GraphRunner(device, enabled=True)
    elif sec == "overhead":
        engine.runner = GraphRunner(device, enabled=True)
        section_overhead(rep, {"compiled": engine}, prompts, 16)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    out, sections = Path(args.out), args.sections.split(",")
    modes = args.drafters.split(",")
    unknown = [m for m in modes if m not in ("fused", "plain")]
    if unknown:
        raise SystemExit(f"--drafters: unknown mode {unknown[0]!r}; use fused and/or plain")
    rep = Report(out)
    gpu = torch.cuda.is_available()
    device, dtype = torch.device("cuda" if gpu else "cpu"), torch.bfloat16 if gpu else torch.float32
    t0 = time.perf_counter()
    model, drafter = random_pair(args.shape, device, dtype)
    contexts = [int(c) for c in args.contexts.split(",")]
    gen = torch.Generator().manual_seed(0)
    prompts = {c: torch.randint(0, model.config.vocab_size - 2, (c,), generator=gen).tolist() for c in contexts}
    engine = StaticEngine(Target(model), drafter, max_context=max(contexts) + 2048, n_max=1024, fused=True)
    rep.add("setup", {"gpu": torch.cuda.get_device_name() if gpu else "cpu", "torch": torch.__version__, "build_s": round(time.perf_counter() - t0, 1)})
    drafts = engine.proposers["dflash"]
    fused_drafter = drafts.fused_drafter
    for mode in modes:
        drafts.fused_drafter = fused_drafter if mode == "fused" else None
        engine.runner = GraphRunner(device, enabled=True)  # no graph captured with the other drafter
        rep.add("drafter", {"mode": mode})
        for sec in sections:
            t1 = time.perf_counter()
            try:
                _section(sec, rep, engine, prompts, args, out)
            except Exception as exc:  # keep what the other sections measured
                import traceback

                traceback.print_exc()
                rep.add("errors", {"section": sec, "error": repr(exc)[:500]})
            rep.add("timing", {"section": sec, "seconds": round(time.perf_counter() - t1, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
