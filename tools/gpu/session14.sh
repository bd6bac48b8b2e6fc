#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 14: (A) the tiny experiment end to
# end with the job worker, cold, from a clean copy: what the first decode job still compiles
# after AR's root-only build/commit, row_argmax without its graph break and a dynamic
# `select`; (B) the Qwen3-8B-shaped drafter step and 32-node step with the block's K/V
# written inside the drafter's window (no torch.cat).  Call 1 also ran `--drafters
# fused,whole`, 'whole' being the drafter's functions inside one compiled step (1.93 ms, far
# slower: removed).  Needs the wheels in .whl (carry .whl).
# Call 2: RUNS="worker rerun" SECTIONS=overhead,ar (a second cold sample, the warm decode job, AR).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
[[ " ${PARTS:-A B} " == *" A "* ]] && { RUNS=${RUNS:-worker} OUT=$OUT bash tools/gpu/worker_e2e.sh; }
[[ " ${PARTS:-A B} " == *" B "* ]] && {
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout ${TP_LIMIT:-300} python3 -m benchmarks.tree_phase --shape qwen3-8b --contexts 512,4096 --nodes 32 \
  --sections ${SECTIONS:-phases,overhead} --drafters ${DRAFTERS:-fused} --out "$OUT/tp" > "$OUT/tp.log" 2>&1
echo "== tree_phase rc=$?"
python3 tools/gpu/tree_phase_summary.py "$OUT/tp.log"; }
