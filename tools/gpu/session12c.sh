#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 12: the target's fused layers with
# the K/V write inside the compiled function and attention without copies of q and the mask.
#   1. outputs: the tiny pair in fp32 on the compiled engine, AR, DFlash and BASTION (32
#      nodes), every output compared with AR's;
#   2. the Qwen3-8B-shaped step (random weights, bf16): every step graph replayed alone with
#      kernel tables (32 nodes, context 512), the AR step (contexts 512 and 4096), event-
#      timed phases of 32- and 512-node BASTION and DFlash steps.
# Needs the wheels in .whl (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout ${EQ_LIMIT:-150} python3 -m bastion.benchmark --model tiny --dataset stdlib-heldout --max-samples 8 --max-new-tokens 128 \
  --methods ar,dflash,bastion --budget 32 --dtype float32 --engine compiled --output "$OUT/eq.jsonl" > "$OUT/eq.log" 2>&1
echo "== equality rc=$?"; grep -A5 "^=====" "$OUT/eq.log" | head -6
python3 tools/gpu/same_as_ar.py "$OUT/eq.jsonl"
timeout ${TP_LIMIT:-330} python3 -m benchmarks.tree_phase --shape qwen3-8b --contexts 512,4096 --nodes 32 \
  --sections phases,ar,overhead --drafters fused --out "$OUT/tp" > "$OUT/tp.log" 2>&1
echo "== tree_phase rc=$?"
python3 tools/gpu/tree_phase_summary.py "$OUT/tp.log"
grep '"section": "ar"' "$OUT/tp.log" | cut -c1-300
