#!/usr/bin/env bash
# Planning without torch on a GPU host: the GPU's name, hardware key and fingerprint from
# nvidia-smi (bastion.calibration.planning) against what torch reports, the seconds each
# takes (torch's import and CUDA start included), and a Snakemake dry run of the default
# target timed (its log in $OUT/dry.log).
# Run from the repository root on the GPU machine, with Snakemake's wheels in .whl:
#     OUT=out bash tools/gpu/planning_without_torch.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 - <<'PY'
import time
t = time.perf_counter()
from bastion.calibration import planning
b = planning.torch_build(); name = planning.gpu_name(b)
plan = (name, name and planning.gpu_key(name), name and planning.gpu_fingerprint(b, name, "auto", "sdpa", "auto"))
t_plan = time.perf_counter() - t
t = time.perf_counter()
import torch
from bastion.calibration import fingerprint
from bastion.calibration.hardware import detect_key
torch_fp = fingerprint.collect(torch.device("cuda"), torch.bfloat16, "sdpa", "compiled")
key = detect_key()
t_torch = time.perf_counter() - t
print(f"planning without torch: {t_plan:.2f} s, name {plan[0]!r} key {plan[1]!r}")
print(f"torch import + CUDA + name: {t_torch:.2f} s, name {torch_fp['device_name']!r} key {key!r}")
same = {k: (plan[2] or {}).get(k) == torch_fp[k] for k in fingerprint.COMPARED}
print("compared fields equal:", all(same.values()), same)
PY
W=/tmp/plan; rm -rf $W; mkdir -p $W; tar --exclude=./.whl --exclude=./.git -cf - . | tar -xf - -C $W
t=$(date +%s.%N); (cd $W && python3 -m snakemake -n figures/speedup_table.pdf > "$OUT/dry.log" 2>&1)
echo "== snakemake -n rc=$? $(python3 -c "import time;print(round(time.time()-$t,1))") s"
