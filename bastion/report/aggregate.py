"""Aggregation of decode records into per-prompt, per-step and per-cell tables.

A cell is (hardware, model, dataset, temperature, method); ``method`` is ``ar``,
``dflash``, ``bastion`` (adaptive) or ``bastion-b<N>`` (fixed budget N).  Speedup is
the ratio of mean times per output token, AR's over the method's, within the same
(hardware, model, dataset, temperature): a response's time per output token is its
decode seconds over its output tokens, and each mean is over the cell's responses of
more than one token (a one-token response has no decode phase), as the original
release's benchmark computes it.  It is neither the mean of per-response ratios nor
total seconds over total tokens.  tau is tokens committed per target forward, pooled
over all steps of the cell: total committed over total steps (the release instead
averages each response's mean).  At T = 0 every row also says whether the method's
output equals AR's for the same prompt and turn (``same_as_ar``; a cell holds the
fraction): speculative decoding is lossless, so anything below 1 in fp32 is a bug, and in
bf16 it measures how often kernel rounding flips a near-tie.  Every row carries the
fingerprint it was made with.
"""

from __future__ import annotations

import csv
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bastion.defaults import ablation_method
from bastion.report import drift_check
from bastion.results.records import read_records

FP_FIELDS = ("device_name", "driver", "cuda", "torch", "transformers", "dtype", "attn_impl", "engine", "bastion",
             "cuda_visible_devices", "host")
CELL_KEYS = ("hardware", "model", "dataset", "temperature", "method")


def cell_method(rec: dict[str, Any]) -> str:
    """The cell's method: a fixed-budget BASTION run is its own method of the ablation."""
    return ablation_method(rec["budget"]) if rec["method"] == "bastion" and rec.get("budget") else rec["method"]


def _fp(rec: dict[str, Any]) -> dict[str, Any]:
    fp = rec.get("fingerprint", {})
    return {f"fp_{k}": fp.get(k, "") for k in FP_FIELDS}


def _response_key(r: dict[str, Any]) -> tuple:
    return (r["hardware"], r["model"], r.get("dataset") or r.get("dataset_arg"), float(r["temperature"]),
            r["prompt_index"], r["turn"])


def _same_as_ar(r: dict[str, Any], ar_outputs: dict[tuple, list[int]]) -> bool | str:
    """Whether a greedy response equals AR's; "" where that is not defined (T > 0, or no AR record)."""
    ref = ar_outputs.get(_response_key(r))
    if float(r["temperature"]) > 0 or ref is None:
        return ""
    return list(r["output_ids"]) == ref


