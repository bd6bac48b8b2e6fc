"""Under torchrun (two CPU processes, gloo): prompts are sharded round-robin by rank,
rank 0 calibrates while rank 1 waits, and rank 0 gathers every record exactly once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.builders import save_pair


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_gloo_run(tmp_path):
    target, drafter = save_pair(tmp_path / "pair")
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"turns": [f"def f{i}(x):\n    return"]}) + "\n" for i in range(5)))
    out, cache = tmp_path / "out.jsonl", tmp_path / "cache"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "bastion.benchmark",
           "--model", str(target), "--draft-model", str(drafter), "--dataset", str(data), "--max-new-tokens", "10",
           "--device", "cpu", "--cache-dir", str(cache), "--calib-grid", "tiny", "--n-min", "4", "--output", str(out),
           "--accept-calibration-error"]  # the test is about ranks, not the fit's quality on a shared CPU
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).parents[2]))
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    keys = [(r["prompt_index"], r["method"]) for r in recs]
    assert sorted(keys) == sorted({(i, m) for i in range(5) for m in ("ar", "dflash", "bastion", "bastion_plus")})  # no loss, no duplicates
    assert {r["prompt_index"]: r["rank"] for r in recs} == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0}
    assert all(r["world_size"] == 2 for r in recs)
    assert len(list(cache.glob("calibration_*.json"))) == 1
    assert res.stderr.count("[calibrate] wrote") == 1
    assert not list(tmp_path.glob("out.jsonl.rank*"))  # per-rank partial files are cleaned up
    assert "BASTION" in res.stdout  # rank 0 prints the combined summary
