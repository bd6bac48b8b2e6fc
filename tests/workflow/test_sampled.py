"""The T = 1 panel end to end: its own decode rule, the sampled calibration, the lossy column.

The other pipeline tests decode at T = 0 only (tests/support/pipeline_support.py); this
one runs the tiny experiment's T = 1 jobs for real, on three prompts and few tokens, and
checks what only T > 0 has: the lossy acceptance decoded beside the lossless methods, the
calibration of the sampling class, and a table that marks the lossy column.  (With T = 0
and T = 1 together the lossy acceptance gets a decode rule of its own,
``decode_model_sampled``: tests/workflow/test_decode_jobs.py.)
"""

from __future__ import annotations

import json

from tests.support.pipeline_support import copy_checkout, hardware_key, planned, smk

OVERLAY = """experiments:
  tiny:
    temperatures: [1.0]
    datasets:
      humaneval-pkg: {max_samples: 1}
      stdlib-heldout: {max_samples: 2}
    max_new_tokens: 24
"""
METHODS = ("ar", "eagle3", "dflash", "bastion", "bastion_plus", "bastion_lossy")


def test_the_sampled_panel_runs_every_method_and_marks_the_lossy_one(tmp_path):
    work = copy_checkout(tmp_path / "work")
    overlay = work / "sampled.yaml"
    overlay.write_text(OVERLAY)
    args = ["--configfile", "config.yaml", str(overlay), "--", "figures/speedup_table.pdf"]
    plan = planned(work, *args)
    # T = 1 alone: one temperature class, so the lossy acceptance shares the one decode job
    assert plan.get("decode_model") == 1 and "decode_model_sampled" not in plan
    smk(work, "--cores", "1", *args, timeout=900)
    hw = hardware_key(work)
    cell = work / "results" / hw / "tiny" / "stdlib-heldout" / "t1"
    assert sorted(p.name for p in cell.glob("*.jsonl")) == sorted(f"{m}.jsonl" for m in METHODS)
    assert (work / "results" / hw / "tiny" / "calibration_sampled.json").is_file()
    for method in METHODS:
        recs = [json.loads(line) for line in open(cell / f"{method}.jsonl")]
        assert len(recs) == 2 and {r["temperature"] for r in recs} == {1.0}
        for r in recs:  # every step says whether it drafted; AR never does, the other DFlash-based methods always
            assert len(r["drafted"]) == len(r["acceptance_lengths"])
            if method in ("dflash", "bastion", "bastion_lossy"):
                assert all(r["drafted"])
    # one decoder per method runs every prompt of the job, both sets: its gate starts out drafting, and a
    # later prompt's first step is an AR step where the gate has stopped by then
    plus = [json.loads(line) for d in ("humaneval-pkg", "stdlib-heldout")
            for line in open(work / "results" / hw / "tiny" / d / "t1" / "bastion_plus.jsonl")]
    assert any(r["drafted"][0] for r in plus if r["drafted"])
    table = (work / "figures" / "speedup_table.md").read_text()
    assert "BASTION (lossy)" in table and "lossy" in table.split("| Dataset")[-1].lower()
    assert planned(work, *args) == {}
