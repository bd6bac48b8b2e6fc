#!/usr/bin/env bash
# Train the tiny drafter against an already trained tiny target (carried in .carry/v3):
# self-distillation data from the target, then dflash.train.  Writes into $OUT.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$PWD/gpu_out}; W=/tmp/tiny; V=.carry/v3
mkdir -p "$OUT" "$W"
stage() { echo "== $1 rc=$2 $3s" | tee -a "$OUT/env.txt"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch,transformers;print('torch',torch.__version__,'transformers',transformers.__version__)"; } | tee "$OUT/env.txt"
t=$SECONDS
timeout 90 python -m dflash.distill_data --target $V/target --data $V/valid.npy --out $W/distill_valid.npy \
  --prompts 256 --prompt-len 64 --new-tokens 320 --batch-size 256 --sample-frac 0.1 --seed 1 > "$OUT/distill.log" 2>&1
stage distill_valid $? $((SECONDS-t)); t=$SECONDS
timeout 150 python -m dflash.distill_data --target $V/target --data $V/train.npy --out $W/distill_train.npy \
  --prompts 16384 --prompt-len 64 --new-tokens 320 --batch-size 2048 --sample-frac 0.1 --seed 0 >> "$OUT/distill.log" 2>&1
stage distill_train $? $((SECONDS-t)); grep distill: "$OUT/distill.log"; t=$SECONDS
timeout 300 python -m dflash.train --target $V/target --data $W/distill_train.npy --val-data $W/distill_valid.npy \
  --out $W/d --draft-layers 3 --block-size 16 --target-layer-ids 1,3,4 --steps ${DRAFT_STEPS:-4500} --batch-size 32 \
  --seq-len 512 --anchors-per-seq 32 --lr 8e-4 --save-every 500 --log-every 250 --val-batches 32 --no-progress \
  > "$OUT/drafter.log" 2>&1; stage drafter $? $((SECONDS-t)); tail -14 "$OUT/drafter.log"
tar czf "$OUT/tiny_drafter.tgz" -C $W/d drafter train_log.jsonl 2>/dev/null || tar czf "$OUT/tiny_drafter.tgz" -C $W/d checkpoint train_log.jsonl
ls -la "$OUT"
