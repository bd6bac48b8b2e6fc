#!/usr/bin/env bash
# The tiny experiment end to end on one GPU: `snakemake figures/speedup_table.pdf --cores 8
# --resources gpu=1` in a clean copy of the checkout, cold (the machine's compile caches
# deleted first), timed; every GPU job's benchmark seconds, the decoding seconds inside the
# decode jobs (prefill + decode seconds of their records), every budget rule's tree sizes and
# drafted steps per temperature, and the speedup table go to $OUT/summary.md; each part's
# records, calibrations and aggregates (no compile caches, which run to tens of MB) to
# $OUT/records_<part>.tgz, for analyses after the run, and its logs (the job worker's too) to
# $OUT/logs_<part>.tgz.  The parts "worker ablation" leave seven files in $OUT, so a device
# tool that returns at most eight brings all of them back, with one more of the caller's.
# RUNS picks the parts, in this order (default "worker rerun"):
#   worker    the default `job_worker: auto` (a warm worker per GPU outside SLURM);
#   rerun     `decode_model` forced again in that copy, the worker still warm;
#   noworker  a second clean copy, cold, with `--config job_worker=false` (one process a job);
#   ablation  figures/budget_ablation.pdf in the worker run's copy, at the experiment's
#             temperatures, with the fixed budgets $BUDGETS (default GPU-sized: [16, 32, 64,
#             96, 128]).  The overlay changes the budgets alone: a change of `temperatures`
#             is a change of the one-job calibration's parameters, which would measure the
#             costs again and give the ablation's rules other costs than the main run's.
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
  for f in logs/benchmarks/calibrate_model/*/tiny.tsv logs/benchmarks/decode_model*/*/tiny/t*.tsv; do
    [ -f "$f" ] && echo "- $f: $(tail -n1 "$f" | cut -f1) s"
  done
  python3 - <<'EOF'
import collections, glob, json, re
total, sizes, drafted = 0.0, collections.defaultdict(collections.Counter), collections.defaultdict(list)
spells, committed = collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter)
for path in glob.glob("results/*/tiny/*/t*/*.jsonl"):
    temp = re.search(r"/t([0-9.]+)/", path).group(1)
    for line in open(path):
        r = json.loads(line)
        total += float(r["decode_seconds"]) + float(r["prefill_seconds"])
        if r["method"].startswith("bastion") and not r.get("budget"):
            key, flags = (temp, r["method"]), r.get("drafted", [])
            sizes[key].update(r["tree_sizes"])
            drafted[key] += flags
            committed[key].update(a for a, f in zip(r["acceptance_lengths"], flags) if f)
            run = 0  # the lengths of the prompt's spells of consecutive drafted steps
            for f in flags + [0]:
                if f:
                    run += 1
                elif run:
                    spells[key][run] += 1
                    run = 0
print(f"- decoding inside the decode jobs (prefill + decode seconds of every record): {total:.1f} s")
for (temp, method), seen in sorted(sizes.items()):
    steps = drafted[(temp, method)]
    print(f"- T={temp} {method}: {len(seen)} distinct tree sizes, drafted {sum(steps)} of {len(steps)} steps; "
          f"nodes: steps {dict(sorted(seen.items()))}")
    if sum(steps) < len(steps):  # a gated method: what its drafted steps committed, in spells of what length
        print(f"  - tokens a drafted step committed: steps {dict(sorted(committed[(temp, method)].items()))}; "
              f"spells of drafted steps, length: count {dict(sorted(spells[(temp, method)].items()))}")
EOF
  grep -h "job-worker\] ran" logs/calibrate_model/*/*.log logs/decode_model*/*/*/*.log 2>/dev/null | sed 's/^/- /'
  echo; cat figures/speedup_table.md 2>/dev/null; echo
}
pack_records() {  # into $1, from the copy in the current directory: what the tables are made of
  find results -path '*/tiny/*' \( -name '*.jsonl' -o -name '*.json' -o -name '*.csv' \) -print0 \
    | tar czf "$1" --null -T - figures/*.md 2>/dev/null
}
run() {  # name, extra snakemake args...
  local name=$1; shift
  rm -rf /tmp/torchinductor_* ~/.triton ~/.cache/torch
  local W=/tmp/e2e_$name; rm -rf $W; mkdir -p $W
  (cd "$SRC" && tar --exclude=./.whl --exclude=./.carry --exclude=./.git --exclude=./build -cf - .) | tar -xf - -C $W
  cd $W; local t=$SECONDS
  timeout ${E2E_LIMIT:-300} python3 -m snakemake figures/speedup_table.pdf --cores 8 --resources gpu=1 --keep-going "$@" > "$OUT/e2e_$name.log" 2>&1
  { echo "## $name: rc=$? end to end $((SECONDS - t)) s"; jobs_summary; } | tee -a "$SUMMARY"
  mkdir -p worker_logs; cp /tmp/bastion-worker-*/*.log worker_logs/ 2>/dev/null
  tar czf "$OUT/logs_$name.tgz" logs worker_logs figures/*.md 2>/dev/null
  pack_records "$OUT/records_$name.tgz"
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
[[ " $RUNS " == *" ablation "* ]] && {  # the budget ablation in the worker run's copy: GPU-sized budgets
cd /tmp/e2e_worker; t=$SECONDS
printf 'experiments:\n  tiny:\n    budget_ablation: %s\n' "${BUDGETS:-[16, 32, 64, 96, 128]}" > ablation.yaml
timeout ${ABLATION_LIMIT:-240} python3 -m snakemake figures/budget_ablation.pdf --cores 8 --resources gpu=1 \
  --configfile config.yaml ablation.yaml > "$OUT/e2e_ablation.log" 2>&1
{ echo "## budget ablation ${BUDGETS:-[16, 32, 64, 96, 128]}: rc=$? $((SECONDS - t)) s"
  python3 - results/*/aggregate/tiny/ablation/cells.csv <<'EOF'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(f"- T={r['temperature']} {r['dataset']} {r['method']}: {float(r['speedup']):.3f}x, tau {float(r['tau']):.2f}, mean tree {float(r['mean_tree_size']):.1f}")
EOF
  cat results/*/aggregate/tiny/ablation/same_size.csv; } | tee -a "$SUMMARY"
pack_records "$OUT/records_ablation.tgz"
cd "$SRC"; }
ls /tmp/bastion-worker-*/ 2>/dev/null
