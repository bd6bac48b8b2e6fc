#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 16: the Triton tree-attention kernel
# and cuBLASLt for the compiled engine.  PARTS picks (default "T Q"): Q, outputs equal AR's
# in fp32 on the compiled engine, both offline sets; V, the Qwen3-8B-shaped verification
# graphs kernel by kernel, with and without the attention kernel and cuBLASLt
# (tools/gpu/verify_kernels.py); T, the Qwen3-8B-shaped phases, 32-node/DFlash steps and
# AR (benchmarks.tree_phase); E, the tiny experiment end to end with the job worker.
# Needs the wheels in .whl (`bash tools/gpu/wheels.sh`; carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
PARTS=${PARTS:-T Q}
[[ " $PARTS " == *" E "* ]] && { RUNS=${RUNS:-worker rerun} OUT=$OUT bash tools/gpu/worker_e2e.sh | tee "$OUT/e2e_summary.txt"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
[[ " $PARTS " == *" V "* ]] && { timeout ${VK_LIMIT:-150} python3 tools/gpu/verify_kernels.py --out "$OUT/vk" 2>&1 \
  | grep -v -i warn | grep -E "verify|done|Error|error" ; echo "== verify_kernels rc=$?"; }
[[ " $PARTS " == *" T "* ]] && {
timeout ${TP_LIMIT:-220} python3 -m benchmarks.tree_phase --shape qwen3-8b --contexts 512,4096 --nodes 32 \
  --sections ${SECTIONS:-phases,overhead,ar} --drafters fused --out "$OUT/tp" > "$OUT/tp.log" 2>&1
echo "== tree_phase rc=$?"
python3 tools/gpu/tree_phase_summary.py "$OUT/tp.log"; }
[[ " $PARTS " == *" Q "* ]] && for ds in stdlib-heldout humaneval-pkg; do
  timeout ${EQ_LIMIT:-100} python3 -m bastion.benchmark --model tiny --dataset $ds --max-samples 8 --max-new-tokens 128 \
    --methods ar,eagle3,dflash,bastion --budget 32 --dtype float32 --engine compiled --output "$OUT/eq_$ds.jsonl" > "$OUT/eq_$ds.log" 2>&1
  echo "== equality $ds rc=$?"; python3 tools/gpu/same_as_ar.py "$OUT/eq_$ds.jsonl"
done
# the device returns at most 8 files: everything in one archive
(cd "$OUT" && tar czf /tmp/session16_out.tgz --exclude=session16_out.tgz . && find . -mindepth 1 -delete && mv /tmp/session16_out.tgz .)
