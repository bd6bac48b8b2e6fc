#!/usr/bin/env bash
# The tiny target's self-distillation data on one GPU, shared by the drafter's and the
# EAGLE-3 head's recipes (tools/tiny_pair/retrain_drafter.sh, retrain_eagle3.sh): the
# target's continuations (256 new tokens) of every training-split header, greedy and
# $SAMPLED_COPIES times (default 1) sampled at T = 1; of $WINDOWS (default 16,384) random
# training windows (10% sampled); with $PKG_PROMPTS of third-party headers (greedy and
# $PKG_SAMPLED_COPIES times sampled, $PKG_BATCH a batch; a .jsonl.gz is unpacked first); and
# of the validation headers, as validation data.  $DATA_SEED (default 20) picks the samples.
# Each generator stops starting batches 30 s before $GEN_SECONDS (default 150) and keeps
# what it has; if any fails, nothing is written and the script exits 1.  Writes $WORK/d.npy
# (training) and $WORK/dv.npy (validation), and the logs under $WORK/logs.  Alone, from the
# repository root with the CPU-built build/ (docs/tiny-pair.md, steps 1-2):
#   OUT=out WORK=/tmp/tiny bash tools/tiny_pair/distill_gpu.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
OUT=${OUT:-$PWD/gpu_out}; W=${WORK:-/tmp/tiny}; C=${BUILD:-build}; L=$W/logs; TT=dflash/assets/tiny/target
GEN_SECONDS=${GEN_SECONDS:-150}; DATA_SEED=${DATA_SEED:-20}; SAMPLED_COPIES=${SAMPLED_COPIES:-1}
WINDOWS=${WINDOWS:-16384}
PKG_PROMPTS=${PKG_PROMPTS:-}; PKG_SAMPLED_COPIES=${PKG_SAMPLED_COPIES:-1}; PKG_BATCH=${PKG_BATCH:-2048}
mkdir -p "$OUT" "$L"
stage() { echo "== $1 rc=$2 $3s" | tee -a "$L/env.txt"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import torch,transformers;print('torch',torch.__version__,'transformers',transformers.__version__)"; } | tee "$L/env.txt"
t=$SECONDS
python - "$C/train.txt.gz" "$TT" "$W/train_tokens.npy" <<'PY'
import gzip, sys, numpy as np
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[2])
docs = [d for d in gzip.open(sys.argv[1], "rt", encoding="utf-8").read().split("<|endoftext|>") if d]
ids = []
for enc in tok(docs, add_special_tokens=False)["input_ids"]:
    ids.extend(enc); ids.append(tok.eos_token_id)
np.save(sys.argv[3], np.asarray(ids, dtype=np.int32))
print("train tokens", len(ids))
PY
stage tokens $? $((SECONDS-t)); t=$SECONDS
if [[ "$PKG_PROMPTS" == *.gz ]]; then  # a large header file travels gzipped (the device's 64 MiB tree limit)
  gunzip -kf "$PKG_PROMPTS" || exit 1; PKG_PROMPTS=${PKG_PROMPTS%.gz}
fi
rm -f $W/d.npy $W/dp.npy $W/dw.npy $W/dk.npy  # an earlier run's files in the same $WORK must not join this one's data
gen() { timeout $GEN_SECONDS python -m dflash.distill_data --target $TT --max-seconds $((GEN_SECONDS - 30)) "$@"; }
GENS=()  # "pid log" of each generator: one that fails (out of memory beside the others) stops the run
gen --prompt-file $C/train_prompts.jsonl --out $W/dp.npy --new-tokens 256 --batch-size 2048 --sample-frac 1.0 \
  --sampled-copies $SAMPLED_COPIES --seed $DATA_SEED > "$L/distill_prompts.log" 2>&1 & GENS+=("$! distill_prompts")
gen --data $W/train_tokens.npy --out $W/dw.npy --prompts $WINDOWS --prompt-len 64 --new-tokens 256 --batch-size 2048 \
  --sample-frac 0.1 --seed $((DATA_SEED + 1)) > "$L/distill_windows.log" 2>&1 & GENS+=("$! distill_windows")
gen --prompt-file $C/valid_prompts.jsonl --out $W/dv.npy --new-tokens 256 --batch-size 512 --sample-frac 0.5 \
  --sampled-copies 1 --seed 1 > "$L/distill_valid.log" 2>&1 & GENS+=("$! distill_valid")
if [ -n "$PKG_PROMPTS" ]; then
  gen --prompt-file "$PKG_PROMPTS" --out $W/dk.npy --new-tokens 256 --batch-size $PKG_BATCH \
    --sample-frac 1.0 --sampled-copies $PKG_SAMPLED_COPIES --seed $((DATA_SEED + 2)) > "$L/distill_packages.log" 2>&1 &
  GENS+=("$! distill_packages")
fi
failed=""
for g in "${GENS[@]}"; do wait ${g% *} || failed="$failed ${g#* }"; done
if [ -n "$failed" ]; then  # training on part of the data would look like a finished round
  for f in $failed; do echo "== $f failed:"; tail -n 3 "$L/$f.log"; done
  echo "error: generator(s)$failed failed; nothing was trained (lower PKG_BATCH if it ran out of GPU memory)"
  tar czf "$OUT/logs.tgz" -C $W logs; exit 1
fi
python - $W/dp.npy $W/dw.npy $W/dk.npy <<'PY'
import os, sys, numpy as np
parts = [np.load(p) for p in sys.argv[1:] if os.path.exists(p)]
np.save(os.path.join(os.path.dirname(sys.argv[1]), "d.npy"), np.concatenate(parts))
print("training tokens", sum(len(p) for p in parts), "from", len(parts), "generators")
PY
stage distill $? $((SECONDS-t)); grep -h distill: $L/distill_*.log
