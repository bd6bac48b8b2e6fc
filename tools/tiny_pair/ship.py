"""Install a trained tiny pair as the package data of ``dflash`` (bf16, size-checked).

    python -m tools.tiny_pair.ship --target T/target --drafter D/drafter

The target folder (config, safetensors, tokenizer) is copied as is (train_target.py
saves it in bf16); the drafter is re-saved in bf16 through DFlashDraftModel so the
shipped files are exactly what ``from_pretrained`` reads.  The pair (target and
drafter) must stay at or under 32 MiB (33,554,432 bytes) so the package remains small.
Only ``target/`` and ``drafter/`` are replaced: the EAGLE-3 head beside them
(``eagle3/``, tools/tiny_pair/train_eagle3.sh) stays.  A target given as the shipped
folder itself is kept in place (to ship a new drafter alone).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch

from dflash import DFlashDraftModel

LIMIT = 32 * 1024 * 1024
TARGET_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--dest", default=str(Path(__file__).resolve().parents[2] / "dflash" / "assets" / "tiny"))
    args = ap.parse_args(argv)
    dest = Path(args.dest)
    # read the drafter before anything is replaced: it may be the shipped one
    drafter = DFlashDraftModel.from_pretrained(args.drafter, dtype=torch.bfloat16)
    drafter.config.layers.dtype = "bfloat16"
    if Path(args.target).resolve() != (dest / "target").resolve():
        shutil.rmtree(dest / "target", ignore_errors=True)
        (dest / "target").mkdir(parents=True)
        for name in TARGET_FILES:
            shutil.copy2(Path(args.target) / name, dest / "target" / name)
    shutil.rmtree(dest / "drafter", ignore_errors=True)
    drafter.save_pretrained(str(dest / "drafter"))
    total = sum(p.stat().st_size for part in ("target", "drafter") for p in (dest / part).rglob("*") if p.is_file())
    head = sum(p.stat().st_size for p in (dest / "eagle3").rglob("*") if p.is_file())
    print(f"shipped {dest}: pair {total:,} bytes ({total / 2**20:.2f} MiB); EAGLE-3 head beside it {head:,} bytes")
    if total > LIMIT:
        print(f"error: the pair is {total} bytes, over the {LIMIT}-byte limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
