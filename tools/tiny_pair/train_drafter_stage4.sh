#!/usr/bin/env bash
# Stage 4 of the tiny pair, on one GPU (called at the end of train_pair.sh with RUN4=1, or alone):
# denser header data from the chosen target (every training header greedy AND twice
# sampled at T = 1, 160 new tokens, so the drafter sees many contexts per header and
# cannot just memorise one continuation each), plus fresh random-window continuations;
# then the 2-layer drafter continues training on it (--init-from), on 384-token windows
# that start at a document start.
#   TT=<target dir> D2=<2-layer drafter dir> BUILD=build bash tools/tiny_pair/train_drafter_stage4.sh
# Writes the drafter into $WORK/d4 (default /tmp/tiny/d4) and its logs into $WORK/logs.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=4
OUT=${OUT:-$PWD/gpu_out}; W=${WORK:-/tmp/tiny}; C=${BUILD:-build}; L=$W/logs
BUDGET4=${BUDGET4:-250}; TAPS=${TAPS:-1,4,6}
mkdir -p "$OUT" "$L" "$W/tok"; t4=$SECONDS
stage() { echo "== $1 rc=$2 $3s" | tee -a "$L/env.txt"; }
[ -f $W/tok/train.npy ] || python - "$C" "$TT" "$W/tok/train.npy" <<'PY'
import gzip, os, sys, numpy as np
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[2])
p = sys.argv[1] + "/corpus/train.txt"
text = open(p, encoding="utf-8").read() if os.path.exists(p) else gzip.open(sys.argv[1] + "/train.txt.gz", "rt", encoding="utf-8").read()
docs = [d for d in text.split("<|endoftext|>") if d]
ids = []
for enc in tok(docs, add_special_tokens=False)["input_ids"]:
    ids.extend(enc); ids.append(tok.eos_token_id)
np.save(sys.argv[3], np.asarray(ids, dtype=np.int32))
PY
t=$SECONDS
timeout 120 python -m dflash.distill_data --target $TT --prompt-file $C/train_prompts.jsonl --out $W/dp4_train.npy \
  --new-tokens 160 --batch-size 2048 --sample-frac 1.0 --sampled-copies 2 --seed 10 > "$L/distill4_prompts.log" 2>&1 &
timeout 120 python -m dflash.distill_data --target $TT --data $W/tok/train.npy --out $W/dw4_train.npy \
  --prompts 4096 --prompt-len 64 --new-tokens 320 --batch-size 2048 --sample-frac 0.1 --seed 11 > "$L/distill4_windows.log" 2>&1 &
[ -f $W/dp_valid.npy ] || timeout 120 python -m dflash.distill_data --target $TT --prompt-file $C/valid_prompts.jsonl --out $W/dp_valid.npy \
  --new-tokens 256 --batch-size 512 --sample-frac 0.5 --sampled-copies 1 --seed 1 > "$L/distill_valid.log" 2>&1 &
wait
python -c "import numpy as np;np.save('$W/d4_train.npy',np.concatenate([np.load('$W/dp4_train.npy'),np.load('$W/dw4_train.npy')]))"
stage distill4 $? $((SECONDS-t)); grep -h distill: $L/distill4_*.log
t=$SECONDS; S=$((BUDGET4 - (SECONDS - t4) - 30)); echo "drafter4 budget ${S}s" | tee -a "$L/env.txt"
timeout $((S+40)) python -m dflash.train --target $TT --data $W/d4_train.npy --val-data $W/dp_valid.npy --init-from $D2 \
  --out $W/d4 --steps ${DRAFT4_STEPS:-6000} --batch-size 40 --seq-len 384 --anchors-per-seq 24 --lr 6e-4 --doc-windows \
  --max-seconds $S --save-every 100000 --log-every 250 --val-batches 32 --seed 4 --no-progress > "$L/drafter4.log" 2>&1
stage drafter4 $? $((SECONDS-t)); tail -n 9 $L/drafter4.log
