"""A projection, not a measurement: Qwen3-8B tok/s on one H200 from measured step costs and published τ.

    tok/s(AR)      = 1 / t_AR
    tok/s(DFlash)  = τ_DFlash / t_DFlash-step
    tok/s(BASTION) = tok/s(DFlash) * (S_BASTION / S_DFlash)

``t_AR`` and ``t_DFlash-step`` are this project's compiled-engine measurements on an H200
(context 512; ``benchmarks/reference/h200_anchor_2026-12-01.json``, or ``--measured`` for a
newer ``benchmarks.static_engine`` JSON), ``τ_DFlash`` is the DFlash README's acceptance
length for Qwen3-8B at T = 0 per dataset, and since no BASTION τ is published, BASTION is
projected from the paper's speedup ratio over DFlash on the same dataset (A100).  SGLang's
published DFlash throughput (B200, concurrency 1) stands beside it for scale.

    python -m benchmarks.projection [--measured static_engine.json] [--out projection.md]
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent / "reference"


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


def project(ar_ms: float, dflash_step_ms: float) -> list[dict[str, object]]:
    paper = {r["dataset"]: r for r in _csv("paper_main_results.csv")}
    rows = []
    for r in _csv("dflash_readme_results.csv"):
        tau = float(r["q8b_t0_tau"])
        dflash = 1e3 * tau / dflash_step_ms
        ratio = float(paper[r["dataset"]]["bastion"]) / float(paper[r["dataset"]]["dflash"])
        rows.append({"dataset": r["dataset"], "ar": 1e3 / ar_ms, "dflash_tau": tau, "dflash": dflash,
                     "bastion_over_dflash": ratio, "bastion": dflash * ratio})
    n = len(rows)
    rows.append({"dataset": "average", **{k: sum(r[k] for r in rows) / n
                                          for k in ("ar", "dflash_tau", "dflash", "bastion_over_dflash", "bastion")}})
    return rows


def to_markdown(rows: list[dict[str, object]], ar_ms: float, dflash_step_ms: float, source: str) -> str:
    sg = _csv("sglang_dflash.csv")[0]
    lines = [
        "**Projection, not a measurement**: Qwen3-8B, T = 0, one H200, compiled engine, context 512.",
        f"Measured step costs ({source}): AR {ar_ms:.3f} ms/token, DFlash step {dflash_step_ms:.3f} ms.",
        "DFlash τ: the DFlash README (Qwen3-8B, T = 0); BASTION: DFlash × the paper's BASTION/DFlash speedup ratio (A100).",
        "",
        "| dataset | AR tok/s | DFlash τ | DFlash tok/s | BASTION/DFlash (paper) | BASTION tok/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['ar']:.0f} | {r['dflash_tau']:.2f} | {r['dflash']:.0f} | "
                     f"{r['bastion_over_dflash']:.2f}x | {r['bastion']:.0f} |")
    lines += ["", f"For scale: {sg['system']} on {sg['device']}, {sg['model']}, concurrency {sg['concurrency']}: "
                  f"about {float(sg['tok_per_s']):,.0f} tok/s (published)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", default=None, help="a benchmarks.static_engine JSON with ar and overhead sections")
    ap.add_argument("--out", default=None, help="also write the Markdown table here")
    args = ap.parse_args(argv)
    ar, dfl, source = step_costs(args.measured)
    text = to_markdown(project(ar, dfl), ar, dfl, source)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
