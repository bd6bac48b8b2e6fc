#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 14, call 3: (1) the fused drafter's
# CUDA tests (compiled by torch.compile against the drafter module, the block's K/V now
# inside the window); (2) outputs equal AR's, fp32, compiled engine, on both offline sets;
# (3) a third cold sample of the tiny experiment end to end with the job worker.
# Needs the wheels in .whl (carry .whl; pytest's are there too).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/engines/test_fused_drafter.py -k cuda 2>&1 | tail -3
for ds in stdlib-heldout humaneval-pkg; do
  timeout ${EQ_LIMIT:-120} python3 -m bastion.benchmark --model tiny --dataset $ds --max-samples 8 --max-new-tokens 128 \
    --methods ar,eagle3,dflash,bastion --budget 32 --dtype float32 --engine compiled --output "$OUT/eq_$ds.jsonl" > "$OUT/eq_$ds.log" 2>&1
  echo "== equality $ds rc=$?"; python3 tools/gpu/same_as_ar.py "$OUT/eq_$ds.jsonl"
done
RUNS=worker OUT=$OUT bash tools/gpu/worker_e2e.sh
