#!/usr/bin/env bash
# The tiny experiment end to end on one GPU: `snakemake figures/speedup_table.pdf --cores 8
# --resources gpu=1` in a clean copy of the checkout, cold (the machine's compile caches
# deleted first), timed; every GPU job's benchmark seconds, the decoding seconds inside the
# decode job (prefill + decode seconds of its records), BASTION's tree sizes and the speedup
# table go to $OUT/summary.md.  RUNS picks the parts, in this order (default "worker rerun"):
#   worker    the default `job_worker: auto` (a warm worker per GPU outside SLURM);
#   rerun     `decode_model` forced again in that copy, the worker still warm;
#   noworker  a second clean copy, cold, with `--config job_worker=false` (one process a job).
# Run from the repository root on the GPU machine, with Snakemake's wheels in .whl
# (`bash tools/gpu/wheels.sh` here, then carry .whl):
#     OUT=out RUNS=worker bash tools/gpu/tiny_experiment_e2e.sh
# The copies stay in /tmp/e2e_<run> (tools/gpu/compile_cache_rerun.sh reruns jobs there).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{ date -u; git log -1 --format='commit %h' 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch,transformers,snakemake;print('torch',torch.__version__,'transformers',transformers.__version__,'snakemake',snakemake.__version__)"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
SRC=$PWD
SUMMARY=$OUT/summary.md
jobs_summary() {  # benchmark seconds of the GPU jobs, the decode seconds the records hold, tree sizes, the table
  for f in logs/benchmarks/calibrate_model/*/tiny.tsv logs/benchmarks/decode_model/*/tiny/t0.tsv; do
    [ -f "$f" ] && echo "- $(basename "$(dirname "$(dirname "$f")")")/$(basename "$f"): $(tail -n1 "$f" | cut -f1) s"
  done
  python3 - <<'EOF'
import collections, glob, json
total, sizes = 0.0, collections.Counter()
for path in glob.glob("results/*/tiny/*/t0/*.jsonl"):
    for line in open(path):
        r = json.loads(line)
        total += float(r["decode_seconds"]) + float(r["prefill_seconds"])
        if r["method"] == "bastion":
            sizes.update(r["tree_sizes"])
print(f"- decoding inside decode_model (prefill + decode seconds of every record): {total:.1f} s")
print(f"- BASTION's tree sizes (nodes: steps): {dict(sorted(sizes.items()))}")
EOF
  grep -h "job-worker\] ran" logs/calibrate_model/*/*.log logs/decode_model/*/*/*.log 2>/dev/null | sed 's/^/- /'
  echo; cat figures/speedup_table.md 2>/dev/null; echo
}
run() {  # name, extra snakemake args...
  local name=$1; shift
  rm -rf /tmp/torchinductor_* ~/.triton ~/.cache/torch
  local W=/tmp/e2e_$name; rm -rf $W; mkdir -p $W
  (cd "$SRC" && tar --exclude=./.whl --exclude=./.carry --exclude=./.git --exclude=./build -cf - .) | tar -xf - -C $W
  cd $W; local t=$SECONDS
  timeout ${E2E_LIMIT:-300} python3 -m snakemake figures/speedup_table.pdf --cores 8 --resources gpu=1 --keep-going "$@" > "$OUT/e2e_$name.log" 2>&1
  { echo "## $name: rc=$? end to end $((SECONDS - t)) s"; jobs_summary; } | tee -a "$SUMMARY"
  tar czf "$OUT/logs_$name.tgz" logs figures/*.md 2>/dev/null
  mkdir -p "$OUT/worker_logs_$name"; cp /tmp/bastion-worker-*/*.log "$OUT/worker_logs_$name/" 2>/dev/null
  cd "$SRC"
}
RUNS=${RUNS:-worker rerun}
[[ " $RUNS " == *" worker "* ]] && run worker
[[ " $RUNS " == *" rerun "* ]] && {
cd /tmp/e2e_worker; t=$SECONDS
timeout 120 python3 -m snakemake figures/speedup_table.pdf --cores 8 --resources gpu=1 --forcerun decode_model > "$OUT/e2e_rerun.log" 2>&1
{ echo "## decode_model again, worker warm: rc=$? $((SECONDS - t)) s"; jobs_summary; } | tee -a "$SUMMARY"
tar czf "$OUT/logs_rerun.tgz" logs figures/*.md 2>/dev/null
cd "$SRC"; }
[[ " $RUNS " == *" noworker "* ]] && run noworker --config job_worker=false
ls /tmp/bastion-worker-*/ 2>/dev/null
