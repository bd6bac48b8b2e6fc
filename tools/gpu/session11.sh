#!/usr/bin/env bash
# One H200 call (device tool, writes into $OUT), session 11: the fused node count checked
# against the torch reference on the GPU (pytest, compiled Triton), what the rule's step
# graphs cost now (rank_graphs.sh), and the tiny experiment end to end from a clean copy
# (session6_e2e.sh, pipeline only).  Needs the wheels in .whl, pytest's included (carry .whl).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
PYTHONPATH=/tmp/site:$PWD timeout ${TEST_LIMIT:-120} python3 -m pytest -q -p no:cacheprovider \
  tests/speculative/test_count_kernel.py > "$OUT/gpu_tests.log" 2>&1
echo "== gpu tests rc=$?" | tee -a "$OUT/gpu_tests.log"
bash tools/gpu/rank_graphs.sh
E3_LIMIT=0 E2E_LIMIT=${E2E_LIMIT:-220} bash tools/gpu/session6_e2e.sh
