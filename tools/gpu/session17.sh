#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 17: the budget rule's bucket choice
# (the count goes to the better bucket beside it) on the GPU.  C, the rule's Triton count
# kernel compiled against the torch reference (tests/speculative/test_count_kernel.py, which
# draws counts between buckets); E, the tiny experiment end to end with the job worker
# (calibration and adaptive BASTION through the kernel), with every step's tree size.
# PARTS picks (default "C E").  Needs the wheels in .whl (`bash tools/gpu/wheels.sh`; carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
PARTS=${PARTS:-C E}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
[[ " $PARTS " == *" C "* ]] && { PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m pytest -q -p no:cacheprovider \
  tests/speculative/test_count_kernel.py 2>&1 | tail -n 5 | tee "$OUT/count_kernel.txt"; }
[[ " $PARTS " == *" E "* ]] && { RUNS=${RUNS:-worker} OUT=$OUT bash tools/gpu/worker_e2e.sh | tee "$OUT/e2e_summary.txt"
  PYTHONPATH=/tmp/site python3 - "$OUT" <<'PY' | tee "$OUT/tree_sizes.txt"
import collections, glob, json, sys
for path in sorted(glob.glob("/tmp/e2e_*/results/*/tiny/*/t0/bastion.jsonl") + glob.glob("results/*/tiny/*/t0/bastion.jsonl")):
    sizes = collections.Counter(s for line in open(path) for s in json.loads(line)["tree_sizes"])
    print(path, sorted(sizes.items()))
PY
}
(cd "$OUT" && tar czf /tmp/session17_out.tgz --exclude=session17_out.tgz . && find . -mindepth 1 -delete && mv /tmp/session17_out.tgz .)
