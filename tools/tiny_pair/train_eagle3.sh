#!/usr/bin/env bash
# Train the tiny pair's EAGLE-3 head on the CPU, on the data the DFlash drafter learned from,
# and (with SHIP=1) install it as dflash/assets/tiny/eagle3/.
#
# One command, from the repository root (about three hours on one shared CPU thread):
#
#     bash tools/tiny_pair/train_eagle3.sh [WORK_DIR]          # default /tmp/tiny_eagle3
#
# The CPU cannot afford the drafter's budget (tools/tiny_pair/retrain_eagle3.sh is the GPU
# recipe, with the drafter's data and steps); this is the same pipeline cut to fit:
#   1. the training- and validation-split function headers (tools/tiny_pair/corpus.py,
#      train_prompts.py; held-out modules are never read);
#   2. the target's greedy continuations ($NEW_TOKENS new tokens, default 128) of $HEADERS
#      (default 2048) training headers drawn at random (seed 0), and of all 152 validation
#      headers (their continuations are the validation data, never trained on);
#   3. the head (dflash.eagle3.train): training-time test with 7 unrolled steps, the
#      reference taps [1, L//2-1, L-4] of an L-layer target, the full draft vocabulary,
#      MLP as wide as the target's, cosine decay that follows the clock ($TRAIN_SECONDS,
#      default 8400), windows that start at a document start, checkpoints every 25 steps
#      (rerunning the script resumes);
#   4. teacher-forced accuracy per position of the DFlash drafter and both heads on the
#      validation continuations (tools/tiny_pair/teacher_accuracy.py), then decoded τ of every
#      6th validation header with both heads at each of $SELECT_TREES (the first decides;
#      tools/tiny_pair/pick_eagle3.py, fp32, T = 0); with SHIP=1 the new head replaces
#      dflash/assets/tiny/eagle3/ (bf16) if it decodes a higher τ than the shipped one.
# Everything runs on one thread (OMP_NUM_THREADS=1): the development machine is shared.
set -euo pipefail
WORK=${1:-/tmp/tiny_eagle3}
PY=${PYTHON:-python}
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# glibc hands large freed blocks back to the kernel by default, and every generation or
# training step then pays page faults for fresh zeroed memory (a third of the CPU time)
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-4294967296} MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-68719476736}
TARGET=$($PY -c 'from bastion.models.registry import tiny_dir; print(tiny_dir("target"))')
HEADERS=${HEADERS:-2048}; NEW_TOKENS=${NEW_TOKENS:-128}; GEN_BATCH=${GEN_BATCH:-256}
GEN_SECONDS=${GEN_SECONDS:-3000}
mkdir -p "$WORK"

# 1. function headers of the training and validation splits
[ -f "$WORK/corpus/train.txt" ] || $PY -m tools.tiny_pair.corpus --out "$WORK/corpus"
[ -f "$WORK/train_prompts.jsonl" ] || $PY -m tools.tiny_pair.train_prompts --split train --out "$WORK/train_prompts.jsonl"
[ -f "$WORK/valid_prompts.jsonl" ] || $PY -m tools.tiny_pair.train_prompts --split valid --out "$WORK/valid_prompts.jsonl"
$PY - "$WORK/train_prompts.jsonl" "$HEADERS" "$WORK/train_subset.jsonl" <<'PY'
import random, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
n = min(int(sys.argv[2]), len(lines))
keep = sorted(random.Random(0).sample(range(len(lines)), n))
open(sys.argv[3], "w", encoding="utf-8").write("".join(lines[i] + "\n" for i in keep))
print(f"{n} of {len(lines)} training headers")
PY

# 2. the target's greedy continuations (validation first: it is small and always complete)
[ -f "$WORK/valid.npy" ] || $PY -m dflash.distill_data --target "$TARGET" --prompt-file "$WORK/valid_prompts.jsonl" \
    --out "$WORK/valid.npy" --new-tokens "$NEW_TOKENS" --batch-size "$GEN_BATCH" --sample-frac 0 --seed 1 \
    --device cpu --dtype float32
[ -f "$WORK/train.npy" ] || $PY -m dflash.distill_data --target "$TARGET" --prompt-file "$WORK/train_subset.jsonl" \
    --out "$WORK/train.npy" --new-tokens "$NEW_TOKENS" --batch-size "$GEN_BATCH" --sample-frac 0 --seed 0 \
    --device cpu --dtype float32 --max-seconds "$GEN_SECONDS"
[ -n "${DATA_ONLY:-}" ] && exit 0

# 3. the head: full vocabulary, MLP as wide as the target's, reference taps; rerunning resumes
read -r TAPS MLP < <($PY -c 'import json,sys; c=json.load(open(sys.argv[1]+"/config.json")); L=c["num_hidden_layers"]
print(",".join(map(str, [1, L//2-1, L-4] if L >= 7 else [0, L//2-1, L-2])), c["intermediate_size"])' "$TARGET")
TRAIN_SECONDS=${TRAIN_SECONDS:-8400}
$PY -m dflash.eagle3.train --target "$TARGET" --data "$WORK/train.npy" --val-data "$WORK/valid.npy" --out "$WORK/run" \
    --target-layer-ids "$TAPS" --intermediate-size "$MLP" --ttt-steps 7 --batch-size 8 --seq-len 256 --doc-windows \
    --steps 1500 --warmup-steps 20 --lr 3e-3 --max-seconds "$TRAIN_SECONDS" --time-schedule --seed 0 \
    --device cpu --target-dtype fp32 --threads 1 --save-every 25 --val-every 100 --val-batches 4 --log-every 10

# 4. the same roots for every drafter, then the choice on decoded τ of validation headers
SHIPPED=$($PY -c 'from bastion.models.registry import tiny_dir; print(tiny_dir("eagle3"))')
$PY -m tools.tiny_pair.teacher_accuracy --target "$TARGET" --data "$WORK/valid.npy" \
    --prompt-file "$WORK/valid_prompts.jsonl" --head shipped="$SHIPPED" --head new="$WORK/run/head" \
    --out "$WORK/accuracy.json"
read -r -a TREES <<< "${SELECT_TREES:-7/10/60 3/4/12 2/2/4}"
$PY -m tools.tiny_pair.pick_eagle3 --prompt-file "$WORK/valid_prompts.jsonl" --every 6 \
    --candidate shipped="$SHIPPED" --candidate new="$WORK/run/head" "${TREES[@]/#/--tree=}" \
    --max-new-tokens 128 --out "$WORK/pick" ${SHIP:+--ship "$SHIPPED"}
