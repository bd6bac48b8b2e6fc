#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT): what the adaptive rule's tree phase costs
# beyond a fixed tree's (tools/gpu/rank_graphs.py), after a calibration of the tiny pair
# through the CLI (n_min 32, small grid).  Needs the wheels in .whl (carry .whl).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
timeout ${CAL_LIMIT:-200} python3 -m bastion.benchmark --model tiny --dataset stdlib-heldout --max-samples 2 --max-new-tokens 32 \
  --methods bastion --n-min 32 --calib-grid small --cache-dir /tmp/rg_cache --output /tmp/rg_cal.jsonl > "$OUT/calibrate.log" 2>&1
echo "== calibration rc=$?" | tee "$OUT/rank_graphs.md"
cal=$(find /tmp/rg_cache -name "calibration*.json" | head -1)
timeout ${RG_LIMIT:-240} python3 tools/gpu/rank_graphs.py "$cal" "$@" 2>"$OUT/rank_graphs.err" | tee -a "$OUT/rank_graphs.md"
echo "== rank_graphs rc=$?" | tee -a "$OUT/rank_graphs.md"
