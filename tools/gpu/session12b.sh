#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 12: the tiny experiment end to end
# from a clean copy with the compiled engine's drafter functions (session6_e2e.sh, pipeline
# only), then what the Qwen3-8B-shaped draft and verification graphs are made of (kernel
# tables of benchmarks.tree_phase's phases section, 32 nodes, context 512).  Needs the
# wheels in .whl (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
E3_LIMIT=0 E2E_LIMIT=${E2E_LIMIT:-260} bash tools/gpu/session6_e2e.sh
cat /tmp/e2e/logs/benchmarks/calibrate_model/*/tiny.tsv /tmp/e2e/logs/benchmarks/decode_model/*/tiny/t0.tsv 2>/dev/null
cat "$OUT/speedup_table.md" 2>/dev/null | sed -n 3,8p
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout ${TP_LIMIT:-200} python3 -m benchmarks.tree_phase --shape qwen3-8b --contexts 512 --nodes 32 \
  --sections phases --drafters fused --out "$OUT/tp" > "$OUT/tp.log" 2>&1
echo "== tree_phase rc=$?"
python3 tools/gpu/tree_phase_summary.py "$OUT/tp.log"
