#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT): does the compile cache in the results folder
# (bastion/pipeline/compile_cache.py) shorten a decode job on a node that never compiled?
#   1. the tiny experiment end to end from a clean copy (tools/gpu/session6_e2e.sh, pipeline only);
#   2. "another node, shared results": the machine's own caches deleted (/tmp/torchinductor_*,
#      ~/.triton, ~/.cache/torch), then decode_model forced to run again (--forcerun; the
#      speedup table collects existing aggregates, so deleting outputs alone reruns nothing),
#      with results/<hw>/compile_cache warm;
#   3. "another node, no shared cache": the same with results/<hw>/compile_cache deleted too;
#   4. (CASES with "both") the machine's caches deleted again, and calibrate_model forced to run
#      again, which reruns decode_model after it: both GPU jobs on a new node, shared cache warm.
# CASES (default "shared none") picks and orders the cases.
# Each case's decode job log, benchmark TSV, cells and table come back in one archive.  Needs the wheels in .whl (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
E3_LIMIT=0 E2E_LIMIT=${E2E_LIMIT:-240} bash tools/gpu/session6_e2e.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
cd /tmp/e2e
du -sh results/*/compile_cache 2>/dev/null | tee -a "$OUT/env.txt"
for case in ${CASES:-shared none}; do
  rm -rf /tmp/torchinductor_* ~/.triton ~/.cache/torch
  [ $case = none ] && rm -rf results/*/compile_cache
  rule=decode_model; [ $case = both ] && rule=calibrate_model
  du -sh results/*/compile_cache 2>/dev/null | tee -a "$OUT/env.txt"
  t=$SECONDS
  timeout ${RERUN_LIMIT:-200} python3 -m snakemake figures/speedup_table.pdf --forcerun $rule --cores 8 --resources gpu=1 \
    > "$OUT/rerun_$case.log" 2>&1
  echo "== $rule rerun, cache $case: rc=$? $((SECONDS - t)) s" | tee -a "$OUT/env.txt"
  cat logs/benchmarks/calibrate_model/*/tiny.tsv logs/benchmarks/decode_model/*/tiny/t0.tsv | tee -a "$OUT/env.txt"
  cp "$OUT/rerun_$case.log" logs/
  # a call returns at most 8 files: one archive per case (job logs, benchmark TSVs, table, cells)
  tar czf "$OUT/rerun_$case.tgz" logs/rerun_$case.log logs/decode_model logs/benchmarks logs/calibrate_model \
    figures/speedup_table.md results/*/aggregate 2>/dev/null
  rm -f "$OUT/rerun_$case.log"
done
ls -la "$OUT"
