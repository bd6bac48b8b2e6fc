#!/usr/bin/env bash
# The row kernels (bastion/engines/row_kernels.py) on a GPU: each product of the Qwen3-8B
# shape at one row against cuBLAS and Inductor (`python -m benchmarks.row_kernel_bench`, whose
# best settings are written to $OUT/lk/settings.json), then the Qwen3-8B-shaped AR and 32-node
# steps with the kernels off (BASTION_ROW_KERNEL=0) and on, with those settings
# (benchmarks.tree_phase, summarised per mode), then the tiny pair's bf16 AR speed and outputs
# off and on.  GRID=near times only the settings next to the shipped ones.
# Run from the repository root on the GPU machine (no wheels needed):
#     OUT=out bash tools/gpu/row_kernel.sh
set -uo pipefail
export OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"
timeout ${LK_LIMIT:-240} python3 -m benchmarks.row_kernel_bench --out "$OUT/lk" --grid ${GRID:-full} 2>&1 | grep -v -i warn
echo "== row_kernel_bench rc=${PIPESTATUS[0]}"
TP="--shape qwen3-8b --contexts ${CONTEXTS:-512} --nodes 32 --sections ${SECTIONS:-phases,ar,overhead} --drafters fused"
for on in ${MODES:-0 1}; do
  BASTION_ROW_KERNEL=$on timeout ${TP_LIMIT:-200} python3 - $TP --out "$OUT/tp$on" > "$OUT/tp$on.log" 2>&1 <<'PY'
import json, os, sys
from pathlib import Path
from bastion.engines import row_kernels
path = Path(os.environ.get("OUT", ".")) / "lk" / "settings.json"
if path.exists():
    for row in json.loads(path.read_text()).values():
        row_kernels.SETTINGS[(row["N"], row["K"])] = tuple(row["setting"])
print("row kernel settings", row_kernels.SETTINGS, "BASTION_ROW_KERNEL", os.environ.get("BASTION_ROW_KERNEL"))
from benchmarks import tree_phase
sys.exit(tree_phase.main(sys.argv[1:]))
PY
  echo "== tree_phase row kernel=$on rc=$?"; python3 -m benchmarks.tree_phase_summary "$OUT/tp$on.log"
  grep -h '"section": "ar"' "$OUT/tp$on.log" | head -5
done
# the tiny pair in bf16: AR's outputs with the row kernels against the matrix library's
for on in ${AR_MODES:-0 1}; do
  BASTION_ROW_KERNEL=$on timeout ${AR_LIMIT:-120} python3 -m bastion.benchmark --model tiny --dataset stdlib-heldout \
    --max-samples 8 --max-new-tokens 128 --methods ar --dtype bfloat16 --engine compiled --cache-dir /tmp/rk \
    --output "$OUT/ar$on.jsonl" > "$OUT/ar$on.log" 2>&1
  echo "== tiny AR bf16 row kernel=$on rc=$?"; grep -E "^AR " "$OUT/ar$on.log"
done
python3 - "$OUT/ar0.jsonl" "$OUT/ar1.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["output_ids"] for l in open(p)] for p in sys.argv[1:])
same = sum(x == y for x, y in zip(a, b))
prefix = [next((i for i, (s, t) in enumerate(zip(x, y)) if s != t), min(len(x), len(y))) for x, y in zip(a, b)]
print(f"tiny AR bf16: {same} of {len(a)} outputs identical with and without the row kernels; first difference at {prefix}")
PY
