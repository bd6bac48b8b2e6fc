#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT): the tiny experiment end to end from a clean
# copy (tools/gpu/session6_e2e.sh, pipeline only); the decode job once more with the
# machine's compile caches warm (its outputs deleted, so only it reruns); then the tiny pair's minimum tree size
# n_min on the GPU through the CLI: AR, DFlash and BASTION at n_min 8 (the CPU-sized
# default), BASTION alone at 16 and 32, 16 stdlib-heldout prompts x 128 tokens, engine
# auto, one calibration (grid small, as the pipeline's) shared through --cache-dir.  Needs the wheels in .whl (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
E3_LIMIT=0 E2E_LIMIT=${E2E_LIMIT:-300} bash tools/gpu/session6_e2e.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
SRC=$PWD; cd /tmp/e2e; rm -rf results/*/tiny/*/t0 figures/speedup_table.*; t=$SECONDS
timeout ${RERUN_LIMIT:-150} python3 -m snakemake figures/speedup_table.pdf --cores 8 --resources gpu=1 > "$OUT/rerun.log" 2>&1
echo "== decode rerun rc=$? $((SECONDS - t)) s" | tee -a "$OUT/env.txt"
cp figures/speedup_table.md "$OUT/rerun_speedup_table.md" 2>/dev/null
tar czf "$OUT/rerun_logs.tgz" logs/decode_model logs/benchmarks/decode_model 2>/dev/null; cd "$SRC"
C=/tmp/sweep_cache; mkdir -p $C
for set in stdlib-heldout; do
  for n in ${NMINS:-8 16 32}; do
    methods=bastion; [ $n = 8 ] && methods=ar,dflash,bastion
    t=$SECONDS
    timeout ${SWEEP_LIMIT:-100} python3 -m bastion.benchmark --model tiny --dataset $set --max-samples 16 --max-new-tokens 128 \
      --methods $methods --n-min $n --calib-grid small --cache-dir $C --output "$OUT/sweep_${set}_n$n.jsonl" > "$OUT/sweep_${set}_n$n.log" 2>&1
    echo "== $set n_min $n rc=$? $((SECONDS - t)) s" | tee -a "$OUT/env.txt"
    grep -A6 "^=====" "$OUT/sweep_${set}_n$n.log" | head -8
  done
done
ls -la "$OUT"
