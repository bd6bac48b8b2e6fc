#!/usr/bin/env bash
# What the compile cache in the results folder (bastion/pipeline/compile_cache.py) saves a
# GPU job on a node that never compiled.  Every run is one process a job (`job_worker=false`),
# so nothing stays warm in memory between jobs:
#   1. the tiny experiment end to end from a clean copy, cold (tools/gpu/tiny_experiment_e2e.sh,
#      RUNS=noworker);
#   2. "another node, shared results": the machine's own caches deleted (/tmp/torchinductor_*,
#      ~/.triton, ~/.cache/torch), then decode_model forced to run again (--forcerun; the
#      speedup table collects existing aggregates, so deleting outputs alone reruns nothing),
#      with results/<hw>/compile_cache warm;
#   3. "another node, no shared cache": the same with results/<hw>/compile_cache deleted too;
#   4. (CASES with "both") the machine's caches deleted again, and calibrate_model forced to run
#      again, which reruns decode_model after it: both GPU jobs on a new node, shared cache warm.
# CASES (default "shared none") picks and orders the cases.  Each case's job seconds go to
# $OUT/env.txt, its logs, benchmark TSVs, cells and table to $OUT/rerun_<case>.tgz.
# Run from the repository root on the GPU machine, with Snakemake's wheels in .whl:
#     OUT=out bash tools/gpu/compile_cache_rerun.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
RUNS=noworker E2E_LIMIT=${E2E_LIMIT:-240} bash tools/gpu/tiny_experiment_e2e.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
cd /tmp/e2e_noworker
du -sh results/*/compile_cache 2>/dev/null | tee -a "$OUT/env.txt"
for case in ${CASES:-shared none}; do
  rm -rf /tmp/torchinductor_* ~/.triton ~/.cache/torch
  [ $case = none ] && rm -rf results/*/compile_cache
  rule=decode_model; [ $case = both ] && rule=calibrate_model
  du -sh results/*/compile_cache 2>/dev/null | tee -a "$OUT/env.txt"
  t=$SECONDS
  timeout ${RERUN_LIMIT:-200} python3 -m snakemake figures/speedup_table.pdf --forcerun $rule --cores 8 --resources gpu=1 \
    --config job_worker=false > "$OUT/rerun_$case.log" 2>&1
  echo "== $rule rerun, cache $case: rc=$? $((SECONDS - t)) s" | tee -a "$OUT/env.txt"
  cat logs/benchmarks/calibrate_model/*/tiny.tsv logs/benchmarks/decode_model/*/tiny/t0.tsv | tee -a "$OUT/env.txt"
  cp "$OUT/rerun_$case.log" logs/
  # one archive per case: a device call returns a limited number of files
  tar czf "$OUT/rerun_$case.tgz" logs/rerun_$case.log logs/decode_model logs/benchmarks logs/calibrate_model \
    figures/speedup_table.md results/*/aggregate 2>/dev/null
  rm -f "$OUT/rerun_$case.log"
done
ls -la "$OUT"
