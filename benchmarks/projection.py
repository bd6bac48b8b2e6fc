"""A projection, not a measurement: Qwen3-8B tok/s on one H200 from measured step costs and published τ.

    tok/s(AR)      = 1 / t_AR
    tok/s(DFlash)  = τ_DFlash / t_DFlash-step
    tok/s(BASTION) = tok/s(DFlash) * (S_BASTION / S_DFlash)
    tok/s(EAGLE-3) = τ_EAGLE-3 / t_EAGLE-3-step

``t_AR`` and ``t_DFlash-step`` are this project's compiled-engine measurements on an H200
(context 512; ``benchmarks/reference/h200_anchor_2026-12-01.json``, or ``--measured`` for a
newer ``benchmarks.static_engine`` JSON), ``τ_DFlash`` is the DFlash README's acceptance
length for Qwen3-8B at T = 0 per dataset, and since no BASTION τ is published, BASTION is
projected from the paper's speedup ratio over DFlash on the same dataset (A100).  SGLang's
published DFlash throughput (B200, concurrency 1) stands beside it for scale.

EAGLE-3's step is this project's measurement at the same shape on the H200 with the
reference tree (depth 7, top-k 10, 60 nodes, context 512; docs/performance.md, "EAGLE-3",
``python -m benchmarks.eagle3_cost``, or ``--eagle3-measured`` for a newer JSON of it): the head's draft, the 60-node verification on the compiled engine and the commit.
Its τ is the one the same DFlash README table publishes for EAGLE-3 on Qwen3-8B at T = 0
per dataset (the RedHatAI speculator, with its own draft length, not the 60-node tree: a
tree accepts at least as much, so this τ is a floor for the tree's).  The paper's own
EAGLE-3 speedups (A100) stand beside the projected ones.

    python -m benchmarks.projection [--measured static_engine.json] [--eagle3-measured eagle3_cost.json] [--out projection.md]
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent / "reference"
# EAGLE-3 at the Qwen3-8B shape, H200, bf16, reference tree 7/10/60, context 512, ms (docs/performance.md,
# "EAGLE-3": tools/gpu/qwen3_8b_eagle3_cost.sh at 2df87c0): the draft ran eagerly, verification on the compiled engine
EAGLE3_H200 = {"draft": 2.48, "verify": 6.44, "commit": 0.08}
EAGLE3_H200_SOURCE = ("docs/performance.md, EAGLE-3 at the Qwen3-8B shape, 6a7bdaf (compiled engine, fused head; "
                      "medians of the step's parts, commit with the tree build and acceptance)")


def _csv(name: str) -> list[dict[str, str]]:
    lines = (REFERENCE / name).read_text().splitlines()
    return list(csv.DictReader(line for line in lines if not line.startswith("#")))


def step_costs(measured: str | None) -> tuple[float, float, str]:
    """(AR ms per token, DFlash ms per step, where they come from) at context 512, compiled engine."""
    if measured:
        data = json.loads(Path(measured).read_text())
        ctx = min(r["context"] for r in data["ar"])
        ar = [r["compiled_ms"] for r in data["ar"] if r["context"] == ctx and "compiled_ms" in r][0]
        dfl = [r["step_ms_no_sync"] for r in data["overhead"]
               if r["method"] == "dflash" and r["context"] == ctx and r.get("engine") == "compiled"][0]
        return ar, dfl, measured
    anchor = json.loads((REFERENCE / "h200_anchor_2026-12-01.json").read_text())
    ar = anchor["ar_ms_per_token"]["this_project_compiled_engine"]["c512"]
    dfl = anchor["compiled_engine_step_ms"]["c512_dflash_16"]["step"]
    return ar, dfl, "benchmarks/reference/h200_anchor_2026-12-01.json"


def eagle3_step_cost(measured: str | None) -> tuple[dict[str, float], str]:
    """(EAGLE-3's draft, verify and commit ms at the reference tree and the shortest context, where they come from)."""
    if measured:
        data = json.loads(Path(measured).read_text())
        steps = [r for r in data.get("step", []) if r["engine"] == "compiled"]
        if steps:  # the whole step on the compiled engine, the fused head's draft in it
            r = min(steps, key=lambda r: r["context"])
            return {"draft": r["t_draft_ms"], "verify": r["t_verify_ms"],
                    "commit": r["t_tree_ms"] + r["t_accept_ms"] + r["t_commit_ms"]}, measured
        ctx = min(r["context"] for r in data["draft"])
        draft = [r["draft_ms"] for r in data["draft"] if r["context"] == ctx][0]
        verify = [r for r in data["verify"] if r["context"] == ctx and r["engine"] == "compiled"][0]
        return {"draft": draft, "verify": verify["verify_ms"], "commit": verify["commit_ms"]}, measured
    return dict(EAGLE3_H200), EAGLE3_H200_SOURCE


AVERAGED = ("ar", "dflash_tau", "dflash", "bastion_over_dflash", "bastion", "eagle3_tau", "eagle3", "eagle3_speedup",
            "eagle3_paper")


def project(ar_ms: float, dflash_step_ms: float, eagle3_step_ms: float = sum(EAGLE3_H200.values())
            ) -> list[dict[str, object]]:
    paper = {r["dataset"]: r for r in _csv("paper_main_results.csv")}
    rows = []
    for r in _csv("dflash_readme_results.csv"):
        tau = float(r["q8b_t0_tau"])
        dflash = 1e3 * tau / dflash_step_ms
        ratio = float(paper[r["dataset"]]["bastion"]) / float(paper[r["dataset"]]["dflash"])
        e3_tau = float(r["eagle3_8b_t0_tau"])
        eagle3 = 1e3 * e3_tau / eagle3_step_ms
        rows.append({"dataset": r["dataset"], "ar": 1e3 / ar_ms, "dflash_tau": tau, "dflash": dflash,
                     "bastion_over_dflash": ratio, "bastion": dflash * ratio, "eagle3_tau": e3_tau,
                     "eagle3": eagle3, "eagle3_speedup": eagle3 * ar_ms / 1e3,
                     "eagle3_paper": float(paper[r["dataset"]]["eagle3"])})
    n = len(rows)
    rows.append({"dataset": "average", **{k: sum(r[k] for r in rows) / n for k in AVERAGED}})
    return rows


def to_markdown(rows: list[dict[str, object]], ar_ms: float, dflash_step_ms: float, source: str,
                eagle3_parts: dict[str, float] | None = None, eagle3_source: str = EAGLE3_H200_SOURCE) -> str:
    sg = _csv("sglang_dflash.csv")[0]
    parts = dict(EAGLE3_H200) if eagle3_parts is None else eagle3_parts
    eagle3_step_ms = sum(parts.values())
    avg = rows[-1]
    lines = [
        "**Projection, not a measurement**: Qwen3-8B, T = 0, one H200, compiled engine, context 512.",
        f"Measured step costs ({source}): AR {ar_ms:.3f} ms/token, DFlash step {dflash_step_ms:.3f} ms; "
        f"EAGLE-3 step at the 7/10/60 tree {eagle3_step_ms:.2f} ms ({eagle3_source}).",
        "DFlash and EAGLE-3 τ: the DFlash README (Qwen3-8B, T = 0; EAGLE-3 = the RedHatAI speculator); "
        "BASTION: DFlash × the paper's BASTION/DFlash speedup ratio (A100).",
        "",
        "| dataset | AR tok/s | DFlash τ | DFlash tok/s | BASTION/DFlash (paper) | BASTION tok/s "
        "| EAGLE-3 τ | EAGLE-3 tok/s | EAGLE-3/AR | EAGLE-3/AR (paper, A100) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['ar']:.0f} | {r['dflash_tau']:.2f} | {r['dflash']:.0f} | "
                     f"{r['bastion_over_dflash']:.2f}x | {r['bastion']:.0f} | {r['eagle3_tau']:.2f} | "
                     f"{r['eagle3']:.0f} | {r['eagle3_speedup']:.2f}x | {r['eagle3_paper']:.2f}x |")
    lines += ["", f"EAGLE-3 averages {avg['eagle3_speedup']:.2f}x AR here against the paper's {avg['eagle3_paper']:.2f}x: "
                  f"its draft is {parts['draft']:.2f} of its {eagle3_step_ms:.2f} ms step, and its τ "
                  f"({avg['eagle3_tau']:.2f} on average) is the published one above, not a measurement."]
    lines += ["", f"For scale: {sg['system']} on {sg['device']}, {sg['model']}, concurrency {sg['concurrency']}: "
                  f"about {float(sg['tok_per_s']):,.0f} tok/s (published)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", default=None, help="a benchmarks.static_engine JSON with ar and overhead sections")
    ap.add_argument("--eagle3-measured", default=None, help="a benchmarks.eagle3_cost JSON with draft and verify sections")
    ap.add_argument("--out", default=None, help="also write the Markdown table here")
    args = ap.parse_args(argv)
    ar, dfl, source = step_costs(args.measured)
    e3, e3_source = eagle3_step_cost(args.eagle3_measured)
    text = to_markdown(project(ar, dfl, sum(e3.values())), ar, dfl, source, e3, e3_source)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
