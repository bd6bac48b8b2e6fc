#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT): GPU time of every step graph of the
# Qwen3-8B-shaped compiled engine replayed alone (BASTION 32 nodes, DFlash, AR; context
# 512), with kernel tables of the draft and verification graphs.  Needs the wheels in .whl.
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout ${TP_LIMIT:-200} python3 -m benchmarks.tree_phase --shape qwen3-8b --contexts 512 --nodes 32 \
  --sections phases --drafters fused --out "$OUT/tp" > "$OUT/tp.log" 2>&1
echo "== tree_phase rc=$?"
python3 tools/gpu/tree_phase_summary.py "$OUT/tp.log" | grep -v "^fused  graph \(bastion\|dflash\)  ('\(select\|rank\|build\|commit\)"
