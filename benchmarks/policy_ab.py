"""Tree policies compared in one process, prompt by prompt: how `n_min: auto` on a CPU was chosen.

    OMP_NUM_THREADS=1 python -m benchmarks.policy_ab --calibration results/cpu-amd-epyc/tiny/calibration.json \
        --variants ar,dflash,nmin=8,nmin=16,fixed=16 [--reps 2] [--dtype float32] [--curve]

Separate decode runs on a small shared CPU drift by 10-20% between them, more than the
differences between tree policies, so every variant here decodes each prompt right after
the others, for ``--reps`` rounds, on the default run's own prompts (the tiny experiment's
sets, ``max_samples`` and seed from config.yaml's defaults: 8 prompts each, 128 new
tokens; ``--sets`` takes other datasets or prompt files).  Variants: ``ar``, ``dflash``,
``nmin=N`` (BASTION's adaptive rule with that minimum tree and bucket width, on the given
calibration), ``free=N`` (the same rule and minimum without buckets: any count from N up),
``fixed=N`` (BASTION's N most probable nodes) and ``plus=N`` (``bastion_plus``, whose CPU
trees at T = 0 take the rule's count from N up).  ``--curve`` first prints the engine's verification time by tree size
at context 384 (median of 7 rounds of 5), the shape the rule's cost model smooths over.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict

import torch

from bastion.calibration.grid import Grid, probe_grid
from bastion.calibration.store import Calibration
from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.speculative.policy import TreePolicy

SETS = ("humaneval-pkg", "stdlib-heldout")
CURVE_SIZES = (1, 4, 8, 12, 16, 20, 24, 32, 48, 64)


def verify_curve(engine: Engine, context: int = 384, rounds: int = 7, repeats: int = 5) -> dict[int, float]:
    """Median seconds of one verification of ``s`` chain tokens at ``context``, by ``s``: the
    calibration grid's own probe (:func:`~bastion.calibration.grid.probe_grid`) at one context."""
    grid = Grid(CURVE_SIZES, (context,), warmup=1, repeats=repeats, rounds=rounds)
    return {row["s"]: row["latency_s"] for row in probe_grid(engine.verify_probe(), grid)}


def decoder_for(engine: Engine, variant: str, cal: Calibration):
    if variant in ("ar", "dflash"):
        return engine.decoder(variant)
    kind, _, value = variant.partition("=")
    if kind == "nmin":
        policy = TreePolicy(n_min=int(value), n_max=max(int(value), cal.max_s))
    elif kind == "free":
        policy = TreePolicy(n_min=int(value), n_max=max(int(value), cal.max_s), rounding=None)
    elif kind == "fixed":
        policy = TreePolicy(budget=int(value))
    elif kind == "plus":  # bastion_plus, whose CPU trees at T = 0 count from n_min in steps of one
        return engine.decoder("bastion_plus", TreePolicy(n_min=int(value), n_max=max(int(value), cal.max_s)),
                              cal.cost_model, cal.overheads)
    else:
        raise SystemExit(f"unknown variant {variant!r}: use ar, dflash, nmin=N, free=N, fixed=N or plus=N")
    return engine.decoder("bastion", policy, cal.cost_model, cal.overheads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", required=True, help="calibration.json of this device and dtype (the rule's costs)")
    ap.add_argument("--variants", default="ar,dflash,nmin=8,nmin=16,fixed=16")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--max-samples", type=int, default=8)
    ap.add_argument("--sets", default=",".join(SETS), help="datasets or prompt files (default: the tiny experiment's)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--curve", action="store_true", help="print the verification time by tree size first")
    args = ap.parse_args()
    variants = args.variants.split(",")
    if variants[0] != "ar":
        raise SystemExit("--variants must start with ar (the speedup baseline)")
    dtype = getattr(torch, args.dtype)
    target = models.load_target(str(models.tiny_dir("target")), dtype, "cpu")
    drafter = models.load_drafter(str(models.tiny_dir("drafter")), dtype, "cpu")
    builder = PromptBuilder(models.load_tokenizer(str(models.tiny_dir("target"))), False)
    cal = Calibration.load(args.calibration)
    engine = Engine("compiled", target, drafter, n_max=256, max_context=4096)
    if args.curve:
        curve = verify_curve(engine)
        print("verification ms by tree size (context 384): "
              + ", ".join(f"{s}: {1e3 * t:.2f}" for s, t in curve.items()), flush=True)
    decoders = {v: decoder_for(engine, v, cal) for v in variants}
    sets = args.sets.split(",")
    prompts = [(name, builder.encode([], p["turns"][0]))
               for name in sets for p in datasets.load_prompts(name, args.max_samples, seed=0)]  # config.yaml seed: 0
    stats, sizes = _decode_all(decoders, prompts, args.reps, args.max_new_tokens)
    _print_table(stats, sizes, variants, sets)


def _decode_all(decoders: dict, prompts: list, reps: int, max_new_tokens: int) -> tuple[dict, dict]:
    """Every prompt by every variant in turn, ``reps`` times: per (variant, set) the totals [tokens, seconds,
    steps, committed] and the steps per tree size."""
    stats = defaultdict(lambda: [0, 0.0, 0, 0])
    sizes = defaultdict(Counter)  # tree size -> steps
    for _ in range(reps):
        for name, ids in prompts:
            for v, dec in decoders.items():
                res = dec.generate(ids, max_new_tokens, 0.0, (), torch.Generator().manual_seed(0))
                s = stats[(v, name)]
                s[0] += len(res.output_ids)
                s[1] += res.decode_seconds
                s[2] += len(res.steps)
                s[3] += sum(st.committed for st in res.steps)
                sizes[(v, name)].update(st.tree_size for st in res.steps)
    return stats, sizes


def _print_table(stats: dict, sizes: dict, variants: list[str], sets: list[str]) -> None:
    """One row per (set, variant): its rate, against AR and DFlash, τ, ms a step and tree sizes; then the sets' mean."""
    print("| set | variant | tok/s | x AR | x DFlash | τ | ms/step | tree sizes (steps) |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    x_ar = {v: 0.0 for v in variants}  # the sets' mean speedup over AR
    for name in sets:
        rate = {v: stats[(v, name)][0] / stats[(v, name)][1] for v in variants}
        for v in variants:
            x_ar[v] += rate[v] / rate["ar"] / len(sets)
            _, seconds, steps, committed = stats[(v, name)]
            vs_d = f"{rate[v] / rate['dflash']:.3f}" if "dflash" in rate else "-"
            print(f"| {name} | {v} | {rate[v]:.1f} | {rate[v] / rate['ar']:.2f} | {vs_d} | "
                  f"{committed / max(steps, 1):.2f} | {1e3 * seconds / max(steps, 1):.2f} | "
                  + ", ".join(f"{k}: {c}" for k, c in sorted(sizes[(v, name)].items())) + " |")
    print("\nx AR, the sets' mean: " + ", ".join(f"{v} {x:.3f}" for v, x in x_ar.items()))


if __name__ == "__main__":
    main()
