#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 17: the budget rule's bucket choice
# (the count goes to the better bucket beside it) on the GPU.  C, the rule's Triton count
# kernel compiled against the torch reference (tests/speculative/test_count_kernel.py, which
# draws counts between buckets); E, the tiny experiment end to end with the job worker
# (calibration and adaptive BASTION through the kernel), with every step's tree size.
# A, outputs equal AR's in fp32 with the adaptive rule (no fixed budget: the count kernel picks
# every tree) on the compiled engine, both offline sets, calibrated in the call; T, the
# Qwen3-8B-shaped phases and steps again (benchmarks.tree_phase, as session 16's T).
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
[[ " $PARTS " == *" A "* ]] && for ds in stdlib-heldout humaneval-pkg; do
  PYTHONPATH=/tmp/site:$PWD timeout ${EQ_LIMIT:-200} python3 -m bastion.benchmark --model tiny --dataset $ds --max-samples 8 \
    --max-new-tokens 128 --methods ar,dflash,bastion --dtype float32 --engine compiled --calib-grid small \
    --cache-dir /tmp/cal17 --output "$OUT/eqa_$ds.jsonl" > "$OUT/eqa_$ds.log" 2>&1
  echo "== adaptive equality $ds rc=$?"; tail -n 5 "$OUT/eqa_$ds.log"; PYTHONPATH=/tmp/site:$PWD python3 tools/gpu/same_as_ar.py "$OUT/eqa_$ds.jsonl"
  python3 -c "import collections,json,sys;print('tree sizes',sorted(collections.Counter(s for l in open(sys.argv[1]) for r in [json.loads(l)] if r['method']=='bastion' for s in r['tree_sizes']).items()))" "$OUT/eqa_$ds.jsonl"
done
[[ " $PARTS " == *" T "* ]] && { PYTHONPATH=/tmp/site:$PWD timeout ${TP_LIMIT:-220} python3 -m benchmarks.tree_phase --shape qwen3-8b \
  --contexts 512,4096 --nodes 32 --sections ${SECTIONS:-phases,overhead,ar} --drafters fused --out "$OUT/tp" > "$OUT/tp.log" 2>&1
  echo "== tree_phase rc=$?"; PYTHONPATH=/tmp/site:$PWD python3 tools/gpu/tree_phase_summary.py "$OUT/tp.log"; }
(cd "$OUT" && tar czf /tmp/session17_out.tgz --exclude=session17_out.tgz . && find . -mindepth 1 -delete && mv /tmp/session17_out.tgz .)
