#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 6: the default tiny experiment end
# to end from a clean copy (engine auto = compiled, decode_jobs: cell), timed, with every
# job's benchmark TSV, the cells and the speedup table; then the tiny pair's EAGLE-3 next to
# AR through the CLI (reference tree) on engine auto.  Needs the wheels in .whl (carry .whl).
# --keep-going: a failing cell must not stop the other one; the logs are packed into $OUT
# before the CLI part, so they come back even if that part runs out of time.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch,transformers,snakemake;print('torch',torch.__version__,'transformers',transformers.__version__,'snakemake',snakemake.__version__)"; } > "$OUT/env.txt" 2>&1
SRC=$PWD
stage() { echo "== $1 rc=$2 $3 s" | tee -a "$OUT/env.txt"; }
W=/tmp/e2e; rm -rf $W; mkdir -p $W
(cd "$SRC" && tar --exclude=./.whl --exclude=./.carry --exclude=./.git --exclude=./build -cf - .) | tar -xf - -C $W
cd $W; t=$SECONDS
timeout ${E2E_LIMIT:-330} python3 -m snakemake figures/speedup_table.pdf --cores 8 --resources gpu=1 --keep-going > "$OUT/e2e.log" 2>&1
stage e2e $? $((SECONDS - t))
cp figures/speedup_table.md "$OUT/" 2>/dev/null
tar czf "$OUT/e2e_logs.tgz" logs results/*/aggregate figures/*.md 2>/dev/null
cd "$SRC"; t=$SECONDS
[ "${E3_LIMIT:-150}" = 0 ] && { ls -la "$OUT"; exit 0; }  # E3_LIMIT=0: the pipeline only
timeout ${E3_LIMIT:-150} python3 -m bastion.benchmark --model tiny --dataset stdlib-heldout --max-samples 16 --max-new-tokens 128 \
  --methods ar,eagle3 --output "$OUT/tiny_eagle3.jsonl" > "$OUT/tiny_eagle3.log" 2>&1
stage "tiny eagle3 cli" $? $((SECONDS - t)); grep -A5 "^=====" "$OUT/tiny_eagle3.log" | head -7
ls -la "$OUT"
