#!/usr/bin/env bash
# Train the bundled tiny pair on one GPU: target, self-distillation data, drafter.
# Run through the device tool with the corpus and tokenizer carried in .carry/tiny_build:
#   bash tools/gpu/train_tiny_pair.sh   (writes into $OUT)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$PWD/gpu_out}; W=/tmp/tiny; C=.carry/tiny_build
mkdir -p "$OUT" "$W"
stage() { echo "== $1 rc=$2 $3s" | tee -a "$OUT/env.txt"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python -c "import torch,transformers,tokenizers;print('torch',torch.__version__,'cuda',torch.version.cuda,'transformers',transformers.__version__,'tokenizers',tokenizers.__version__)"; } | tee "$OUT/env.txt"
t=$SECONDS
timeout 120 python tools/tiny_pair/train_target.py --corpus $C/corpus --tokenizer $C/tokenizer --out $W/t \
  --intermediate-size 640 --steps ${TARGET_STEPS:-700} --batch-size 64 --seq-len 512 --lr 2e-3 --val-every 100 --log-every 100 --no-progress \
  > "$OUT/target.log" 2>&1; stage target $? $((SECONDS-t)); tail -12 "$OUT/target.log"
t=$SECONDS
timeout 200 python -m dflash.distill_data --target $W/t/target --data $W/t/tokens/train.npy --out $W/distill_train.npy \
  --prompts 16384 --prompt-len 64 --new-tokens 320 --batch-size 2048 --sample-frac 0.1 --seed 0 > "$OUT/distill.log" 2>&1
timeout 120 python -m dflash.distill_data --target $W/t/target --data $W/t/tokens/valid.npy --out $W/distill_valid.npy \
  --prompts 256 --prompt-len 64 --new-tokens 320 --batch-size 256 --sample-frac 0.1 --seed 1 >> "$OUT/distill.log" 2>&1
stage distill $? $((SECONDS-t)); grep distill: "$OUT/distill.log"
t=$SECONDS
timeout 300 python -m dflash.train --target $W/t/target --data $W/distill_train.npy --val-data $W/distill_valid.npy \
  --out $W/d --draft-layers 3 --block-size 16 --target-layer-ids 1,3,4 --steps ${DRAFT_STEPS:-4500} --batch-size 32 \
  --seq-len 512 --anchors-per-seq 32 --lr 8e-4 --save-every 500 --log-every 250 --val-batches 32 --no-progress \
  > "$OUT/drafter.log" 2>&1; stage drafter $? $((SECONDS-t)); tail -12 "$OUT/drafter.log"
mkdir -p $W/pair && cp -r $W/t/target $W/pair/target && cp -r $W/d/drafter $W/pair/drafter && cp $W/t/metrics.json $W/pair/target_metrics.json && cp $W/d/train_log.jsonl $W/pair/drafter_train_log.jsonl
tar czf "$OUT/tiny_pair.tgz" -C $W pair
ls -la "$OUT"
