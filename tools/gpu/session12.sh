#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 12: the compiled engine's drafter
# functions against the drafter module, compiled by torch.compile on CUDA, and the path
# ranking's and node count's Triton kernels through fused.run_triton (pytest); then the
# Qwen3-8B-shaped step (random weights, bf16) with the drafter fused and as its module
# (benchmarks.tree_phase: every step graph replayed alone, and event-timed phases of 32-
# and 512-node BASTION steps and DFlash steps at contexts 512 and 4096).  Needs the wheels
# in .whl (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch,transformers;print('torch',torch.__version__,'transformers',transformers.__version__)"; } > "$OUT/env.txt" 2>&1
timeout ${TEST_LIMIT:-150} python3 -m pytest -q -p no:cacheprovider tests/engines/test_fused_drafter.py \
  tests/speculative/test_count_kernel.py tests/speculative/test_path_rank.py -k "not test_triton_kernels_equal" \
  > "$OUT/gpu_tests.log" 2>&1
echo "== gpu tests rc=$?" | tee -a "$OUT/gpu_tests.log"; tail -3 "$OUT/gpu_tests.log"
timeout ${TP_LIMIT:-360} python3 -m benchmarks.tree_phase --shape qwen3-8b --contexts 512,4096 --nodes 32 \
  --sections phases,overhead --drafters fused,plain --out "$OUT/tp" > "$OUT/tp.log" 2>&1
echo "== tree_phase rc=$?"
grep -i "warn\|error" "$OUT/tp.log" | head -5
python3 tools/gpu/tree_phase_summary.py "$OUT/tp.log"
