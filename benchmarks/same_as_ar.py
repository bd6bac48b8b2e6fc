"""Print, for each method of a ``bastion.benchmark --output`` file, how many outputs equal AR's.

The comparison is the aggregation's own (``same_as_ar`` of :mod:`bastion.report.aggregate`);
exit status 1 when any greedy output differs.  Meant for fp32 runs at T = 0, where every
method must emit AR's tokens (tools/gpu/tiny_outputs_equal_ar.sh runs it on a GPU).

    python -m benchmarks.same_as_ar results.jsonl
"""

from __future__ import annotations

import json
import sys

from bastion.report.aggregate import per_prompt_rows


def main(path: str) -> int:
    rows = per_prompt_rows(json.loads(line) for line in open(path))
    bad = 0
    for method in sorted({r["method"] for r in rows} - {"ar"}):
        compared = [r["same_as_ar"] for r in rows if r["method"] == method and r["same_as_ar"] != ""]
        same = sum(map(bool, compared))
        bad += same != len(compared)
        print(f"{method}: {same} of {len(compared)} outputs equal AR's")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
