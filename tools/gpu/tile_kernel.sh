#!/usr/bin/env bash
# The tile kernels (bastion/engines/tile_kernels.py) on a GPU: each product of the Qwen3-8B
# shape at a tree's rows (16 and 32) against cuBLAS and Inductor
# (`python -m benchmarks.tile_kernel_bench`, best settings to $OUT/tk/settings.json), then the
# Qwen3-8B-shaped steps with the kernels off (BASTION_TILE_KERNEL=0) and on, with those settings
# (AR's row kernels on in both; benchmarks.tree_phase, summarised per mode), then (E2E=1, the
# default; needs the wheels in .whl) the tiny experiment end to end
# (tools/gpu/tiny_experiment_e2e.sh), then the tiny pair's bf16 decodes off and on.  Every file
# but the console log comes back packed in $OUT/out.tgz.
# Run from the repository root on the GPU machine:
#     OUT=out bash tools/gpu/tile_kernel.sh
set -uo pipefail
export OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"
timeout ${TK_LIMIT:-260} python3 -m benchmarks.tile_kernel_bench --out "$OUT/tk" --rows ${ROWS:-16,32} \
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
  echo "== tree_phase tile kernel=$on rc=$?"; python3 -m benchmarks.tree_phase_summary "$OUT/tp$on.log"
done
if [ "${E2E:-1}" = 1 ]; then
  RUNS=worker OUT=$OUT bash tools/gpu/tiny_experiment_e2e.sh
fi
# the tiny pair in bf16: speeds and outputs with the tile kernels against the matrix library's
for on in ${TINY_MODES:-0 1}; do
  BASTION_TILE_KERNEL=$on timeout ${TINY_LIMIT:-100} python3 -m bastion.benchmark --model tiny --dataset stdlib-heldout \
    --max-samples 8 --max-new-tokens 128 --methods ar,dflash,bastion --budget 32 --dtype bfloat16 --engine compiled \
    --cache-dir /tmp/tk --output "$OUT/tiny$on.jsonl" > "$OUT/tiny$on.log" 2>&1
  echo "== tiny bf16 tile kernel=$on rc=$?"; grep -E "^(AR|DFLASH|BASTION|DFlash|method)" "$OUT/tiny$on.log" | head; tail -3 "$OUT/tiny$on.log"
done
(cd "$OUT" && tar czf /tmp/out.tgz --exclude=call.log . && find . -mindepth 1 ! -name call.log -delete && mv /tmp/out.tgz .)