def per_prompt_rows(recs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    recs = list(recs)
    ar_outputs = {_response_key(r): list(r["output_ids"]) for r in recs if r["method"] == "ar"}
    rows = []
    for r in recs:
        acc = r["acceptance_lengths"]
        rows.append({
            "hardware": r["hardware"], "model": r["model"], "dataset": r.get("dataset") or r.get("dataset_arg"),
            "temperature": float(r["temperature"]), "method": cell_method(r), "budget": r.get("budget") or "",
            "prompt_index": r["prompt_index"], "turn": r["turn"], "num_prompt_tokens": r["num_prompt_tokens"],
            "num_output_tokens": r["num_output_tokens"], "decode_seconds": r["decode_seconds"],
            "prefill_seconds": r["prefill_seconds"],
            "tpot_s": r["decode_seconds"] / r["num_output_tokens"] if r["num_output_tokens"] else float("nan"),
            "num_steps": len(acc), "committed": int(sum(acc)), "tau": float(np.mean(acc)) if acc else float("nan"),
            "mean_tree_size": float(np.mean(r["tree_sizes"])) if r["tree_sizes"] else float("nan"),
            "stop_reason": r["stop_reason"], "same_as_ar": _same_as_ar(r, ar_outputs), **_fp(r),
        })
    return rows


def step_rows(recs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in recs:
        base = {"hardware": r["hardware"], "model": r["model"], "dataset": r.get("dataset") or r.get("dataset_arg"),
                "temperature": float(r["temperature"]), "method": cell_method(r), "prompt_index": r["prompt_index"],
                "turn": r["turn"]}
        for i, (a, n, c) in enumerate(zip(r["acceptance_lengths"], r["tree_sizes"], r["contexts"])):
            rows.append({**base, "step": i, "committed": a, "tree_size": n, "context": c})
    return rows


def _mean_tree_size(rs: Sequence[dict[str, Any]]) -> float:
    """Tree size per step over the cell's steps; a response without steps (one token) has no trees to count."""
    stepped = [r for r in rs if r["num_steps"]]
    if not stepped:
        return float("nan")
    return float(np.average([r["mean_tree_size"] for r in stepped], weights=[r["num_steps"] for r in stepped]))


def cell_rows(prompt_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell: ``tpot_s`` the mean of its responses' times per output token, ``speedup``
    AR's ``tpot_s`` over the method's, ``tau`` total committed over total steps (module docstring)."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in prompt_rows:
        groups[tuple(r[k] for k in CELL_KEYS)].append(r)
    cells = []
    for key, rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        timed = [r for r in rs if r["num_output_tokens"] > 1]
        steps = sum(r["num_steps"] for r in rs)
        cell = dict(zip(CELL_KEYS, key))
        cell.update({
            "budget": rs[0]["budget"], "responses": len(rs), "tokens": int(sum(r["num_output_tokens"] for r in rs)),
            "decode_seconds": float(sum(r["decode_seconds"] for r in rs)),
            "tpot_s": float(np.mean([r["tpot_s"] for r in timed])) if timed else float("nan"),
            "tau": sum(r["committed"] for r in rs) / steps if steps else float("nan"),
            "mean_tree_size": _mean_tree_size(rs),
        })
        cell["tok_per_s"] = 1.0 / cell["tpot_s"] if cell["tpot_s"] > 0 else float("nan")
        compared = [r["same_as_ar"] for r in rs if r["same_as_ar"] != ""]
        cell["same_as_ar"] = sum(map(bool, compared)) / len(compared) if compared else float("nan")
        for f in FP_FIELDS:
            cell[f"fp_{f}"] = "|".join(sorted({str(r[f"fp_{f}"]) for r in rs}))
        cells.append(cell)
    ar = {tuple(c[k] for k in CELL_KEYS[:4]): c["tpot_s"] for c in cells if c["method"] == "ar"}
    for c in cells:
        base = ar.get(tuple(c[k] for k in CELL_KEYS[:4]))
        c["speedup"] = base / c["tpot_s"] if base and c["tpot_s"] > 0 else float("nan")
    return cells


def write_csv(rows: Sequence[dict[str, Any]], path: str | os.PathLike, fields: Sequence[str] = ()) -> None:
    """``rows`` as a CSV, written whole or not at all; ``fields`` heads a file of no rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fields = list(rows[0]) if rows else list(fields)
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def aggregate(decode_files: Sequence[str | os.PathLike], per_prompt: str, cells: str, steps: str,
              same_size: str | None = None) -> int:
    """Write the per-prompt, cell and step CSVs; with ``same_size``, the ablation's drift check too
    (:mod:`bastion.report.drift_check`), each of its lines also printed for the job log."""
    recs = [r for path in decode_files for r in read_records(path)]
    if not recs:
        raise ValueError("no decode records to aggregate")
    prompts = per_prompt_rows(recs)
    cell_table, step_table = cell_rows(prompts), step_rows(recs)
    write_csv(prompts, per_prompt)
    write_csv(cell_table, cells)
    write_csv(step_table, steps)
    if same_size is not None:
        checks = drift_check.same_size_rows(cell_table, step_table)
        write_csv(checks, same_size, drift_check.FIELDS)
        for row in checks:
            print(f"same-size check: {drift_check.describe(row)}")
    return len(recs)
