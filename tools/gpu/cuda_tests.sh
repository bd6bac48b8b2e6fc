#!/usr/bin/env bash
# The tests that run compiled kernels only on CUDA (elsewhere they run Triton's interpreter or
# skip): the rule's count kernel, the path ranking and the tree phase's select against their
# torch references, the compiled engine's fused drafter against the drafter module, the row, tile and tree-attention
# kernels against the layers' arithmetic, the hold kernel against the torch writes it replaces.  The pytest summary
# goes to $OUT/cuda_tests.txt.
# One process (`-o addopts=`: the wheels leave pytest-xdist out).  Run from the repository
# root on the GPU machine, with pytest's wheels in .whl
# (`bash tools/gpu/wheels.sh` here, then carry .whl):
#     OUT=out bash tools/gpu/cuda_tests.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout ${TEST_LIMIT:-300} python3 -m pytest -o addopts= -q -p no:cacheprovider tests/speculative/test_count_kernel.py \
  tests/speculative/test_path_rank.py tests/speculative/test_select_kernel.py tests/engines/test_fused_drafter.py \
  tests/engines/test_row_kernels.py tests/engines/test_tree_attention.py tests/engines/test_hold_kernel.py 2>&1 \
  | tail -n 15 | tee "$OUT/cuda_tests.txt"
