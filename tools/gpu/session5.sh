#!/usr/bin/env bash
# One H200 call for issues 13, 14 and 16 (run through the device tool, writes into $OUT):
#   1. the default tiny experiment end to end from a clean copy (engine: auto = compiled),
#      timed, with every job's benchmark TSV and the speedup table;
#   2. EAGLE-3's draft and verify costs for the Qwen3-8B shape;
#   3. the compiled engine's calibration with contexts reaching 32k, held-out error per context.
# Needs snakemake's wheels in .whl (carry .whl).  Each stage has its own time limit.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
{ date -u; git log -1 --format='%h %s' 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch,transformers,snakemake;print('torch',torch.__version__,'transformers',transformers.__version__,'snakemake',snakemake.__version__)"
  python3 -c "import pandas, matplotlib; print('pandas', pandas.__version__, 'matplotlib', matplotlib.__version__)"; } > "$OUT/env.txt" 2>&1
SRC=$PWD
stage() { echo "== $1 rc=$2 $3 s" | tee -a "$OUT/env.txt"; }

# 1. tiny experiment end to end, clean copy
W=/tmp/e2e; rm -rf $W; mkdir -p $W
(cd "$SRC" && tar --exclude=./.whl --exclude=./.carry --exclude=./.git -cf - .) | tar -xf - -C $W
cd $W; t=$SECONDS
timeout ${E2E_LIMIT:-300} python3 -m snakemake figures/speedup_table.pdf --cores 8 --resources gpu=1 > "$OUT/e2e.log" 2>&1
stage e2e $? $((SECONDS - t))
cp figures/speedup_table.md "$OUT/" 2>/dev/null
tar czf "$OUT/e2e_logs.tgz" logs results/*/aggregate figures/*.md 2>/dev/null
cd "$SRC"

# 2. EAGLE-3 costs, Qwen3-8B shape
t=$SECONDS
timeout ${E3_LIMIT:-120} python3 -m benchmarks.eagle3_cost --out /tmp/e3 > "$OUT/eagle3_cost.log" 2>&1
stage eagle3_cost $? $((SECONDS - t)); cp /tmp/e3/*.json "$OUT/" 2>/dev/null

# 3. long-context calibration of the compiled engine
t=$SECONDS
timeout ${CALIB_LIMIT:-200} python3 -m benchmarks.static_engine --sections calib --engines compiled --contexts 512 \
  --calib-context 32768 --out /tmp/calib > "$OUT/calib.log" 2>&1
stage calib32k $? $((SECONDS - t)); cp /tmp/calib/static_engine.json "$OUT/calib32k.json" 2>/dev/null
ls -la "$OUT"
