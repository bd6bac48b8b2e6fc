#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT): does the compile cache in the results folder
# (bastion/pipeline/compile_cache.py) shorten a decode job on a node that never compiled?
#   1. the tiny experiment end to end from a clean copy (tools/gpu/session6_e2e.sh, pipeline only);
#   2. "another node, shared results": the machine's own caches deleted (/tmp/torchinductor_*,
#      ~/.triton, ~/.cache/torch), the decode outputs deleted, the pipeline again: only
#      decode_model reruns, with results/<hw>/compile_cache warm;
#   3. "another node, no shared cache": the same with results/<hw>/compile_cache deleted too.
# Each job's benchmark TSV and log come back.  Needs the wheels in .whl (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
E3_LIMIT=0 E2E_LIMIT=${E2E_LIMIT:-240} bash tools/gpu/session6_e2e.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
cd /tmp/e2e
du -sh results/*/compile_cache 2>/dev/null | tee -a "$OUT/env.txt"
for case in shared none; do
  rm -rf /tmp/torchinductor_* ~/.triton ~/.cache/torch results/*/tiny/*/t0 figures/speedup_table.*
  [ $case = none ] && rm -rf results/*/compile_cache
  t=$SECONDS
  timeout ${RERUN_LIMIT:-140} python3 -m snakemake figures/speedup_table.pdf --cores 8 --resources gpu=1 > "$OUT/rerun_$case.log" 2>&1
  echo "== decode rerun, cache $case: rc=$? $((SECONDS - t)) s" | tee -a "$OUT/env.txt"
  cp logs/benchmarks/decode_model/*/tiny/t0.tsv "$OUT/decode_$case.tsv" 2>/dev/null
  cp logs/decode_model/*/tiny/t0.log "$OUT/decode_$case.log" 2>/dev/null
  cp figures/speedup_table.md "$OUT/speedup_$case.md" 2>/dev/null
  tar czf "$OUT/records_$case.tgz" results/*/tiny/*/t0 2>/dev/null
done
ls -la "$OUT"
