"""The small report helpers the GPU scripts call: equality with AR, phases by tree size, tree_phase's summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import same_as_ar, step_phases, tree_phase_summary

REPO = Path(__file__).resolve().parents[2]


def _rec(method, prompt, out, acc, sizes, phases=None, seconds=1.0):
    rec = {"hardware": "cpu-x", "model": "tiny", "dataset": "d", "temperature": 0.0, "method": method, "budget": None,
           "prompt_index": prompt, "turn": 0, "num_prompt_tokens": 5, "num_output_tokens": len(out),
           "output_ids": list(out), "decode_seconds": seconds, "prefill_seconds": 0.1, "acceptance_lengths": list(acc),
           "tree_sizes": list(sizes), "contexts": [5] * len(acc), "stop_reason": "max_new_tokens", "fingerprint": {}}
    for name, values in (phases or {}).items():
        rec[name] = list(values)
    return rec


def _write(path: Path, recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_same_as_ar_counts_per_method_and_fails_on_a_difference(tmp_path, capsys):
    recs = [_rec("ar", 0, [1, 2, 3], [1, 1], [1, 1]), _rec("ar", 1, [4, 5, 6], [1, 1], [1, 1]),
            _rec("dflash", 0, [1, 2, 3], [2], [16]), _rec("dflash", 1, [4, 5, 6], [2], [16]),
            _rec("bastion", 0, [1, 2, 3], [2], [16]), _rec("bastion", 1, [4, 5, 7], [2], [16])]
    assert same_as_ar.main(str(_write(tmp_path / "r.jsonl", recs))) == 1
    assert capsys.readouterr().out.splitlines() == ["bastion: 1 of 2 outputs equal AR's", "dflash: 2 of 2 outputs equal AR's"]
    assert same_as_ar.main(str(_write(tmp_path / "ok.jsonl", recs[:4]))) == 0


def test_step_phases_gives_each_tree_size_its_mean_phases(tmp_path):
    ms = 1e-3
    phases = {"t_draft": [1 * ms, 3 * ms, 2 * ms], "t_tree": [0.1 * ms] * 3, "t_verify": [4 * ms, 6 * ms, 8 * ms],
              "t_accept": [0.0] * 3, "t_commit": [0.2 * ms] * 3}
    path = _write(tmp_path / "b.jsonl", [_rec("bastion", 0, list(range(12)), [3, 5, 4], [16, 16, 32], phases, seconds=0.5)])
    lines = step_phases.table(str(path)).splitlines()
    assert lines[0] == "### b.jsonl: bastion, 24.0 tok/s"
    assert lines[4] == "| 16 | 2 | 4.00 | 2.000 | 0.100 | 5.000 | 0.000 | 0.200 | 7.300 |"
    assert lines[5] == "| 32 | 1 | 4.00 | 2.000 | 0.100 | 8.000 | 0.000 | 0.200 | 10.300 |"


def test_tree_phase_summary_reads_the_benchmarks_rows(tmp_path, capsys):
    rows = [{"section": "setup", "gpu": "cpu"}, {"section": "drafter", "mode": "fused"},
            {"section": "phases", "method": "bastion", "graph": "('verify', 32, 768)", "us": 5359.25, "launches": 465,
             "top": [{"us": 3817.0, "count": 144, "kernel": "tile_linear"}]},
            {"section": "overhead", "context": 512, "method": "bastion", "nodes": 32, "t_draft_ms_events": 1.184,
             "step_ms_no_sync": 6.679},
            {"section": "phases", "seconds": 12.5}]
    log = tmp_path / "tp.log"
    log.write_text("a warning line\n" + "".join(json.dumps(r) + "\n" for r in rows))
    tree_phase_summary.main(str(log))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "?      setup: {'gpu': 'cpu'}" and out[1] == "--- drafter fused"  # rows before a drafter row: mode ?
    assert out[2].split() == ["fused", "graph", "bastion", "('verify',", "32,", "768)", "5359.2", "us", "465"]
    assert "3817.0 us x144" in out[3] and "tile_linear" in out[3]
    assert "c=  512 bastion  n=  32" in out[4] and "draft=1.184" in out[4] and "step(untimed)=6.679" in out[4]
    assert "tree=nan" in out[4]  # a phase the row lacks is shown as missing, not as zero
    assert out[5] == "fused  phases took 12.5 s"


def test_the_helpers_run_as_modules(tmp_path):
    path = _write(tmp_path / "r.jsonl", [_rec("ar", 0, [1, 2], [1], [1]), _rec("dflash", 0, [1, 2], [2], [16])])
    res = subprocess.run([sys.executable, "-m", "benchmarks.same_as_ar", str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout) == (0, "dflash: 1 of 1 outputs equal AR's\n"), res.stderr
