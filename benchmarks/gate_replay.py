"""The draft gate replayed on recorded decodes that drafted every step: what its stops and probes cost.

    python -m benchmarks.gate_replay --records t1_bastion.jsonl [--ratios 2.5,3,3.5] [--probes 1,2] [--waits 64,128]

The records are a method that drafts at every step (``--methods bastion --budget 32
--temperature 1 --output t1_bastion.jsonl`` with the CLI), so every output position has
a drafted step that covers it and what that step committed.  The replay runs
:class:`bastion.speculative.gate.DraftGate` over each prompt in turn, one gate for all of
them as a decoder keeps it: a drafted step at output position ``p`` commits what the
recorded step covering ``p`` committed, an AR step commits one token, and the gate reads a
step's count one step late, as the static engine does.  Costs are in AR steps: a drafted
step costs ``ratio`` of them (the tiny pair's at T = 1 about three on the 2-core CPU and
2.2-2.9 on an H100, docs/performance.md).

At T = 1 committed counts come in stretches (a predictable line, then free text), so the
replay keeps each prompt's order rather than drawing counts at random: a probe that lands
in a short predictable stretch pays, and what the gate drafts after it meets the text
after the stretch, as in decoding.  Printed per ratio and per ``probes_to_resume``: the
speedup over AR steps alone, the drafted steps, and the longest runs of drafted steps; with
``--waits``, per longest wait between probes as well.
"""

from __future__ import annotations

import argparse
from collections import Counter

from bastion.results.records import read_records
from bastion.speculative.gate import MAX_WAIT, DraftGate

NODES, CONTEXT = 32, 0  # the gate's cost callables below ignore both


def covering(commits: list[int]) -> list[int]:
    """For each output position, what the recorded step that covers it committed."""
    return [a for a in commits for _ in range(a)]


def replay(prompts: list[list[int]], ratio: float, probes: int, tokens: int, max_wait: int = MAX_WAIT) -> dict:
    """The gate over ``prompts`` (each one's :func:`covering` counts) for ``tokens`` each: speedup over AR
    steps, drafted and total steps, and the lengths of the runs of drafted steps."""
    gate = DraftGate(lambda c: 1.0, lambda n, c: ratio, probes_to_resume=probes, max_wait=max_wait)
    seconds = made_all = 0.0
    steps = 0
    spells: Counter = Counter()  # runs of drafted steps: length -> count
    for cover in prompts:
        gate.restart()
        made, pending, spell = 0, None, 0
        while made < tokens:
            draft = gate.drafts()  # a prompt's first step too: the tiny pair's prompts fit the wide buffer
            if pending is not None:  # the step before, read one step late
                gate.observe(pending, NODES, CONTEXT)
                pending = None
            if draft:
                got = cover[made] if made < len(cover) else 1
                seconds, spell, pending = seconds + ratio, spell + 1, got
            else:
                got, seconds = 1, seconds + 1.0
                if spell:
                    spells[spell] += 1
                spell = 0
            made, steps = made + got, steps + 1
        if pending is not None:
            gate.observe(pending, NODES, CONTEXT)
        if spell:
            spells[spell] += 1
        made_all += made
    drafted = sum(length * count for length, count in spells.items())
    return {"speedup": made_all / seconds, "drafted": drafted, "steps": steps, "spells": dict(sorted(spells.items()))}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gate_replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", required=True, nargs="+", help="records (.jsonl) of a method that drafts every step")
    p.add_argument("--method", default="bastion", help="whose records to replay")
    p.add_argument("--ratios", default="2.5,3,3.5", help="a drafted step's cost in AR steps")
    p.add_argument("--probes", default="1,2", help="probes_to_resume values to compare")
    p.add_argument("--waits", default=str(MAX_WAIT), help="longest waits between probes (AR steps) to compare")
    p.add_argument("--tokens", type=int, default=128, help="tokens a prompt decodes")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    records = [r for path in args.records for r in read_records(path) if r.get("method") == args.method]
    if not records:
        raise SystemExit(f"no records of method {args.method!r} in {', '.join(args.records)}")
    if any(not all(r["drafted"]) for r in records):
        raise SystemExit(f"the records of {args.method!r} skip drafts at some steps; replay a method "
                         "that drafts every step (bastion, dflash, or a fixed --budget)")
    prompts = [covering(r["acceptance_lengths"]) for r in records]
    print(f"{len(prompts)} prompts, {sum(len(r['acceptance_lengths']) for r in records)} recorded steps, "
          f"{args.tokens} tokens a prompt")
    print("| ratio | probes to resume | longest wait | x AR | drafted / steps "
          "| runs of drafted steps (length: count) |")
    print("|---:|---:|---:|---:|---|---|")
    for ratio in (float(x) for x in args.ratios.split(",")):
        for probes in (int(x) for x in args.probes.split(",")):
            for wait in (int(x) for x in args.waits.split(",")):
                r = replay(prompts, ratio, probes, args.tokens, wait)
                print(f"| {ratio:g} | {probes} | {wait} | {r['speedup']:.4f} | {r['drafted']} / {r['steps']} "
                      f"| {r['spells']} |")


if __name__ == "__main__":
    main()
