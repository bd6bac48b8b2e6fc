#!/usr/bin/env bash
# GPU slots on a two-GPU machine: the tiny experiment's T = 0 decode jobs (2 sets x AR,
# DFlash, BASTION, 3 prompts, 48 new tokens, tiny calibration grid) with --resources gpu=2 and
# then gpu=1, each from a fresh copy: wall times ($OUT/env.txt), the jobs' slot records
# ($OUT/slots<K>.txt) and, per cell, whether the two runs' outputs are token-identical
# ($OUT/summary.txt).
# Run from the repository root on a two-GPU machine, with Snakemake's wheels in .whl:
#     OUT=out bash tools/gpu/two_gpu_slots.sh
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
{ date -u; nvidia-smi -L; python3 -c "import torch,transformers,snakemake;print('torch',torch.__version__,'transformers',transformers.__version__,'snakemake',snakemake.__version__)"; } > "$OUT/env.txt" 2>&1
cat > /tmp/overlay.yaml <<'YAML'
experiments:
  tiny:
    datasets:
      humaneval-pkg: {max_samples: 3}
      stdlib-heldout: {max_samples: 3}
    budget_ablation: []
    max_new_tokens: 48
    calibration_grid: tiny
YAML
SRC=$PWD
for K in 2 1; do
  W=/tmp/run$K; rm -rf $W; mkdir -p $W
  (cd "$SRC" && tar --exclude=./.whl --exclude=./.carry --exclude=./.git -cf - .) | tar -xf - -C $W
  cd $W
  HW=$(python3 -c "from bastion.calibration.hardware import detect_key; print(detect_key())")
  T=""; for d in humaneval-pkg stdlib-heldout; do for m in ar dflash bastion; do T="$T results/$HW/tiny/$d/t0/$m.jsonl"; done; done
  t0=$(date +%s.%N)
  LIM=$([ $K = 1 ] && echo 330 || echo 220)
  timeout $LIM python3 -m snakemake --cores 8 --resources gpu=$K --configfile config.yaml /tmp/overlay.yaml -- $T > "$OUT/run$K.log" 2>&1
  rc=$?; t1=$(date +%s.%N)
  echo "gpu=$K rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))")" | tee -a "$OUT/env.txt"
  grep -r "\[gpu-slot\]" logs | sort -t' ' -k2 > "$OUT/slots$K.txt"
  cd "$SRC"
done
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
# Per cell: prompts present in both runs, and how many T=0 outputs are token-identical.
import json, sys, glob
def load(k):
    cells = {}
    for p in sorted(glob.glob(f"/tmp/run{k}/results/*/tiny/*/t0/*.jsonl")):
        for line in open(p):
            r = json.loads(line)
            cell = cells.setdefault((r["dataset"], r["method"]), {})
            cell[r["prompt_index"]] = (r["output_ids"], r["fingerprint"]["cuda_visible_devices"])
    return cells
two, one = load(2), load(1)
print(f"{'cell':32s} {'n(gpu=2)':>8s} {'n(gpu=1)':>8s} {'identical':>9s}  devices gpu=2 / gpu=1")
total = same = 0
for cell in sorted(set(two) | set(one)):
    a, b = two.get(cell, {}), one.get(cell, {})
    common = sorted(set(a) & set(b))
    eq = sum(a[i][0] == b[i][0] for i in common)
    total += len(common); same += eq
    print(f"{'/'.join(cell):32s} {len(a):8d} {len(b):8d} {eq:4d}/{len(common):<4d}  "
          f"{sorted({v[1] for v in a.values()})} / {sorted({v[1] for v in b.values()})}")
print(f"cells: gpu=2 {len(two)}, gpu=1 {len(one)}; identical T=0 outputs: {same}/{total}")
PY
ls -la "$OUT"
