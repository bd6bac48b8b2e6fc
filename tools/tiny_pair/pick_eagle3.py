"""Choose an EAGLE-3 head for the tiny pair on decoded τ of the validation headers, and ship it.

Teacher-forced accuracy predicts decoding only roughly (the drafter's rounds found this,
docs/tiny-pair.md), so candidates are decoded: each head runs the project's own CLI
(``python -m bastion.benchmark --methods ar,eagle3``, fp32, T = 0) on validation headers,
never on the measured, fresh or training sets, at each ``--tree``.  The first tree decides;
ties keep the earlier candidate, so list the shipped head first and a new one must beat it.
Every EAGLE-3 output must equal AR's (fp32, T = 0) or the candidate is refused.

    python -m tools.tiny_pair.pick_eagle3 --prompt-file valid_prompts.jsonl --every 6 \\
        --candidate shipped=dflash/assets/tiny/eagle3 --candidate new=run/head \\
        --tree 7/10/60 --tree 4/4/16 --out pick [--ship dflash/assets/tiny/eagle3]

Writes ``<out>/pick.md`` (one row per candidate: training steps, token positions seen,
training time, validation accuracy per unrolled step, decoded τ per tree) and
``<out>/pick.json``; with ``--ship`` the winner is re-saved in bf16 there (under 10 MB),
unless the winner is the first candidate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bastion.results.records import read_records, summarise
from bastion.runs.eagle3_choice import head_digest

SIZE_LIMIT = 10 * 1000 * 1000  # bytes: the head ships beside the pair, outside its budget, under 10 MB


def training_facts(head_dir: Path) -> dict:
    """Steps, token positions, seconds and final validation accuracy from the run's train_log.jsonl (if any)."""
    log = head_dir.parent / "train_log.jsonl"
    if not log.is_file():
        return {}
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "loss" in r]
    final = [r for r in rows if r.get("event") == "final"]
    out = {"steps": steps[-1]["step"], "tokens_seen": steps[-1].get("tokens_seen"),
           "train_seconds": steps[-1].get("elapsed_s")} if steps else {}
    if final:
        out["val_acc"] = final[-1]["val"]["acc"]
    return out


def decode_command(name: str, head: str, tree: str, args: argparse.Namespace,
                   with_ar: bool) -> tuple[list[str], Path, str]:
    """The CLI call that decodes the prompts with one head at one tree, its records file and the head."""
    out = Path(args.out) / f"{name}_{tree.replace('/', '-')}.jsonl"
    cmd = [sys.executable, "-m", "bastion.benchmark", "--model", args.model, "--dataset", str(args.dataset),
           "--methods", "ar,eagle3" if with_ar else "eagle3", "--dtype", "float32", "--device", args.device,
           "--engine", args.engine, "--max-new-tokens", str(args.max_new_tokens), "--eagle3-model", head,
           "--eagle3-tree", tree,
           "--output", str(out), "--cache-dir", str(Path(args.out) / "cache"), "--quiet"]
    return cmd, out, head


def _stamp(cmd: list[str], head: str) -> dict:
    return {"command": cmd[1:], "head_digest": head_digest(head)}  # cmd[0], the interpreter, may move


def run_all(commands: list[tuple[list[str], Path, str]], jobs: int) -> None:
    """Run the decodes not done yet, ``jobs`` at a time (a GPU has room for several).

    A records file is reused only beside a stamp of the same command and the same head
    bytes: a rerun after a kill skips what is done, while files an earlier pick left in
    the same folder, from another head or another tree order, are decoded again."""
    todo = []
    for cmd, out, head in commands:
        stamp = out.with_suffix(".stamp.json")
        if out.exists() and stamp.exists() and json.loads(stamp.read_text()) == _stamp(cmd, head):
            continue
        out.unlink(missing_ok=True)
        stamp.unlink(missing_ok=True)
        todo.append((cmd, out, head))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for i in range(0, len(todo), max(jobs, 1)):
        procs = []
        for cmd, out, head in todo[i : i + max(jobs, 1)]:
            print("+ " + " ".join(cmd), flush=True)
            procs.append((cmd, out, head, subprocess.Popen(cmd, env=env)))
        failed = [" ".join(c) for c, _, _, p in procs if p.wait() != 0]
        if failed:
            raise SystemExit(f"error: decoding failed: {failed[0]}")
        for cmd, out, head, _ in procs:
            out.with_suffix(".stamp.json").write_text(json.dumps(_stamp(cmd, head)))


