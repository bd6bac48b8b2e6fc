"""Per-phase step times by tree size from decode records made with ``--step-times``.

    python -m benchmarks.step_phases results.jsonl [more.jsonl ...]

Prints one markdown table per file and method: throughput, τ, and each phase's mean
(milliseconds) for every tree size that occurs, so fixed budgets and the adaptive rule
can be compared phase by phase.  The records come from ``python -m bastion.benchmark
... --step-times --output results.jsonl`` (one run per policy: ``--budget N`` or the rule).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

PHASES = ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit")


def table(path: str) -> str:
    by_method: dict[str, list[dict]] = defaultdict(list)
    with open(path) as fh:
        for line in fh:
            rec = json.loads(line)
            by_method[rec["method"]].append(rec)
    out = []
    for method, recs in by_method.items():
        tokens = sum(r["num_output_tokens"] for r in recs)
        seconds = sum(r["decode_seconds"] for r in recs)
        steps = defaultdict(list)  # tree size -> [(accepted, phases...)]
        for r in recs:
            for i, size in enumerate(r["tree_sizes"]):
                steps[size].append([r["acceptance_lengths"][i]] + [r[p][i] for p in PHASES])
        out.append(f"### {path.rsplit('/', 1)[-1]}: {method}, {tokens / seconds:.1f} tok/s\n")
        out.append("| nodes | steps | τ | " + " | ".join(p[2:] + " (ms)" for p in PHASES) + " | step (ms) |")
        out.append("|---:|---:|---:|" + "---:|" * (len(PHASES) + 1))
        for size in sorted(steps):
            rows = steps[size]
            means = [sum(col) / len(rows) for col in zip(*rows)]
            cells = " | ".join(f"{1e3 * m:.3f}" for m in means[1:])
            out.append(f"| {size} | {len(rows)} | {means[0]:.2f} | {cells} | {1e3 * sum(means[1:]):.3f} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print("\n".join(table(p) for p in sys.argv[1:]))
