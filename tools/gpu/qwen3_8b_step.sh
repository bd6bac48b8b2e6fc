#!/usr/bin/env bash
# The compiled engine's steps at the Qwen3-8B shape (random bf16 weights, so costs per step,
# not speedups): `python -m benchmarks.tree_phase --shape qwen3-8b --nodes 32`, whose sections
# are the AR step against the copy rate measured in the same process (`ar`), event-timed
# phases of 32-node BASTION and DFlash steps with the untimed step beside them (`overhead`),
# and every step graph replayed alone with its kernel table (`phases`).  The summary table
# (benchmarks.tree_phase_summary) goes to $OUT/steps.md, the raw rows to $OUT/tp.log and
# $OUT/tp/.  Knobs: CONTEXTS (default 512,4096), SECTIONS (default phases,overhead,ar),
# DRAFTERS (default fused; `fused,plain` adds the drafter module's own layers), TP_LIMIT.
# Run from the repository root on the GPU machine (no wheels needed):
#     OUT=out bash tools/gpu/qwen3_8b_step.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
} | tee "$OUT/env.txt"
timeout ${TP_LIMIT:-330} python3 -m benchmarks.tree_phase --shape qwen3-8b --contexts ${CONTEXTS:-512,4096} --nodes 32 \
  --sections ${SECTIONS:-phases,overhead,ar} --drafters ${DRAFTERS:-fused} --out "$OUT/tp" > "$OUT/tp.log" 2>&1
echo "== tree_phase rc=$?" | tee -a "$OUT/env.txt"
python3 -m benchmarks.tree_phase_summary "$OUT/tp.log" | tee "$OUT/steps.md"
