#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 13: the Qwen3-8B-shaped step (random
# weights, bf16): every step graph replayed alone with kernel tables (32 nodes), the AR step
# at contexts 512 and 4096 (with session 12's recompile-limit fix, not measured since), and
# event-timed phases.  Needs the wheels in .whl (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout ${TP_LIMIT:-480} python3 -m benchmarks.tree_phase --shape qwen3-8b --contexts 512,4096 --nodes 32 \
  --sections phases,ar,overhead --drafters fused --out "$OUT/tp" > "$OUT/tp.log" 2>&1
echo "== tree_phase rc=$?"
python3 tools/gpu/tree_phase_summary.py "$OUT/tp.log"
grep '"section": "ar"' "$OUT/tp.log" | cut -c1-400
