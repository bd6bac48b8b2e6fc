#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT): what the compiled engine's drafter functions
# cost the tiny experiment end to end.  The pipeline from a clean copy twice, both cold (the
# machine's compile caches deleted before each): first with BASTION_DRAFTER=module (the
# drafter's own layers), then with the fused drafter (the default).  Each run's job
# benchmark TSVs and speedup table are printed.  Needs the wheels in .whl (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
for mode in module fused; do
  rm -rf /tmp/torchinductor_* ~/.triton ~/.cache/torch
  mkdir -p "$OUT/$mode"
  if [ $mode = module ]; then export BASTION_DRAFTER=module; else unset BASTION_DRAFTER; fi
  OUT="$OUT/$mode" E3_LIMIT=0 E2E_LIMIT=${E2E_LIMIT:-250} bash tools/gpu/session6_e2e.sh > /dev/null 2>&1
  echo "== $mode: $(grep '^== e2e' "$OUT/$mode/env.txt")"
  tail -n1 -q /tmp/e2e/logs/benchmarks/calibrate_model/*/tiny.tsv /tmp/e2e/logs/benchmarks/decode_model/*/tiny/t0.tsv | cut -f1
  sed -n 5,7p "$OUT/$mode/speedup_table.md" 2>/dev/null
done
