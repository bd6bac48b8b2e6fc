"""The Triton kernel that sets a held row aside in one launch, against the torch writes it replaces."""

from __future__ import annotations

from tests.support.kernel_check import run_kernel_check

# Runs in a subprocess with TRITON_INTERPRET=1 (the kernel's code on the CPU) unless a GPU is there.
KERNEL_CHECK = r"""
import itertools, torch
from bastion.engines.hold_kernel import MAX_TAPS, hold_row, serves

dev = "cuda" if torch.cuda.is_available() else "cpu"
g = torch.Generator().manual_seed(0)
cases = 0
for nt, h, dtype in itertools.product([1, 3, MAX_TAPS], [5, 1100], [torch.float32, torch.bfloat16]):
    taps = [torch.randn(1, 1, h, generator=g).to(dtype).to(dev) for _ in range(nt)]
    rows = torch.full((6, nt * h), 7.0, dtype=dtype, device=dev)
    held = torch.tensor(2 + nt % 3, device=dev)
    at = int(held)
    assert serves(taps, rows)
    hold_row(taps, rows, held)
    want = torch.full_like(rows, 7.0)
    want[at] = torch.cat([t.view(h) for t in taps])
    assert torch.equal(rows, want), (nt, h, dtype)
    assert int(held) == at + 1
    cases += 1
rows = torch.zeros(4, 3 * 8, device=dev)
three = [torch.zeros(1, 1, 8, device=dev) for _ in range(3)]
assert not serves(three[:2], rows), "two rows of 8 do not fill a row of 24"
assert not serves([torch.zeros(1, 1, 8, dtype=torch.float64, device=dev)] + three[1:], rows), "another dtype"
assert not serves([torch.zeros(1, 16, device=dev)[:, ::2]] + three[1:], rows), "a strided row"
assert not serves([torch.zeros(1, 1, 1, device=dev)] * (MAX_TAPS + 1), torch.zeros(4, MAX_TAPS + 1)), "too many taps"
print(f"hold_row equals the torch writes on {cases} cases")
"""


def test_kernel_writes_the_concatenated_row_at_the_count_and_counts_it():
    proc = run_kernel_check(KERNEL_CHECK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hold_row equals the torch writes on 12 cases" in proc.stdout
