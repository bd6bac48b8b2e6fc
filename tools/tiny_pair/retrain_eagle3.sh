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
#      follows the clock ($TRAIN_SECONDS), so a run cut by time ends at its floor rate;
#   3. the choice: every 6th of the 152 validation headers (26) decoded with the shipped head
#      and each candidate through `python -m bastion.benchmark` (fp32, T = 0, 128 new tokens,
#      outputs checked against AR's) at each of $SELECT_TREES, the first deciding
#      (tools/tiny_pair/pick_eagle3.py); its table is $OUT/pick.md.  The winner, if it beats
#      the shipped head, comes back as $OUT/eagle3_<name>.tgz in bf16 (under 10 MB).
# Budget: the shipped drafter had about 30k GPU steps over about 0.6B token positions, in
# rounds of one device call each (docs/tiny-pair.md, steps 6-7).  One call here trains
# about $TRAIN_SECONDS of steps per candidate; later rounds fine-tune the previous winner
# (`--init-from $E0` after shipping it) on new continuations (a new $DATA_SEED), until the
# token positions in $OUT/pick.md add up to the drafter's.
# Run from the repository root with the CPU-built build/ (train_prompts.jsonl,
# valid_prompts.jsonl, train.txt.gz; docs/tiny-pair.md, steps 1-2):
#   OUT=out bash tools/tiny_pair/retrain_eagle3.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=4
OUT=${OUT:-$PWD/gpu_out}; W=${WORK:-/tmp/tiny_e3}; C=${BUILD:-build}; L=$W/logs
TT=dflash/assets/tiny/target; E0=dflash/assets/tiny/eagle3; TAPS=1,3,4; MLP=896
GEN_SECONDS=${GEN_SECONDS:-150}; TRAIN_SECONDS=${TRAIN_SECONDS:-240}
DATA_SEED=${DATA_SEED:-20}; SAMPLED_COPIES=${SAMPLED_COPIES:-1}; WINDOWS=${WINDOWS:-16384}
PKG_PROMPTS=${PKG_PROMPTS:-}; PKG_SAMPLED_COPIES=${PKG_SAMPLED_COPIES:-1}; PKG_BATCH=${PKG_BATCH:-2048}
SELECT_TREES=${SELECT_TREES:-"7/10/60 3/4/12"}
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
if [[ "$PKG_PROMPTS" == *.gz ]]; then gunzip -kf "$PKG_PROMPTS" || exit 1; PKG_PROMPTS=${PKG_PROMPTS%.gz}; fi
rm -f $W/dp.npy $W/dw.npy $W/dk.npy  # an earlier run's files in the same $WORK must not join this one's data
gen() { timeout $GEN_SECONDS python -m dflash.distill_data --target $TT --max-seconds $((GEN_SECONDS - 30)) "$@"; }
GENS=()
gen --prompt-file $C/train_prompts.jsonl --out $W/dp.npy --new-tokens 256 --batch-size 2048 --sample-frac 1.0 \
  --sampled-copies $SAMPLED_COPIES --seed $DATA_SEED > "$L/distill_prompts.log" 2>&1 & GENS+=("$! distill_prompts")
gen --data $W/train_tokens.npy --out $W/dw.npy --prompts $WINDOWS --prompt-len 64 --new-tokens 256 --batch-size 2048 \
  --sample-frac 0.1 --seed $((DATA_SEED + 1)) > "$L/distill_windows.log" 2>&1 & GENS+=("$! distill_windows")
gen --prompt-file $C/valid_prompts.jsonl --out $W/dv.npy --new-tokens 256 --batch-size 512 --sample-frac 0.5 \
  --sampled-copies 1 --seed 1 > "$L/distill_valid.log" 2>&1 & GENS+=("$! distill_valid")
if [ -n "$PKG_PROMPTS" ]; then
  gen --prompt-file "$PKG_PROMPTS" --out $W/dk.npy --new-tokens 256 --batch-size $PKG_BATCH --sample-frac 1.0 \
    --sampled-copies $PKG_SAMPLED_COPIES --seed $((DATA_SEED + 2)) > "$L/distill_packages.log" 2>&1 &
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
train() { name=$1; shift; timeout $((TRAIN_SECONDS+200)) python -m dflash.eagle3.train --target $TT --data $W/d.npy \
  --val-data $W/dv.npy --out $W/$name --target-layer-ids $TAPS --intermediate-size $MLP --ttt-steps 7 --seq-len 512 \
  --doc-windows --steps 6000 --max-seconds $TRAIN_SECONDS --time-schedule --precision bf16 --save-every 100000 \
  --val-every 0 --val-batches 32 --log-every 500 "$@" > "$L/head_$name.log" 2>&1; }
# the kill comes 200 s after the training clock: loading the data before it and the final
# validation and save after it took over 90 s with three candidates sharing the GPU
# one candidate a line: "name dflash.eagle3.train arguments"; the later of a repeated flag wins
CANDIDATES=${CANDIDATES:-"h1 --batch-size 32 --lr 1e-3 --warmup-steps 300 --seed 1
h2 --batch-size 32 --lr 2e-3 --warmup-steps 300 --seed 2
h3 --batch-size 64 --lr 2e-3 --warmup-steps 300 --seed 3"}
NAMES=""
while read -r name args; do
  [ -n "$name" ] || continue; NAMES="$NAMES $name"
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
