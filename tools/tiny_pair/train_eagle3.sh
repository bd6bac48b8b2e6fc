#!/usr/bin/env bash
# Train the tiny pair's EAGLE-3 head on the CPU and ship it as dflash/assets/tiny/eagle3/.
#
# One command, from the repository root (a few minutes on 2 CPU cores):
#
#     bash tools/tiny_pair/train_eagle3.sh [WORK_DIR]
#
# It reads whatever target dflash/assets/tiny/target holds, so after the tiny target is
# replaced, rerunning this script retrains a matching head.  Steps:
#   1. prompt source: the non-held-out stdlib training text (tools/tiny_pair/corpus.py),
#      tokenised with the target's tokenizer;
#   2. self-distillation data: the target's own continuations (dflash.distill_data);
#   3. the head, with the training-time test (dflash.eagle3.train): the reference taps
#      [1, L//2-1, L-4] of an L-layer target (below 7 layers they collide, so 0, L//2-1, L-2),
#      a draft vocabulary of the 1024 most frequent tokens, MLP 384;
#   4. bf16 copy into dflash/assets/tiny/eagle3/.
set -euo pipefail
WORK=${1:-/tmp/tiny_eagle3}
TARGET=$(python -c 'from bastion.models.registry import tiny_dir; print(tiny_dir("target"))')
STEPS=${EAGLE3_STEPS:-120}
TAPS=$(python -c 'import json,sys; L=json.load(open(sys.argv[1]+"/config.json"))["num_hidden_layers"]; print(",".join(map(str, [1, L//2-1, L-4] if L >= 7 else [0, L//2-1, L-2])))' "$TARGET")
mkdir -p "$WORK"

# 1. corpus text and its token ids
if [ ! -f "$WORK/corpus/train.txt" ]; then
    python -m tools.tiny_pair.corpus --out "$WORK/corpus"
fi
python - "$TARGET" "$WORK" <<'PY'
import sys
import numpy as np
from dflash import train_data as td
from dflash import train_setup as ts
target, work = sys.argv[1], sys.argv[2]
ids = td.load_token_ids(f"{work}/corpus/train.txt", ts.load_tokenizer(target), cache_dir=work)
np.save(f"{work}/train_ids.npy", ids.astype(np.int32))
print(f"corpus: {ids.size:,} tokens")
PY

# 2. the target's own continuations: 256 prompts of 48 tokens, 160 new tokens, 10 % sampled
python -m dflash.distill_data --target "$TARGET" --data "$WORK/train_ids.npy" --out "$WORK/distill.npy" \
    --prompts 256 --prompt-len 48 --new-tokens 160 --batch-size 64 --sample-frac 0.1 --seed 0 --device cpu --dtype float32

# 3. the head
python -m dflash.eagle3.train --target "$TARGET" --data "$WORK/distill.npy" --out "$WORK/run" \
    --target-layer-ids "$TAPS" --draft-vocab-size 1024 --intermediate-size 384 \
    --ttt-steps 7 --steps "$STEPS" --batch-size 8 --seq-len 160 --lr 2e-3 --seed 0 \
    --device cpu --target-dtype fp32 --log-every 50

# 4. ship it in bf16 (d2t / t2d keep their integer / bool types)
python - "$WORK/run/head" dflash/assets/tiny/eagle3 <<'PY'
import sys
import torch
from dflash.eagle3.checkpoint import load_eagle3, save_eagle3
head = load_eagle3(sys.argv[1], dtype=torch.bfloat16)
save_eagle3(head, sys.argv[2], layout="eagle")
print(f"shipped {sum(p.numel() for p in head.parameters()):,} parameters to {sys.argv[2]}")
PY
