"""bastion.report.aggregate: speedup, tau and the greedy equality with AR, from records alone."""

from __future__ import annotations

import csv
import json

import pytest

from bastion.report import aggregate


def _rec(method, prompt, out, temperature=0.0, seconds=1.0, acc=(1,)):
    return {
        "hardware": "cpu-x", "model": "tiny", "dataset": "d", "temperature": temperature, "method": method,
        "budget": None, "prompt_index": prompt, "turn": 0, "num_prompt_tokens": 5, "num_output_tokens": len(out),
        "output_ids": list(out), "decode_seconds": seconds, "prefill_seconds": 0.1, "acceptance_lengths": list(acc),
        "tree_sizes": [16] * len(acc), "contexts": [5] * len(acc), "stop_reason": "max_new_tokens", "fingerprint": {},
    }


def _cells(tmp_path, recs):
    src = tmp_path / "recs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = {k: tmp_path / f"{k}.csv" for k in ("prompts", "cells", "steps")}
    aggregate.aggregate([src], out["prompts"], out["cells"], out["steps"])
    return {r["method"]: r for r in csv.DictReader(open(out["cells"]))}, list(csv.DictReader(open(out["prompts"])))


def test_same_as_ar_counts_prompts_whose_greedy_output_differs(tmp_path):
    recs = [_rec("ar", 0, [1, 2, 3, 4], seconds=4.0), _rec("ar", 1, [5, 6, 7, 8], seconds=4.0),
            _rec("dflash", 0, [1, 2, 3, 4], seconds=2.0, acc=(3, 1)), _rec("dflash", 1, [5, 6, 7, 9], seconds=2.0, acc=(3, 1))]
    cells, prompts = _cells(tmp_path, recs)
    assert float(cells["ar"]["same_as_ar"]) == 1.0
    assert float(cells["dflash"]["same_as_ar"]) == 0.5  # prompt 1 differs in its last token
    assert [p["same_as_ar"] for p in prompts if p["method"] == "dflash"] == ["True", "False"]
    assert float(cells["dflash"]["speedup"]) == pytest.approx(2.0)
    assert float(cells["dflash"]["tau"]) == pytest.approx(2.0)


def test_same_as_ar_is_undefined_when_sampling(tmp_path):
    recs = [_rec("ar", 0, [1, 2], temperature=1.0), _rec("bastion", 0, [3, 4], temperature=1.0)]
    cells, prompts = _cells(tmp_path, recs)
    assert cells["bastion"]["same_as_ar"] == "nan"
    assert {p["same_as_ar"] for p in prompts} == {""}
