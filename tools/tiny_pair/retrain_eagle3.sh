#!/usr/bin/env bash
# Train the tiny pair's EAGLE-3 head with the DFlash drafter's data and budget, on one GPU,
# and choose it on decoded τ of the validation headers.
#   1. the target's continuations, made exactly as tools/tiny_pair/retrain_drafter.sh makes
#      the drafter's (same generators, flags and seeds): every TRAINING-split header greedy and
#      $SAMPLED_COPIES times (default 1) sampled at T = 1, $WINDOWS (default 16,384) random
#      training windows, and with $PKG_PROMPTS the training packages' headers
#      (tools.tiny_pair.package_train_prompts; .gz is unpacked); the validation headers'
#      continuations are the validation data and are never trained on.  Each generator stops
#      starting batches 30 s before $GEN_SECONDS.  The measured, validation and fresh sets
#      are never read;
#   2. candidates in parallel, one per line of $CANDIDATES (a name, then dflash.eagle3.train
#      arguments; $E0 is the shipped head, for fine-tuning rounds).  Every candidate gets the
#      full draft vocabulary (4,096), an MLP as wide as the target's (896), the reference taps,
#      7 unrolled steps, windows from document starts, bf16 autocast, and a cosine decay that
#      follows the clock ($TRAIN_SECONDS), so a run cut by time ends at its floor rate.  With
#      `--compile` among its arguments a candidate's step runs 2.5 times as fast on an H100
#      (the first step carries a compile of about a minute); the default candidates have it;
#   3. the choice: every 6th of the 152 validation headers (26) decoded with the shipped head
#      and each candidate through `python -m bastion.benchmark` (fp32, T = 0, 128 new tokens,
#      outputs checked against AR's) at each of $SELECT_TREES, the first deciding
#      (tools/tiny_pair/pick_eagle3.py); its table is $OUT/pick.md.  The winner, if it beats
#      the shipped head, comes back as $OUT/eagle3_<name>.tgz in bf16 (under 10 MB).
# Budget: the shipped drafter had about 30k GPU steps over about 0.6B token positions, in
# rounds of one device call each (docs/tiny-pair.md, steps 6-7).  One call here trains
# about $TRAIN_SECONDS of steps per candidate; later rounds fine-tune the previous winner
# (`--init-from $E0` after shipping it) on new continuations (a new $DATA_SEED), until the
# token positions in $OUT/pick.md add up to the drafter's or decoded τ stops rising (for the
# tiny head it levelled off at 0.41 of them: docs/tiny-pair.md).
# Run from the repository root with the CPU-built build/ (train_prompts.jsonl,
# valid_prompts.jsonl, train.txt.gz; docs/tiny-pair.md, steps 1-2):
#   OUT=out bash tools/tiny_pair/retrain_eagle3.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=4
OUT=${OUT:-$PWD/gpu_out}; W=${WORK:-/tmp/tiny_e3}; C=${BUILD:-build}; L=$W/logs
TT=dflash/assets/tiny/target; E0=dflash/assets/tiny/eagle3; TAPS=1,3,4; MLP=896
GEN_SECONDS=${GEN_SECONDS:-150}; TRAIN_SECONDS=${TRAIN_SECONDS:-240}
DATA_SEED=${DATA_SEED:-20}; SAMPLED_COPIES=${SAMPLED_COPIES:-1}; WINDOWS=${WINDOWS:-16384}
SELECT_TREES=${SELECT_TREES:-"7/10/60 3/4/12"}
mkdir -p "$OUT" "$L"
# an earlier run's candidates (their checkpoints would be resumed on other data) and choice
# in the same $WORK must not reach this one
rm -rf "${W:?}/pick" "${W:?}/ship"
stage() { echo "== $1 rc=$2 $3s" | tee -a "$L/env.txt"; }
# the data, shared with the other recipe; its settings travel in the environment
OUT=$OUT WORK=$W BUILD=$C GEN_SECONDS=$GEN_SECONDS DATA_SEED=$DATA_SEED SAMPLED_COPIES=$SAMPLED_COPIES \
  WINDOWS=$WINDOWS bash tools/tiny_pair/distill_gpu.sh || exit 1  # PKG_* reach it from the caller's environment
t=$SECONDS
train() { name=$1; shift; timeout $((TRAIN_SECONDS+200)) python -m dflash.eagle3.train --target $TT --data $W/d.npy \
  --val-data $W/dv.npy --out $W/$name --target-layer-ids $TAPS --intermediate-size $MLP --ttt-steps 7 --seq-len 512 \
  --doc-windows --steps 6000 --max-seconds $TRAIN_SECONDS --time-schedule --precision bf16 --save-every 100000 \
  --val-every 0 --val-batches 32 --log-every 500 "$@" > "$L/head_$name.log" 2>&1; }
# the kill comes 200 s after the training clock: loading the data before it and the final
# validation and save after it took over 90 s with three candidates sharing the GPU
# one candidate a line: "name dflash.eagle3.train arguments"; the later of a repeated flag wins
CANDIDATES=${CANDIDATES:-"h1 --batch-size 32 --lr 1e-3 --warmup-steps 300 --seed 1 --compile
h2 --batch-size 32 --lr 2e-3 --warmup-steps 300 --seed 2 --compile
h3 --batch-size 64 --lr 2e-3 --warmup-steps 300 --seed 3 --compile"}
NAMES=""
while read -r name args; do
  [ -n "$name" ] || continue; NAMES="$NAMES $name"; rm -rf "${W:?}/$name"
  eval "train $name $args" &
done <<< "$CANDIDATES"
wait
stage heads 0 $((SECONDS-t)); for n in $NAMES; do echo "-- $n"; tail -n 4 $L/head_$n.log; done
t=$SECONDS
CANDS=(--candidate "shipped=$E0"); for n in $NAMES; do [ -d $W/$n/head ] && CANDS+=(--candidate "$n=$W/$n/head"); done
read -r -a TREES <<< "$SELECT_TREES"
python -m tools.tiny_pair.pick_eagle3 --prompt-file $C/valid_prompts.jsonl --every 6 "${CANDS[@]}" \
  "${TREES[@]/#/--tree=}" --max-new-tokens 128 --device ${PICK_DEVICE:-cuda} --engine eager --jobs 8 --out $W/pick \
  --ship $W/ship > "$L/pick.log" 2>&1
stage pick $? $((SECONDS-t)); tail -n 12 "$L/pick.log"
cp $W/pick/pick.md $W/pick/pick.json "$OUT/" 2>/dev/null
for n in $NAMES; do cp $W/$n/train_log.jsonl $L/train_log_$n.jsonl 2>/dev/null; done
tar czf "$OUT/logs.tgz" -C $W logs
if [ -f $W/ship/model.safetensors ]; then  # the winner beat the shipped head
  best=$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["best"])' $W/pick/pick.json)
  tar czf "$OUT/eagle3_$best.tgz" -C $W ship
fi
ls -la "$OUT"
