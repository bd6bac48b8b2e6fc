"""The GPU slot allocator with real processes and real flocks (no GPU needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HOLDER = textwrap.dedent("""
    import os, sys, time
    from bastion.pipeline import gpu_slots
    slot = gpu_slots.acquire(devices=["0", "1"], lock_dir=sys.argv[1], timeout_s=float(sys.argv[2]), poll_s=0.05)
    print(slot.index, os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
    time.sleep(float(sys.argv[3]))
""")


def _start(lock_dir: Path, timeout: float, hold: float) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    env.pop("SLURM_JOB_ID", None)
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_dir), str(timeout), str(hold)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _slot(proc: subprocess.Popen) -> tuple[str, str]:
    idx, dev = proc.stdout.readline().split()
    return idx, dev


def test_concurrent_jobs_never_share_and_killed_slots_free_up(tmp_path):
    a, b = _start(tmp_path, 10, 30), _start(tmp_path, 10, 30)
    try:
        got = {_slot(a), _slot(b)}
        assert got == {("0", "0"), ("1", "1")}  # two jobs, two different devices
        # a third job finds no free slot: it waits, then fails clearly (never shares)
        c = _start(tmp_path, 1.0, 0)
        _, err = c.communicate(timeout=60)
        assert c.returncode != 0
        assert "no free GPU slot among 2" in err and "pid" in err
        # kill one holder outright: its slot becomes free for the next job
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
        d = _start(tmp_path, 10, 0)
        idx, _ = _slot(d)
        assert d.wait(timeout=60) == 0
        assert idx in {"0", "1"}
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_waiting_job_gets_the_slot_when_it_frees(tmp_path):
    a, b = _start(tmp_path, 10, 2), _start(tmp_path, 10, 2)
    try:
        _slot(a), _slot(b)
        t0 = time.monotonic()
        c = _start(tmp_path, 30, 0)
        idx, _ = _slot(c)  # blocks until a or b exits after ~2 s
        assert time.monotonic() - t0 > 0.5
        assert c.wait(timeout=60) == 0 and idx in {"0", "1"}
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_no_slots_on_cpu_or_under_slurm(tmp_path, monkeypatch):
    from bastion.pipeline import gpu_slots

    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    slot = gpu_slots.acquire(lock_dir=tmp_path)
    assert slot.index is None and slot.device == "3" and not list(tmp_path.iterdir())
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_slots.acquire(lock_dir=tmp_path).index is None  # no GPU visible: nothing to pin
