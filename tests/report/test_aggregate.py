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


def test_speedup_is_the_ratio_of_mean_times_per_output_token(tmp_path):
    """Unequal per-response ratios tell the definitions apart: the release's ratio of mean times per token
    (2.4x here), not total seconds over total tokens (2.05x) nor the mean of per-response ratios (3.0x)."""
    ar = [_rec("ar", 0, range(10), seconds=1.0), _rec("ar", 1, range(100), seconds=20.0),
          _rec("ar", 2, [7], seconds=0.0)]
    fast = [_rec("bastion", 0, range(10), seconds=0.25, acc=(4, 5)),  # 0.025 s a token: 4x AR's 0.1
            _rec("bastion", 1, range(100), seconds=10.0, acc=(3,) * 33),  # 0.1 s a token: 2x AR's 0.2
            _rec("bastion", 2, [7], seconds=0.0, acc=())]  # one token (the prefill's): no decode, left out
    cells, prompts = _cells(tmp_path, ar + fast)
    speedup = float(cells["bastion"]["speedup"])
    assert speedup == pytest.approx((1.0 / 10 + 20.0 / 100) / 2 / ((0.25 / 10 + 10.0 / 100) / 2))
    assert speedup == pytest.approx(2.4)
    assert speedup != pytest.approx((21.0 / 110) / (10.25 / 110))  # totals over responses: 2.049
    assert speedup != pytest.approx((4.0 + 2.0) / 2)  # mean of per-response ratios: 3.0
    assert float(cells["bastion"]["tpot_s"]) == pytest.approx(0.0625)
    # tau pools the steps: 108 tokens committed in 35 steps, not the mean of the responses' 4.5 and 3.0
    assert float(cells["bastion"]["tau"]) == pytest.approx(108 / 35)
    assert float(cells["ar"]["speedup"]) == 1.0
    assert float(cells["bastion"]["mean_tree_size"]) == 16.0  # the one-token response has no trees to count
    assert sorted(float(p["tpot_s"]) for p in prompts if p["method"] == "bastion")[1:] == \
        pytest.approx([0.025, 0.1])
