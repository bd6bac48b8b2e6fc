#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 23: the tile kernels
# (bastion/engines/tile_kernels.py) against cuBLAS and Inductor per product at a tree's rows, then
# the Qwen3-8B-shaped steps with them off (BASTION_TILE_KERNEL=0) and on, with the settings the
# first part measured (AR's row kernels on in both), then (E2E=1, needs the wheels: carry .whl) the
# tiny experiment end to end from a clean copy, then the tiny pair's bf16 decodes off and on.  Every
# file but the console log comes back packed in out.tgz.
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"
timeout ${TK_LIMIT:-260} python3 tools/gpu/tile_kernel_bench.py --out "$OUT/tk" --rows ${ROWS:-16,32} \
  --seconds ${TK_SECONDS:-25} 2>&1 | grep -v -i warn
echo "== tile_kernel_bench rc=${PIPESTATUS[0]}"
TP="--shape qwen3-8b --contexts ${CONTEXTS:-512} --nodes 32 --sections ${SECTIONS:-phases,ar,overhead} --drafters fused"
for on in ${MODES:-0 1}; do
  BASTION_TILE_KERNEL=$on timeout ${TP_LIMIT:-150} python3 - $TP --out "$OUT/tp$on" > "$OUT/tp$on.log" 2>&1 <<'PY'
import json, os, sys
from pathlib import Path
from bastion.engines import tile_kernels
path = Path(os.environ.get("OUT", ".")) / "tk" / "settings.json"
if path.exists():
    for row in json.loads(path.read_text()).values():
        tile_kernels.SETTINGS[(row["rows"], row["N"], row["K"])] = tuple(row["setting"])
print("tile kernel settings", tile_kernels.SETTINGS, "BASTION_TILE_KERNEL", os.environ.get("BASTION_TILE_KERNEL"))
from benchmarks import tree_phase
sys.exit(tree_phase.main(sys.argv[1:]))
PY
  echo "== tree_phase tile kernel=$on rc=$?"; python3 tools/gpu/tree_phase_summary.py "$OUT/tp$on.log"
done
if [ "${E2E:-1}" = 1 ]; then
  RUNS=worker OUT=$OUT bash tools/gpu/worker_e2e.sh | tee "$OUT/e2e_summary.txt"
  PYTHONPATH=/tmp/site python3 - <<'PY' | tee "$OUT/tree_sizes.txt"
import collections, glob, json
for path in sorted(glob.glob("/tmp/e2e_*/results/*/tiny/*/t0/bastion.jsonl")):
    sizes = collections.Counter(s for line in open(path) for s in json.loads(line)["tree_sizes"])
    print(path, sorted(sizes.items()))
PY
fi
# the tiny pair in bf16: speeds and outputs with the tile kernels against the matrix library's
for on in ${TINY_MODES:-0 1}; do
  BASTION_TILE_KERNEL=$on timeout ${TINY_LIMIT:-100} python3 -m bastion.benchmark --model tiny --dataset stdlib-heldout \
    --max-samples 8 --max-new-tokens 128 --methods ar,dflash,bastion --budget 32 --dtype bfloat16 --engine compiled \
    --cache-dir /tmp/tk --output "$OUT/tiny$on.jsonl" > "$OUT/tiny$on.log" 2>&1
  echo "== tiny bf16 tile kernel=$on rc=$?"; grep -E "^(AR|DFLASH|BASTION|DFlash|method)" "$OUT/tiny$on.log" | head; tail -3 "$OUT/tiny$on.log"
done
(cd "$OUT" && tar czf /tmp/out.tgz --exclude=call.log . && find . -mindepth 1 ! -name call.log -delete && mv /tmp/out.tgz .)
