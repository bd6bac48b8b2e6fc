"""benchmarks.eagle3_step: several trees decoded in turn beside AR, each equal to AR at T = 0."""

from __future__ import annotations

import json

from benchmarks import eagle3_step


def test_each_tree_is_a_method_of_its_own_and_decodes_what_ar_decodes(tmp_path):
    out = tmp_path / "rows.json"
    rows = eagle3_step.main(["--engines", "eager", "--dataset", "humaneval-pkg,stdlib-heldout", "--max-samples", "8",
                             "--prompts", "1", "--tokens", "12", "--repeats", "1", "--tree", "1,1,3", "3,1,5",
                             "--out", str(out)])
    assert [r["method"] for r in rows] == ["ar", "eagle3 1/1/3", "eagle3 3/1/5"]
    assert all(r["same_as_ar"] for r in rows)
    assert rows[0]["x_ar"] == 1.0 and rows[0]["tau"] == 1.0
    assert rows[2]["tau"] > 1.0  # the chain keeps some of its drafts on these prompts
    meta = json.loads(out.read_text())["meta"]
    assert meta["trees"] == ["1,1,3", "3,1,5"] and len(meta["prompts"]) == 2  # one prompt of each set