def tau_and_equality(path: Path, ar: dict[int, list[int]]) -> tuple[float, int, int]:
    """(decoded τ of eagle3, outputs equal to AR's, outputs) for one records file."""
    records = read_records(path)
    ar.update({r["prompt_index"]: r["output_ids"] for r in records if r["method"] == "ar"})
    e3 = [r for r in records if r["method"] == "eagle3"]
    row = summarise(e3, ["eagle3"])[0]
    return row["tau"], sum(r["output_ids"] == ar[r["prompt_index"]] for r in e3), len(e3)


def ship(head_dir: str, dest: Path) -> int:
    """Re-save ``head_dir`` in bf16 (d2t / t2d keep their integer / bool types) into ``dest``; return its size."""
    import torch

    from dflash.eagle3.checkpoint import load_eagle3, save_eagle3

    head = load_eagle3(head_dir, dtype=torch.bfloat16)
    save_eagle3(head, dest, layout="eagle")
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    if size >= SIZE_LIMIT:
        raise SystemExit(f"error: the head in {dest} takes {size:,} bytes, over the {SIZE_LIMIT:,}-byte limit")
    return size


def table(rows: list[dict], trees: list[str]) -> str:
    head = ("| candidate | steps | token positions | training time | val acc per unrolled step | "
            + " | ".join(f"decoded τ, {t}" for t in trees) + " | outputs = AR |")
    lines = [head, "|---|---:|---:|---:|---|" + "---:|" * len(trees) + "---:|"]
    for r in rows:
        f = r["training"]
        acc = " ".join(f"{a:.3f}" for a in f.get("val_acc", [])) or "-"
        secs = f"{f['train_seconds']:,.0f} s" if f.get("train_seconds") else "-"
        toks = f"{f['tokens_seen']:,}" if f.get("tokens_seen") else "-"
        taus = " | ".join(f"{r['tau'][t]:.2f}" for t in trees)
        lines.append(f"| {r['name']} | {f.get('steps', '-')} | {toks} | {secs} | {acc} | {taus} | "
                     f"{r['equal']}/{r['outputs']} |")
    return "\n".join(lines) + "\n"


def _subset(args: argparse.Namespace) -> Path:
    lines = [ln for ln in Path(args.prompt_file).read_text(encoding="utf-8").splitlines() if ln.strip()]
    path = Path(args.out) / f"prompts_every{args.every}.jsonl"
    path.write_text("".join(ln + "\n" for ln in lines[:: args.every]), encoding="utf-8")
    return path


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m tools.tiny_pair.pick_eagle3", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt-file", required=True, help="validation headers (.jsonl of {turns: [text]})")
    ap.add_argument("--every", type=int, default=1, help="decode every N-th prompt")
    ap.add_argument("--candidate", action="append", required=True, help="name=head folder; the first is the incumbent")
    ap.add_argument("--tree", action="append", help="depth/top-k/total tokens (repeatable; the first decides)")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--jobs", type=int, default=1, help="decodes at a time")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ship", default=None, help="re-save the winner in bf16 into this folder (if it is not the first)")
    args = ap.parse_args(argv)
    trees = args.tree or ["7/10/60"]
    cands = [c.partition("=")[::2] for c in args.candidate]
    if any(not n or not d for n, d in cands) or len({n for n, _ in cands}) != len(cands):
        raise SystemExit(f"error: --candidate {args.candidate}: give distinct name=folder pairs")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    args.dataset = _subset(args)
    commands = {(name, tree): decode_command(name, folder, tree, args, with_ar=(i, j) == (0, 0))
                for i, (name, folder) in enumerate(cands) for j, tree in enumerate(trees)}
    run_all(list(commands.values()), args.jobs)
    rows, ar = [], {}
    for name, folder in cands:
        rows.append({"name": name, "head": folder, "training": training_facts(Path(folder)), "tau": {}})
        for tree in trees:
            tau, equal, n = tau_and_equality(commands[name, tree][1], ar)
            rows[-1]["tau"][tree] = tau
            rows[-1]["equal"], rows[-1]["outputs"] = min(rows[-1].get("equal", equal), equal), n
    wrong = [r["name"] for r in rows if r["equal"] != r["outputs"]]
    if wrong:
        raise SystemExit(f"error: EAGLE-3 outputs of {wrong} differ from AR's (fp32, T = 0): not a valid head")
    best = max(rows, key=lambda r: (r["tau"][trees[0]], -rows.index(r)))
    text = table(rows, trees) + f"\nChosen on decoded τ at {trees[0]}: **{best['name']}**.\n"
    if args.ship and best is not rows[0]:
        size = ship(best["head"], Path(args.ship))
        text += f"Shipped to {args.ship} in bf16 ({size:,} bytes).\n"
    print(text)
    (Path(args.out) / "pick.md").write_text(text)
    result = {"rows": rows, "best": best["name"], "trees": trees, "dataset": str(args.dataset)}
    (Path(args.out) / "pick.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
