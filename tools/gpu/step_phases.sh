#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT): where the adaptive rule's larger trees spend
# their time against fixed budgets.  The tiny pair through the CLI (engine auto = compiled,
# per-step phase times, one shared calibration), BASTION's rule and fixed 32 and 128-node
# trees on 8 stdlib-heldout prompts x 128 tokens; tools/step_phases.py tabulates each
# phase's mean by tree size into $OUT/phases.md.  Needs the wheels in .whl (carry .whl).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
for b in rule 32 128; do
  extra=""; [ $b != rule ] && extra="--budget $b"
  timeout ${PHASE_LIMIT:-150} python3 -m bastion.benchmark --model tiny --dataset stdlib-heldout --max-samples 8 --max-new-tokens 128 \
    --methods bastion --n-min 8 --n-max 8192 --step-times --cache-dir /tmp/phase_cache $extra \
    --output "$OUT/phases_$b.jsonl" > "$OUT/phases_$b.log" 2>&1
  echo "== $b rc=$?" | tee -a "$OUT/phases_env.txt"
done
python3 tools/step_phases.py "$OUT"/phases_*.jsonl | tee "$OUT/phases.md"
