#!/usr/bin/env bash
# The compiled engine's latency grid at the Qwen3-8B shape (random bf16 weights), the paper
# grid extended to contexts of 32,768: `python -m benchmarks.static_engine --sections calib`.
# Writes the fit and its held-out error per context ($OUT/calib/static_engine.json) and every
# measured point ($OUT/calib/static_calibration_points.json), which
# `python -m benchmarks.cost_refit` refits offline (tests/costmodel/data/ holds one such file).
# Run from the repository root on the GPU machine (no wheels needed):
#     OUT=out bash tools/gpu/qwen3_8b_calibration.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} | tee "$OUT/env.txt"
timeout ${CALIB_LIMIT:-200} python3 -m benchmarks.static_engine --sections calib --engines compiled --contexts 512 \
  --calib-context ${CALIB_CONTEXT:-32768} --out "$OUT/calib" > "$OUT/calib.log" 2>&1
echo "== calibration rc=$?" | tee -a "$OUT/env.txt"
grep -i "held" "$OUT/calib.log" | tail -n 20
