"""Print, for each method of a ``bastion.benchmark --output`` file, how many outputs equal AR's."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str) -> int:
    outs: dict[str, dict[tuple, list[int]]] = defaultdict(dict)
    for line in open(path):
        row = json.loads(line)
        outs[row["method"]][(row["prompt_index"], row["turn"])] = row["output_ids"]
    ar = outs.pop("ar")
    bad = 0
    for method, got in outs.items():
        same = sum(got[key] == ar.get(key) for key in got)
        bad += same != len(got)
        print(f"{method}: {same} of {len(got)} outputs equal AR's")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
