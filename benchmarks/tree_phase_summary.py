"""Print the drafter, phases and overhead rows of a ``benchmarks.tree_phase`` log as a short table.

    python -m benchmarks.tree_phase ... > tp.log; python -m benchmarks.tree_phase_summary tp.log
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    mode = "?"
    for line in open(path):
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        sec = row.pop("section")
        if "seconds" in row:  # a section's timing row (it carries the section's name)
            print(f"{mode:6} {sec} took {row['seconds']} s")
        elif sec == "drafter":
            mode = row["mode"]
            print(f"--- drafter {mode}")
        elif sec == "phases" and "us" in row:
            print(f"{mode:6} graph {row['method']:8} {row['graph']:40} {row['us']:9.1f} us  {row.get('launches', '')}")
            if row["graph"].startswith(("('draft'", "('verify'")) and row["method"] in ("bastion", "ar"):
                for k in row.get("top", []):
                    print(f"         {k['us']:8.1f} us x{k['count']:<4} {k['kernel'][:80]}")
        elif sec == "overhead" and "context" in row:
            labels = {"t_draft_ms": "draft(sync)", "t_draft_ms_events": "draft", "t_tree_ms_events": "tree",
                      "t_verify_ms_events": "verify", "overhead_ms_events": "other", "step_ms_events": "step",
                      "step_ms_no_sync": "step(untimed)"}
            vals = " ".join(f"{name}={row.get(key, float('nan')):.3f}" for key, name in labels.items())
            print(f"{mode:6} c={row['context']:5} {row['method']:8} n={row['nodes']:4} {vals}")
        else:  # errors, the AR section and anything else: as logged
            print(f"{mode:6} {sec}: {row}")


if __name__ == "__main__":
    main(sys.argv[1])
