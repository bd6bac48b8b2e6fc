"""Static engine against eager on one GPU: steps, verification latency, calibration and equality, one table each.

Sections (``--sections``, comma list, run in this order):

  ar        AR step (ms) static vs eager at each context, and the share of weight streaming
  curve     verification latency C(s) static vs eager, s in --sizes, at each context
  overhead  per-step split of BASTION (fixed 512-node trees) and DFlash on the static engine
  calib     the static engine's calibration on the paper grid: fit, in-sample and held-out error
  equiv     T = 0 outputs, static vs eager, on the random Qwen3-8B-shaped pair
  tiny      the bundled tiny pair end to end (CLI), eager and static, outputs compared
  profile   (not by default) torch.profiler kernel table of 512-node BASTION steps

Throughput projections from these step costs are ``python -m benchmarks.projection``.

Random weights: acceptance is about one token per step, so 8B numbers are per-step costs.

    python -m benchmarks.static_engine --out results_dir
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from bastion.calibration.grid import Grid, fit_probe, probe_grid
from bastion.calibration.overheads import profile_overheads
from bastion.calibration.peaks import measure_peaks, median_time
from bastion.costmodel.roofline import ModelShape
from bastion.engines.eager import EagerDecoder, EagerProbe
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.engines.static_probe import StaticProbe
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from benchmarks.shapes import random_pair

class Report:
    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.data: dict = {}

    def add(self, section: str, row: dict) -> None:
        self.data.setdefault(section, []).append(row)
        print(json.dumps({"section": section, **row}), flush=True)
        (self.out / "static_engine.json").write_text(json.dumps(self.data, indent=1))


def _ms(x: float) -> float:
    return round(1e3 * x, 3)


def _per_step(res) -> float:
    return res.decode_seconds / max(len(res.steps), 1)


def section_ar(rep, target, engines, prompts, peaks, tokens):
    weights = sum(p.numel() * p.element_size() for n, p in target.model.named_parameters() if "embed_tokens" not in n)
    for ctx, prompt in prompts.items():
        row = {"context": ctx, "weight_bytes": weights}
        decoders = [("eager", EagerDecoder(target, "ar"))] + [(k, StaticDecoder(e, "ar")) for k, e in engines.items()]
        for name, dec in decoders:
            dec.generate(prompt, 8)  # warm: kernels, graphs for the first windows
            res = dec.generate(prompt, tokens)
            row[f"{name}_ms"] = _ms(_per_step(res))
            if name != "eager":
                row[f"{name}_share_of_copy_bw"] = round(weights / (row[f"{name}_ms"] / 1e3) / peaks.bytes_per_s, 3)
        rep.add("ar", row)


def section_curve(rep, target, engines, prompts, sizes, repeats):
    device = target.device
    for ctx, prompt in prompts.items():
        cache = target.new_cache(capacity=ctx + max(sizes) + 16)
        ids = torch.tensor([prompt], device=device)
        target.forward(ids, torch.arange(ctx, device=device)[None], None, cache, features=False)
        gen = torch.Generator().manual_seed(ctx)
        probe = EagerProbe(target)
        probe.cache = cache  # the real prompt's cache, prefilled above
        for s in sizes:
            toks = torch.randint(0, target.config.vocab_size - 2, (1, s), generator=gen).to(device)
            eager, _ = median_time(probe.probe(toks[0], ctx), device, 2, repeats)
            row = {"context": ctx, "s": s, "eager_ms": _ms(eager)}
            for name, engine in engines.items():
                row[f"{name}_ms"] = _ms(median_time(StaticProbe(engine).probe(toks[0], ctx), device, 2, repeats)[0])
            rep.add("curve", row)


def event_medians(dec, prompt, steps: int) -> dict:
    """Median event-timed phases (ms) of an otherwise untimed decode of ``steps`` steps (first two dropped)."""
    timed = dec.generate(prompt, steps + 3, collect_stats="events").steps[2:]
    row = {ph + "_ms_events": _ms(statistics.median(getattr(s, ph) for s in timed))
           for ph in ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit")}
    row["overhead_ms_events"] = _ms(statistics.median(s.t_other for s in timed))
    row["step_ms_events"] = _ms(statistics.median(s.t_other + s.t_draft + s.t_verify for s in timed))
    return row


def section_overhead(rep, engines, prompts, steps):
    """Per-step split of fixed-size BASTION trees and the DFlash chain, measured two ways.

    - ``*_ms``: each phase between two device synchronisations (host launch included).
    - ``*_ms_events`` (GPU): CUDA events at the phase boundaries of an otherwise untimed
      decode; the GPU's wait for the step's one host read falls in the tree phase.

    (A third measure, an untimed step minus the draft and verification graphs replayed
    alone, was dropped: the two replays' own run-to-run spread, up to 0.6 ms, swamped it.)
    """
    phases = ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit")
    for (name, engine), (ctx, prompt) in ((e, p) for e in engines.items() for p in prompts.items()):
        for method, policy in (("bastion", TreePolicy(budget=512)), ("bastion", TreePolicy(budget=32)), ("dflash", None)):
            dec = StaticDecoder(engine, method, policy)
            dec.generate(prompt, 6, collect_stats=True)  # graphs captured here
            timed = dec.generate(prompt, steps + 3, collect_stats=True).steps[2:]
            row = {"engine": name, "context": ctx, "method": method, "nodes": timed[0].tree_size, "steps": len(timed)}
            for ph in phases:
                row[ph + "_ms"] = _ms(statistics.median(getattr(s, ph) for s in timed))
            row["overhead_ms"] = round(row["t_tree_ms"] + row["t_accept_ms"] + row["t_commit_ms"], 3)
            untimed = dec.generate(prompt, steps + 3)
            row["step_ms_no_sync"] = _ms(_per_step(untimed))
            if engine.runner.enabled:
                row.update(event_medians(dec, prompt, steps))
            rep.add("overhead", row)


def section_profile(rep, engines, prompts, out):
    """Kernel table of a few 512-node BASTION steps (what the per-step overhead is made of)."""
    from torch.profiler import ProfilerActivity, profile

    ctx = min(prompts)
    for name, engine in engines.items():
        dec = StaticDecoder(engine, "bastion", TreePolicy(budget=512))
        dec.generate(prompts[ctx], 6)  # captures outside the profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            dec.generate(prompts[ctx], 8)
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=40)
        (out / f"profile_{name}.txt").write_text(table)
        print(table, flush=True)
        rep.add("profile", {"engine": name, "context": ctx, "table": f"profile_{name}.txt"})


def section_calib(rep, target, engine, grid_name, out, context=0):
    t0 = time.perf_counter()
    grid = Grid.named(grid_name).covering(context)
    rows = probe_grid(StaticProbe(engine), grid, progress=True)
    shape = ModelShape.from_config(target.config, torch.finfo(target.dtype).bits // 8)
    cost, report = fit_probe(rows, shape, measure_peaks(target.device, target.dtype), grid.holdout_every)
    (out / "static_calibration_points.json").write_text(json.dumps(rows))
    rep.add("calib", {"grid": grid_name, "points": len(rows), "seconds": round(time.perf_counter() - t0, 1),
                      **cost.to_dict(),  # the fit's own peaks (measured again here) and its parameters
                      **{k: round(v, 4) if isinstance(v, float) else v for k, v in report.items()}})
    for c in grid.c_values:  # held-out error per context length: long contexts must not be extrapolated
        held = [r for r in rows if r["c"] == c and r["heldout"]]
        errs = [abs(r["predicted_s"] - r["latency_s"]) / r["latency_s"] for r in held]
        if errs:
            rep.add("calib_by_context", {"context": c, "heldout_points": len(errs),
                                         "heldout_mape": round(statistics.mean(errs), 4), "heldout_max_ape": round(max(errs), 4)})
    return cost


def section_equiv(rep, target, drafter, engines, prompts, tokens, cost):
    memo: dict = {}  # eager outputs, computed once per (context, method)

    def eager_out(ctx, prompt, method, policy):
        if (ctx, method) not in memo:
            memo[ctx, method] = EagerDecoder(target, method, drafter, policy).generate(prompt, tokens).output_ids
        return memo[ctx, method]

    for (name, engine), (ctx, prompt) in ((e, p) for e in engines.items() for p in prompts.items()):
        ref = eager_out(ctx, prompt, "ar", None)
        cases = [("ar", None), ("dflash", None), ("bastion", TreePolicy(budget=64))]
        for method, policy in cases:
            eager = eager_out(ctx, prompt, method, policy)
            static = StaticDecoder(engine, method, policy).generate(prompt, tokens).output_ids
            rep.add("equiv", {"engine": name, "context": ctx, "method": method, "budget": policy and policy.budget,
                              "static_eq_eager": static == eager, "static_eq_ar": static == ref,
                              "first_diff": next((i for i, (a, b) in enumerate(zip(static, eager)) if a != b), None)})
        if cost is not None:
            policy = TreePolicy(n_min=32, n_max=1024)
            probe = prompt[:256]
            ov = profile_overheads(lambda n: StaticDecoder(engine, "bastion", TreePolicy(budget=n)), (64,), probe)
            static = StaticDecoder(engine, "bastion", policy, cost, ov).generate(prompt, tokens)
            rep.add("equiv", {"engine": name, "context": ctx, "method": "bastion-adaptive", "static_eq_ar": static.output_ids == ref,
                              "t_draft_ms": _ms(ov.t_draft), "t_other_ms": _ms(ov.t_other),
                              "tree_sizes": sorted({s.tree_size for s in static.steps})})


def section_tiny(rep, out, samples, tokens, device, dtype):
    recs = {}
    for engine in ("eager", "static"):
        path = out / f"tiny_{engine}_{dtype}.jsonl"
        cmd = [sys.executable, "-m", "bastion.benchmark", "--model", "tiny", "--dataset", "stdlib-heldout",
               "--max-samples", str(samples), "--max-new-tokens", str(tokens), "--device", device, "--dtype", dtype, "--n-min", "16",
               "--engine", engine, "--cache-dir", str(out / "cache"), "--output", str(path)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        print(proc.stdout[-2000:], proc.stderr[-1500:], flush=True)
        recs[engine] = {(r["prompt_index"], r["method"]): r for r in map(json.loads, path.read_text().splitlines())}
        for method in ("ar", "dflash", "bastion"):
            mine = [r for (_, m), r in recs[engine].items() if m == method]
            toks = sum(len(r["output_ids"]) for r in mine)
            secs = sum(r["decode_seconds"] for r in mine)
            acc = [a for r in mine for a in r["acceptance_lengths"]]
            rep.add("tiny", {"engine": engine, "dtype": dtype, "method": method, "prompts": len(mine), "tok_per_s": round(toks / secs, 1),
                             "tau": round(statistics.mean(acc), 3) if acc else None,
                             "wall_s": round(time.perf_counter() - t0, 1)})
    same = sum(recs["eager"][k]["output_ids"] == recs["static"][k]["output_ids"] for k in recs["eager"])
    ar_same = sum(r["output_ids"] == recs["static"][(i, "ar")]["output_ids"] for (i, m), r in recs["static"].items())
    rep.add("tiny", {"dtype": dtype, "static_eq_eager": f"{same}/{len(recs['eager'])}", "static_eq_static_ar": f"{ar_same}/{len(recs['static'])}"})


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--contexts", default="512,4096")
    ap.add_argument("--sizes", default="1,2,4,8,16,32,64,128,192,256,384,512,768,1024")
    ap.add_argument("--sections", default="ar,curve,overhead,calib,equiv,tiny")
    ap.add_argument("--grid", default="paper")
    ap.add_argument("--calib-context", type=int, default=0, help="calib: extend the grid's contexts to reach this length")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default="results/static_engine")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="auto", help="auto: bfloat16 on a GPU, float32 on the CPU")
    ap.add_argument("--engines", default="static", help="static engines to compare with eager: static, fused")
    ap.add_argument("--tiny-samples", type=int, default=20)
    ap.add_argument("--tiny-tokens", type=int, default=128)
    return ap


def _bench(args: argparse.Namespace, rep: Report, device: torch.device) -> dict:
    """The shape's random pair, its static engines, a random prompt per context and the device's peaks, recorded
    in the report's setup table."""
    dtype = getattr(torch, args.dtype) if args.dtype != "auto" else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    t0 = time.perf_counter()
    model, drafter = random_pair(args.shape, device, dtype)
    target = Target(model)
    contexts = [int(c) for c in args.contexts.split(",")]
    gen = torch.Generator().manual_seed(0)
    prompts = {c: torch.randint(0, model.config.vocab_size - 2, (c,), generator=gen).tolist() for c in contexts}
    n_max = 8192 if "calib" in args.sections.split(",") else 1024
    engines = {name: StaticEngine(target, drafter, max_context=max(contexts) + 2048, n_max=n_max, fused=name in ("fused", "compiled"))
               for name in args.engines.split(",")}
    peaks = measure_peaks(device, dtype)
    rep.add("setup", {"gpu": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__, "shape": args.shape,
                      "build_s": round(time.perf_counter() - t0, 1), "copy_TBps": round(peaks.bytes_per_s / 1e12, 3),
                      "matmul_TFLOPs": round(peaks.flops_per_s / 1e12, 1),
                      "attention_TFLOPs": round(peaks.attention_flops_per_s / 1e12, 1)})
    return {"target": target, "drafter": drafter, "engines": engines, "prompts": prompts, "peaks": peaks, "cost": None}


def _section(sec: str, rep: Report, bench: dict, args: argparse.Namespace, out: Path) -> None:
    """Runs one section; ``tiny`` first frees the 8B-shaped pair (``bench`` is emptied) for the tiny pair's CLI runs."""
    target, drafter, engines, prompts = bench.get("target"), bench.get("drafter"), bench.get("engines"), bench.get("prompts")
    if sec == "ar":
        section_ar(rep, target, engines, prompts, bench["peaks"], args.tokens)
    elif sec == "curve":
        section_curve(rep, target, engines, prompts, [int(s) for s in args.sizes.split(",")], args.repeats)
    elif sec == "overhead":
        section_overhead(rep, engines, prompts, 16)
    elif sec == "profile":
        section_profile(rep, engines, prompts, out)
    elif sec == "calib":
        bench["cost"] = section_calib(rep, target, next(iter(engines.values())), args.grid, out, args.calib_context)
    elif sec == "equiv":
        section_equiv(rep, target, drafter, engines, prompts, args.tokens, bench["cost"])
    elif sec == "tiny":
        del target, drafter, engines
        bench.clear()
        torch.cuda.empty_cache()
        section_tiny(rep, out, args.tiny_samples, args.tiny_tokens, args.device, args.dtype)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    out, sections = Path(args.out), args.sections.split(",")
    rep = Report(out)
    device = torch.device(args.device)
    if sections == ["tiny"]:  # no 8B-shaped model needed
        section_tiny(rep, out, args.tiny_samples, args.tiny_tokens, args.device, args.dtype)
        return 0
    bench = _bench(args, rep, device)
    for sec in sections:
        t1 = time.perf_counter()
        try:
            _section(sec, rep, bench, args, out)
        except Exception as exc:  # keep what the other sections measured
            import traceback

            traceback.print_exc()
            rep.add("errors", {"section": sec, "error": repr(exc)[:500]})
        live = next(iter(bench["engines"].values())) if bench else None  # the first static engine (None once freed)
        rep.add("timing", {"section": sec, "seconds": round(time.perf_counter() - t1, 1),
                           "graphs": len(live.runner.graphs) if live is not None else None,
                           "capture_s": round(live.runner.capture_seconds, 1) if live is not None else None,
                           "max_mem_GB": round(torch.cuda.max_memory_allocated() / 2**30, 1) if device.type == "cuda" else None})
    return 0


if __name__ == "__main__":
    sys.exit(main())
