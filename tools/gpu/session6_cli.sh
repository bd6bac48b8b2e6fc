#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 6:
#   1. the tiny pair through the CLI on engine auto (= compiled on CUDA) and static,
#      both evaluation sets, 16 prompts x 128 new tokens, AR / DFlash / BASTION;
#   2. the compiled engine's latency grid for the Qwen3-8B shape reaching 32k contexts,
#      with every measured point (static_calibration_points.json) for offline refits.
set -uo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
{ date -u; git log -1 --format='%h %s' 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch,transformers;print('torch',torch.__version__,'transformers',transformers.__version__)"; } > "$OUT/env.txt" 2>&1
stage() { echo "== $1 rc=$2 $3 s" | tee -a "$OUT/env.txt"; }
t=$SECONDS
for eng in auto static; do
  for ds in stdlib-heldout humaneval-pkg; do
    timeout ${CLI_LIMIT:-150} python3 -m bastion.benchmark --model tiny --dataset $ds --max-samples 16 --max-new-tokens 128 \
      --methods ar,dflash,bastion --engine $eng --calib-grid small --accept-calibration-error --cache-dir /tmp/cache_$eng \
      --output "$OUT/tiny_${eng}_${ds}.jsonl" > "$OUT/tiny_${eng}_${ds}.log" 2>&1
    stage "tiny $eng $ds" $? $((SECONDS - t)); grep -A6 "^=====" "$OUT/tiny_${eng}_${ds}.log" | head -8
  done
done
t=$SECONDS
timeout ${CALIB_LIMIT:-200} python3 -m benchmarks.static_engine --sections calib --engines compiled --contexts 512 \
  --calib-context 32768 --out /tmp/calib > "$OUT/calib.log" 2>&1
stage calib32k $? $((SECONDS - t)); cp /tmp/calib/*.json "$OUT/" 2>/dev/null
ls -la "$OUT"
