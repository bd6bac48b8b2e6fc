#!/usr/bin/env bash
# Retrain the bundled tiny DFlash drafter against the SHIPPED tiny target, on one GPU, with
# more self-distillation data than tools/tiny_pair/train_pair.sh and a learning-rate
# schedule that follows the clock (--time-schedule), so a time-boxed run ends at its floor:
#   1. the target's continuations (256 new tokens) of every training-split header, greedy
#      and $SAMPLED_COPIES times (default 1) sampled at T = 1, and greedy continuations of
#      $WINDOWS (default 16,384) random training windows (10% sampled); the validation
#      headers' continuations as validation data.  A run that fine-tunes a drafter trained by
#      this script should set a new $DATA_SEED (default 20), or it sees the same samples again.
#      With $PKG_PROMPTS (a .jsonl from tools.tiny_pair.package_train_prompts: headers of
#      third-party packages) those headers are continued too, greedy and $PKG_SAMPLED_COPIES
#      (default 1) times sampled, $PKG_BATCH (default 2048) prompts a batch (a .jsonl.gz is
#      unpacked first).  Each generator
#      stops starting batches 30 s before $GEN_SECONDS and keeps what it has;
#   2. 2-layer candidates in parallel (a 3-layer drafter would break the 32 MiB package
#      limit), one per line of $CANDIDATES (name, then dflash.train arguments; $D0 is the
#      shipped drafter).  The default three: a (from scratch, as stage 3 of train_pair.sh),
#      b (fine-tuned from the shipped drafter at a lower rate), c (from scratch, 1.5x the
#      tokens a step).  docs/tiny-pair.md gives the candidates of the shipped drafter's stages.
# Run from the repository root with the CPU-built build/ (train_prompts.jsonl,
# valid_prompts.jsonl, train.txt.gz; docs/tiny-pair.md, steps 1-2):
#   OUT=out bash tools/tiny_pair/retrain_drafter.sh
# Writes into $OUT: logs.tgz and drafter_<name>.tgz, one per bf16 candidate.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=4
OUT=${OUT:-$PWD/gpu_out}; W=${WORK:-/tmp/tiny}; C=${BUILD:-build}; L=$W/logs
TT=dflash/assets/tiny/target; D0=dflash/assets/tiny/drafter; TAPS=1,4,6
GEN_SECONDS=${GEN_SECONDS:-140}; TRAIN_SECONDS=${TRAIN_SECONDS:-270}
# fresh data each round: the sampling seeds (prompts DATA_SEED, windows DATA_SEED + 1) pick the
# sampled continuations and the random windows; the greedy header continuations are always the same
DATA_SEED=${DATA_SEED:-20}; SAMPLED_COPIES=${SAMPLED_COPIES:-1}; WINDOWS=${WINDOWS:-16384}
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
PKG_PROMPTS=${PKG_PROMPTS:-}; PKG_SAMPLED_COPIES=${PKG_SAMPLED_COPIES:-1}; PKG_BATCH=${PKG_BATCH:-2048}
if [[ "$PKG_PROMPTS" == *.gz ]]; then  # a large header file travels gzipped (the device's 64 MiB tree limit)
  gunzip -kf "$PKG_PROMPTS" || exit 1; PKG_PROMPTS=${PKG_PROMPTS%.gz}
fi
rm -f $W/dp.npy $W/dw.npy $W/dk.npy  # an earlier run's files in the same $WORK must not join this one's data
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
t=$SECONDS
train() { name=$1; shift; timeout $((TRAIN_SECONDS+60)) python -m dflash.train --target $TT --data $W/d.npy --val-data $W/dv.npy \
  --out $W/$name --block-size 16 --target-layer-ids $TAPS --steps 12000 --seq-len 512 --doc-windows \
  --max-seconds $TRAIN_SECONDS --time-schedule --save-every 100000 --log-every 500 --val-batches 32 --no-progress "$@" \
  > "$L/drafter_$name.log" 2>&1; }
# one candidate a line: "name dflash.train arguments"; the later of a repeated flag wins
CANDIDATES=${CANDIDATES:-"a --draft-layers 2 --batch-size 32 --anchors-per-seq 32 --lr 8e-4 --seed 1
b --init-from $D0 --batch-size 32 --anchors-per-seq 32 --lr 3e-4 --warmup-steps 200 --seed 2
c --draft-layers 2 --batch-size 48 --anchors-per-seq 32 --lr 1e-3 --seed 3"}
NAMES=""
while read -r name args; do
  [ -n "$name" ] || continue; NAMES="$NAMES $name"
  eval "train $name $args" &
done <<< "$CANDIDATES"
wait
stage drafters 0 $((SECONDS-t)); for n in $NAMES; do echo "-- $n"; tail -n 8 $L/drafter_$n.log; done
mkdir -p $W/ship
for n in $NAMES; do
  [ -d $W/$n/drafter ] || continue
  python - $W/$n/drafter $W/ship/$n <<'PY'
import sys, torch
from dflash import DFlashDraftModel
m = DFlashDraftModel.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
m.config.layers.dtype = "bfloat16"
m.save_pretrained(sys.argv[2])
PY
  cp $W/$n/train_log.jsonl $L/train_log_$n.jsonl
done
tar czf "$OUT/logs.tgz" -C $W logs
for n in $NAMES; do [ -d $W/ship/$n ] && tar czf "$OUT/drafter_$n.tgz" -C $W/ship $n; done  # one file each: a call returns files of limited size
ls -la "$OUT"
