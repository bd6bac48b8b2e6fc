#!/usr/bin/env bash
# What the adaptive rule's tree phase costs on a GPU beyond a fixed tree's: the tiny pair is
# calibrated through the CLI (n_min 32, small grid), then `python -m benchmarks.rank_graphs`
# decodes with the rule and with fixed trees and replays every captured step graph alone
# (GPU µs a replay), with the kernel count of the `rank` graphs; the table goes to
# $OUT/rank_graphs.md.  Extra arguments go to benchmarks.rank_graphs.
# Run from the repository root on the GPU machine, with the wheels in .whl:
#     OUT=out bash tools/gpu/rank_graphs.sh
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
timeout ${CAL_LIMIT:-200} python3 -m bastion.benchmark --model tiny --dataset stdlib-heldout --max-samples 2 --max-new-tokens 32 \
  --methods bastion --n-min 32 --calib-grid small --cache-dir /tmp/rg_cache --output /tmp/rg_cal.jsonl > "$OUT/calibrate.log" 2>&1
echo "== calibration rc=$?" | tee "$OUT/rank_graphs.md"
cal=$(find /tmp/rg_cache -name "calibration*.json" | head -1)
timeout ${RG_LIMIT:-240} python3 -m benchmarks.rank_graphs "$cal" "$@" 2>"$OUT/rank_graphs.err" | tee -a "$OUT/rank_graphs.md"
echo "== rank_graphs rc=$?" | tee -a "$OUT/rank_graphs.md"
