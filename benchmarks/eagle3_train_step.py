"""One EAGLE-3 training step on the bundled tiny pair, eager against ``--compile``.

The step is what ``dflash.eagle3.train`` repeats: the frozen target's taps and logits, the
head unrolled ``--ttt-steps`` times, the weighted loss and its backward (the optimiser
update, a few fused kernels, is left out).  Both paths run the same batch, so the table
also shows how far the compiled loss and gradients are from the eager ones.  The first
compiled call carries the compile; its time is printed apart, and on a GPU it fills
inductor's cache, so a training run started afterwards compiles from it.

    python -m benchmarks.eagle3_train_step                                   # CPU, batch 2
    python -m benchmarks.eagle3_train_step --device cuda --batch-size 32 --precision bf16
"""

from __future__ import annotations

import argparse
import time

import torch

from dflash import train_setup as ts
from dflash.eagle3.checkpoint import load_eagle3
from dflash.eagle3.ttt import target_pass, target_view, weighted_loss

TARGET, HEAD = "dflash/assets/tiny/target", "dflash/assets/tiny/eagle3"


def _step(fn, target, head, ids, weights, dtype) -> tuple[list[float], torch.Tensor]:
    """One forward and backward; returns (loss, per-step losses, accuracies) and the flat gradient."""
    feats, logits = target_pass(target, ids, head.config.layer_ids(int(target.config.num_hidden_layers)))
    head.zero_grad(set_to_none=True)
    loss, losses, accs = fn(head, feats, ids, target_view(head, logits), weights, dtype)
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in head.parameters() if p.grad is not None])
    return torch.cat([loss.detach()[None], losses, accs]).tolist(), grad


def _timed(fn, repeats: int, batch: tuple) -> tuple[list[float], torch.Tensor, float]:
    """The fastest of ``repeats`` steps on ``batch`` (:func:`_step`'s arguments after ``fn``), in ms,
    with the last step's values and gradient."""
    cuda = batch[2].is_cuda  # the windows' ids
    best = float("inf")
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        values, grad = _step(fn, *batch)  # ends reading its values back: the device is done
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return values, grad, best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--ttt-steps", type=int, default=7)
    ap.add_argument("--precision", default="fp32", help="the head's autocast: fp32 or bf16")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    target = ts.load_target(TARGET, ts.resolve_dtype("auto", dev), dev)
    head = load_eagle3(HEAD, target.config).float().to(dev)
    head.attach_target_embeddings(target.get_input_embeddings())
    ids = torch.randint(3, int(target.config.vocab_size), (args.batch_size, args.seq_len), device=dev)
    weights = torch.tensor([0.8**k for k in range(args.ttt_steps)], device=dev)  # [S]
    batch = (target, head, ids, weights, ts.resolve_dtype(args.precision, dev))
    eager, g_eager, ms_eager = _timed(weighted_loss, args.repeats, batch)
    compiled_fn = torch.compile(weighted_loss)
    t0 = time.perf_counter()
    _step(compiled_fn, *batch)
    first_s = time.perf_counter() - t0
    compiled, g_comp, ms_comp = _timed(compiled_fn, args.repeats, batch)
    positions = args.batch_size * args.seq_len
    print(f"device {dev} ({torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}), torch "
          f"{torch.__version__}, batch {args.batch_size} x {args.seq_len}, {args.ttt_steps} unrolled steps, "
          f"{args.precision}")
    print("| path | ms per step | token positions per s |\n|---|---:|---:|")
    for name, ms in (("eager", ms_eager), ("compiled", ms_comp)):
        print(f"| {name} | {ms:.1f} | {positions / ms * 1e3:,.0f} |")
    print(f"first compiled step (the compile): {first_s:.1f} s; speed-up {ms_eager / ms_comp:.2f}x")
    print(f"largest loss/accuracy difference {max(abs(a - b) for a, b in zip(eager, compiled)):.2e}, "
          f"gradient relative difference {float((g_eager - g_comp).norm() / g_eager.norm()):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
