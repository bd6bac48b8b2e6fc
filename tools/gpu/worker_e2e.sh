#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 13: what the job worker does to the
# tiny experiment end to end.  The pipeline from a clean copy, cold (the machine's compile
# caches deleted), with the default `job_worker: auto` (on: a GPU outside SLURM); then the
# decode job forced to run again in that copy (the worker still warm); then a second clean
# copy, cold, with `job_worker=false` (one process per job, as before).  Prints every GPU
# job's benchmark seconds, the decoding seconds inside it, and the speedup tables.
# RUNS picks the parts (default "worker rerun noworker").
# Needs the wheels in .whl (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch,transformers,snakemake;print('torch',torch.__version__,'transformers',transformers.__version__,'snakemake',snakemake.__version__)"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
SRC=$PWD
jobs_summary() {  # benchmark seconds of the GPU jobs, and the decode seconds the records hold
  for f in logs/benchmarks/calibrate_model/*/tiny.tsv logs/benchmarks/decode_model/*/tiny/t0.tsv; do
    [ -f "$f" ] && echo "  $(basename "$(dirname "$(dirname "$f")")")/$(basename "$f"): $(tail -n1 "$f" | cut -f1) s"
  done
  python3 - <<'EOF'
import glob, json
total = 0.0
for path in glob.glob("results/*/tiny/*/t0/*.jsonl"):
    for line in open(path):
        r = json.loads(line)
        total += float(r["decode_seconds"]) + float(r["prefill_seconds"])
print(f"  decoding inside decode_model (prefill + decode seconds of every record): {total:.1f} s")
EOF
  grep -h "job-worker\] ran" logs/calibrate_model/*/*.log logs/decode_model/*/*/*.log 2>/dev/null | sed 's/^/  /'
}
run() {  # name, extra snakemake args...
  local name=$1; shift
  rm -rf /tmp/torchinductor_* ~/.triton ~/.cache/torch
  local W=/tmp/e2e_$name; rm -rf $W; mkdir -p $W
  (cd "$SRC" && tar --exclude=./.whl --exclude=./.carry --exclude=./.git --exclude=./build -cf - .) | tar -xf - -C $W
  cd $W; local t=$SECONDS
  timeout ${E2E_LIMIT:-300} python3 -m snakemake figures/speedup_table.pdf --cores 8 --resources gpu=1 --keep-going "$@" > "$OUT/e2e_$name.log" 2>&1
  echo "== $name: rc=$? end to end $((SECONDS - t)) s"
  jobs_summary; sed -n 5,7p figures/speedup_table.md 2>/dev/null
  tar czf "$OUT/logs_$name.tgz" logs figures/*.md 2>/dev/null
  mkdir -p "$OUT/worker_logs_$name"; cp /tmp/bastion-worker-*/*.log "$OUT/worker_logs_$name/" 2>/dev/null
  cd "$SRC"
}
RUNS=${RUNS:-worker rerun noworker}
[[ " $RUNS " == *" worker "* ]] && run worker
[[ " $RUNS " == *" rerun "* ]] && {
cd /tmp/e2e_worker; t=$SECONDS
timeout 120 python3 -m snakemake figures/speedup_table.pdf --cores 8 --resources gpu=1 --forcerun decode_model > "$OUT/e2e_rerun.log" 2>&1
echo "== decode_model again, worker warm: rc=$? $((SECONDS - t)) s"; jobs_summary
tar czf "$OUT/logs_rerun.tgz" logs figures/*.md 2>/dev/null
cd "$SRC"; }
[[ " $RUNS " == *" noworker "* ]] && run noworker --config job_worker=false
ls /tmp/bastion-worker-*/ 2>/dev/null
