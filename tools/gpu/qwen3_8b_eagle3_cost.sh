#!/usr/bin/env bash
# EAGLE-3's draft and step costs, unfused (static engine) and fused (compiled engine), bf16:
# 1. kernels per draft (one replay of the captured draft graph, from the profiler's device
#    trace), the draft's GPU time and an AR step's, at the reference tree (depth 7, top-k 10,
#    60 nodes), context 512: the bundled tiny pair and a random Qwen3-8B-shaped target with a
#    random head of the public heads' shape (`python -m benchmarks.eagle3_draft_kernels`,
#    rows in $OUT/kernels-tiny/ and $OUT/kernels-qwen3-8b/);
# 2. at the Qwen3-8B shape: drafting per depth, one 60-node verification and commit, and the
#    whole decode step, at each context (`python -m benchmarks.eagle3_cost`; its log in
#    $OUT/eagle3_cost.log, rows in $OUT/e3/);
# 3. one table of both, $OUT/eagle3_table.md (of every part run so far into $OUT).
# Run from the repository root on the GPU machine (no wheels needed):
#     OUT=out bash tools/gpu/qwen3_8b_eagle3_cost.sh
# Each part stops at its limit (K_LIMIT per shape, E3_LIMIT); to run them as separate commands,
# SHAPES picks the shapes of part 1 ("" for none) and COST=0 leaves part 2 out:
#     OUT=out SHAPES=tiny COST=0 bash tools/gpu/qwen3_8b_eagle3_cost.sh; OUT=out SHAPES=qwen3-8b bash ...
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ date -u; git rev-parse --short HEAD 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} | tee -a "$OUT/env.txt"
for shape in ${SHAPES-tiny qwen3-8b}; do
  timeout ${K_LIMIT:-240} python3 -m benchmarks.eagle3_draft_kernels --shape "$shape" --context 512 \
    --out "$OUT/kernels-$shape" > "$OUT/kernels_$shape.log" 2>&1
  echo "== eagle3_draft_kernels $shape rc=$?" | tee -a "$OUT/env.txt"
done
if [ "${COST:-1}" != 0 ]; then
  timeout ${E3_LIMIT:-240} python3 -m benchmarks.eagle3_cost --out "$OUT/e3" > "$OUT/eagle3_cost.log" 2>&1
  echo "== eagle3_cost rc=$?" | tee -a "$OUT/env.txt"
fi
python3 -m benchmarks.eagle3_draft_kernels --table "$OUT"/kernels-*/eagle3_draft_kernels.json "$OUT/e3/eagle3_cost.json" \
  | tee "$OUT/eagle3_table.md"
