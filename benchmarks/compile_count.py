"""Which graphs a GPU run compiles in calibration and which are left for decoding, seen on a CPU.

Runs ``python -m bastion.benchmark`` with every function the compiled engine compiles on
CUDA compiled here too (Inductor's C++ backend: :meth:`bastion.engines.compiled.Compilation.choose`
with ``compile=True``), and prints the frames Dynamo compiled during calibration and during
decoding, and any graph breaks.  In a warm job worker the decode job pays only for the
second set.  Add ``TORCH_LOGS=recompiles,dynamo`` to see which functions and why.

    OMP_NUM_THREADS=1 python -m benchmarks.compile_count --model tiny --dataset stdlib-heldout \\
        --max-samples 2 --max-new-tokens 64 --methods ar,dflash,bastion --n-min 8 \\
        --calib-grid tiny --cache-dir /tmp/compile_count     # a fresh cache dir: it calibrates

Every argument goes to ``bastion.benchmark``.  Compiling on two cores takes a few minutes.
"""

from __future__ import annotations

import sys
import time

from torch._dynamo.utils import counters

import bastion.runs.runner as run_module
from bastion import benchmark
from bastion.engines import compiled


def main(argv: list[str]) -> int:
    choose, calibrate = compiled.Compilation.__dict__["choose"], run_module.calibrate  # the classmethod itself

    def choose_compiled(cls, fused, device, compile=None, kernels=None) -> compiled.Compilation:
        return choose.__func__(cls, fused, device, compile=True, kernels=kernels)

    def calibrate_counted(*args, **kwargs):
        t0 = time.perf_counter()
        out = calibrate(*args, **kwargs)
        print(f"[compile-count] calibration: {dict(counters['frames'])} frames in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr, flush=True)
        counters["frames"].clear()
        return out

    compiled.Compilation.choose, run_module.calibrate = classmethod(choose_compiled), calibrate_counted
    try:
        status = benchmark.main(argv)
    finally:
        compiled.Compilation.choose, run_module.calibrate = choose, calibrate
    print(f"[compile-count] decoding: {dict(counters['frames'])} frames; graph breaks: "
          f"{sum(counters['graph_break'].values())}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
