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
# the data, shared with the other recipe; its settings travel in the environment
OUT=$OUT WORK=$W BUILD=$C GEN_SECONDS=$GEN_SECONDS DATA_SEED=$DATA_SEED SAMPLED_COPIES=$SAMPLED_COPIES \
  WINDOWS=$WINDOWS bash tools/tiny_pair/distill_gpu.sh || exit 1  # PKG_* reach it from the caller's environment
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
