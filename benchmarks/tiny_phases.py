"""Where a decode step of the bundled tiny pair goes, per phase, on the engine you name.

Real weights and real prompts (the stdlib-heldout set), so acceptance is the pair's own;
every phase is timed with a device synchronisation on both sides (``collect_stats``), so
the phases add up to the step; with ``--events`` (CUDA) by events instead, so the decode
runs as it does untimed and the GPU's wait for the host falls in the phase it
interrupts.  Fixed BASTION budgets need no calibration; the adaptive rules (``bastion:``
and ``bastion_plus:``, no budget) take their costs from ``--calibration``.  Every method
but AR gets a row for the prompts' first drafts (each takes in the whole prompt; for
``bastion_plus`` at T > 0 not always at a prompt's first step), and one whose other steps
do not all draft a row for those that draft and one for the others.

    python -m benchmarks.tiny_phases --engine compiled --threads 1 \\
        --methods ar:,dflash:,bastion:8,bastion:16,bastion:32
    python -m benchmarks.tiny_phases --engine compiled --threads 1 --temperature 1 \\
        --calibration results/<hardware>/tiny/calibration_sampled.json --methods ar:,bastion_plus:
    python -m benchmarks.tiny_phases --engine compiled --device cuda --threads 0 --prompts 8 --passes 2 \\
        --n-min 32 --calibration results/<hardware>/tiny/calibration.json --methods ar:,bastion:,eagle3:3/1/5
    python -m benchmarks.tiny_phases --engine compiled --device cuda --threads 0 --prompts 12 --events \\
        --n-min 32 --calibration results/<hardware>/tiny/calibration.json --methods ar:,dflash:,bastion:
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bastion.calibration.store import Calibration
from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.factory import Engine
from bastion.engines.graphs import CAPTURES
from bastion.models import registry as models
from bastion.speculative.policy import TreePolicy

PHASES = ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="compiled", choices=("eager", "static", "compiled"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on a CPU (0: leave torch's default)")
    ap.add_argument("--prompts", type=int, default=2, help="measured prompts (after one warm-up prompt)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0, help="sampled with seed i for the i-th prompt")
    ap.add_argument("--calibration", help="calibration.json of this device: the adaptive rules' costs")
    ap.add_argument("--n-min", type=int, default=16, help="the adaptive rules' minimum tree")
    ap.add_argument("--methods", default="ar:,dflash:,bastion:8,bastion:16,bastion:32",
                    help="method:budget pairs; an empty budget for ar, dflash and the adaptive rules; "
                         "eagle3:depth/top-k/tokens (e.g. eagle3:3/1/5) for the bundled EAGLE-3 head")
    ap.add_argument("--events", action="store_true",
                    help="time the phases by CUDA events, the decode unsynchronised (CUDA only)")
    ap.add_argument("--passes", type=int, default=0,
                    help="decode the measured prompts this many times first, unsynchronised, and print each pass's rate")
    return ap


def _eagle3_engine(args: argparse.Namespace, target, drafter, tree: str, dtype: torch.dtype) -> Engine:
    """An engine with the bundled EAGLE-3 head bound at ``tree`` (depth/top-k/tokens)."""
    from bastion.models.eagle3 import Eagle3Drafter
    from bastion.runs.checks import check_eagle3_tree
    from bastion.speculative.methods import Eagle3Policy

    head = models.load_eagle3_head(models.resolve_eagle3("tiny"), target, "tiny", dtype, args.device)
    policy = Eagle3Policy(*check_eagle3_tree(tree, head.config.draft_vocab_size, "--methods eagle3:"))
    return Engine(args.engine, target, drafter, n_max=256, eagle3=Eagle3Drafter.bind(head, target, policy))


def _rates(decoder, prompts: list, args: argparse.Namespace, seeded) -> str:
    """Tokens per second of each unsynchronised pass over ``prompts`` (decode seconds only)."""
    rates = []
    for _ in range(args.passes):
        results = [decoder.generate(p, args.tokens, args.temperature, [], seeded(i)) for i, p in enumerate(prompts, 1)]
        rates.append(sum(len(r.output_ids) for r in results) / sum(r.decode_seconds for r in results))
    return ", ".join(f"{r:,.0f}" for r in rates)


def _decoder(engine: Engine, method: str, budget: str, args: argparse.Namespace, cal: Calibration | None):
    if budget or method in ("ar", "dflash"):
        return engine.decoder(method, TreePolicy(budget=int(budget) if budget else 16))
    if cal is None:
        raise SystemExit(f"{method} without a budget is the adaptive rule: give --calibration (its costs)")
    policy = TreePolicy(n_min=args.n_min, n_max=max(args.n_min, cal.max_s))
    return engine.decoder(method, policy, cal.cost_model, cal.overheads)


def _row(label: str, steps: list, tokens: int) -> str:
    phases = [1e3 * statistics.mean(getattr(s, k) for s in steps) for k in PHASES]
    return f"{label:<20} {len(steps):>6} {tokens / len(steps):>5.2f} {sum(phases):>7.2f} " + \
        " ".join(f"{v:>7.2f}" for v in phases)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.events and not args.device.startswith("cuda"):
        raise SystemExit(f"--events times phases by CUDA events: give --device cuda, not {args.device}")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    target = models.load_target(str(models.tiny_dir("target")), dtype, args.device)
    drafter = models.load_drafter(str(models.tiny_dir("drafter")), dtype, args.device)
    tok = models.load_tokenizer(str(models.tiny_dir("target")))
    engine = Engine(args.engine, target, drafter, n_max=256)
    cal = Calibration.load(args.calibration) if args.calibration else None
    builder = PromptBuilder(tok)
    prompts = [builder.encode([], p["turns"][0]) for p in datasets.load_prompts("stdlib-heldout")[: args.prompts + 1]]
    print(f"engine {args.engine}, {args.device}, torch threads {torch.get_num_threads()}, T = {args.temperature}, "
          f"{args.prompts} prompts x {args.tokens} tokens; ms per step")
    print(f"{'method':<20} {'steps':>6} {'tau':>5} {'step':>7} " + " ".join(f"{p[2:]:>7}" for p in PHASES))
    for item in args.methods.split(","):
        method, _, budget = item.partition(":")
        if method == "eagle3":
            decoder = _eagle3_engine(args, target, drafter, budget or "3/1/5", dtype).decoder("eagle3")
        else:
            decoder = _decoder(engine, method, budget, args, cal)
        seeded = lambda i: torch.Generator(device=args.device).manual_seed(i)  # noqa: E731  sampling draws on the device
        decoder.generate(prompts[0], 32, args.temperature, [], seeded(0))  # warm-up
        if args.passes:
            print(f"{item}: tok/s of {args.passes} passes over the prompts: {_rates(decoder, prompts[1:], args, seeded)}")
        firsts, later, tokens = [], [], 0
        captured = dict(CAPTURES)  # a graph captured inside a timed step counts in its phase
        for i, p in enumerate(prompts[1:], 1):
            res = decoder.generate(p, args.tokens, args.temperature, [], seeded(i),
                                   collect_stats="events" if args.events else True)
            first = next((j for j, s in enumerate(res.steps) if s.drafted), None)  # takes in the prompt
            firsts += [res.steps[first]] if first is not None else []
            later += [s for j, s in enumerate(res.steps) if j != first]
            tokens += len(res.output_ids)
        label = method + (f" {budget}" if method == "eagle3" else f" b{budget}" if budget else "")
        print(_row(label, firsts + later, tokens))
        if method != "ar":
            _split_rows(firsts, later)
        if CAPTURES["count"] > captured["count"]:
            print(f"  ({CAPTURES['count'] - captured['count']} CUDA graphs captured inside the timed steps, "
                  f"{CAPTURES['seconds'] - captured['seconds']:.2f} s: the rows above include them)")
    return 0


def _split_rows(firsts: list, later: list) -> None:
    """The prompts' first drafts apart (each takes in the whole prompt), then the other steps
    with a draft and those without, where a method has both."""
    if firsts:
        print(_row("  first drafts", firsts, sum(s.committed for s in firsts)))
    drafted = [s for s in later if s.drafted]
    if 0 < len(drafted) < len(later):
        others = [s for s in later if not s.drafted]
        print(_row("  others, drafted", drafted, sum(s.committed for s in drafted)))
        print(_row("  others, no draft", others, sum(s.committed for s in others)))


if __name__ == "__main__":
    t0 = time.perf_counter()
    rc = main()
    print(f"({time.perf_counter() - t0:.0f} s)")
    raise SystemExit(rc)
