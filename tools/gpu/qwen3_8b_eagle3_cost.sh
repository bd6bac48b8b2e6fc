#!/usr/bin/env bash
# EAGLE-3's step costs at the Qwen3-8B shape (random target and a random head of the public
# heads' shape, bf16): drafting per depth, the whole reference-tree draft (depth 7, top-k 10,
# 60 nodes), one 60-node verification and commit, at each context
# (`python -m benchmarks.eagle3_cost`; its tables go to $OUT/eagle3_cost.log, rows to $OUT/e3/).
# Run from the repository root on the GPU machine (no wheels needed):
#     OUT=out bash tools/gpu/qwen3_8b_eagle3_cost.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} | tee "$OUT/env.txt"
timeout ${E3_LIMIT:-150} python3 -m benchmarks.eagle3_cost --out "$OUT/e3" > "$OUT/eagle3_cost.log" 2>&1
echo "== eagle3_cost rc=$?" | tee -a "$OUT/env.txt"
