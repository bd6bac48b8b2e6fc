"""The job worker, driven for real: client processes hand a job script to a worker process.

The job here is a small script shaped like the pipeline's (``hand_off`` first, then the
job under ``job_log``), so the tests run in seconds; tests/workflow/test_pipeline.py runs
the real calibration and decode jobs through a worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bastion.pipeline import gpu_slots, worker

REPO = Path(__file__).resolve().parents[2]

SCRIPT = '''
import os, sys, time, types
if "snakemake" not in globals():  # the client: what Snakemake's preamble would define
    snakemake = types.SimpleNamespace(config={"job_worker": True}, log=[sys.argv[1]], output=[sys.argv[2]], mode=sys.argv[3])
    if snakemake.mode == "stale":  # a worker that goes idle as the job connects: it drops the job, never runs it
        import socket, threading
        from bastion.pipeline import worker
        path = worker.socket_dir() / f"{worker._key()}.sock"
        path.unlink(missing_ok=True)
        old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old.bind(str(path)); old.listen(1)
        def drop():
            conn, _ = old.accept(); path.unlink(); old.close(); conn.close()
        threading.Thread(target=drop, daemon=True).start()
from bastion.pipeline.worker import hand_off
hand_off(snakemake, __file__, "cpu")
from bastion.pipeline.joblog import job_log
with job_log(snakemake.log[0]):
    print("job ran", flush=True)
    if snakemake.mode == "fail":
        raise ValueError("bad value 42")
    if snakemake.mode == "sleep":
        time.sleep(60)
    open(snakemake.output[0], "w").write(f"{os.getpid()} {os.environ.get('BASTION_IN_WORKER')}")
'''


@pytest.fixture
def job(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO), BASTION_WORKER_IDLE_S="30")
    pids: list[int] = []

    def run(name: str, mode: str = "ok", wait: bool = True, **extra: str):
        args = [sys.executable, str(script), str(tmp_path / f"{name}.log"), str(tmp_path / f"{name}.out"), mode]
        if not wait:
            return subprocess.Popen(args, cwd=tmp_path, env=dict(env, **extra), stderr=subprocess.PIPE, text=True)
        res = subprocess.run(args, cwd=tmp_path, env=dict(env, **extra), capture_output=True, text=True, timeout=120)
        out = tmp_path / f"{name}.out"
        if out.exists():
            pids.append(int(out.read_text().split()[0]))
        return res

    run.dir = tmp_path
    run.pids = pids
    yield run
    for pid in set(pids):
        if worker.alive(pid):
            os.kill(pid, signal.SIGTERM)


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not worker.alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_jobs_run_one_after_another_in_one_warm_worker(job):
    first, second = job("a"), job("b")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    (pid_a, flag_a), (pid_b, flag_b) = ((job.dir / f"{n}.out").read_text().split() for n in "ab")
    assert pid_a == pid_b and flag_a == flag_b == "1"  # the same process, which is the worker
    assert worker.alive(int(pid_a))
    log_a, log_b = ((job.dir / f"{n}.log").read_text() for n in "ab")
    assert log_a.startswith("job ran") and f"ran in worker pid {pid_a} as its job 1 (a fresh worker)" in log_a
    assert f"ran in worker pid {pid_a} as its job 2" in log_b


def test_a_failed_job_fails_its_client_with_the_reason_and_ends_the_worker(job):
    assert job("a").returncode == 0
    failed = job("b", "fail")
    assert failed.returncode == 1
    assert "error: bad value 42" in failed.stderr  # job_log's one-line reason reaches the console
    assert "ValueError: bad value 42" in (job.dir / "b.log").read_text()
    assert _gone(job.pids[0])  # a failed job's process state is not trusted
    assert job("c").returncode == 0 and job.pids[1] != job.pids[0]


def test_a_killed_client_ends_the_worker_before_the_job_writes(job):
    assert job("a").returncode == 0
    client = job("b", "sleep", wait=False)
    deadline = time.monotonic() + 60
    while "job ran" not in ((job.dir / "b.log").read_text() if (job.dir / "b.log").exists() else ""):
        assert time.monotonic() < deadline and client.poll() is None, client.stderr.read() if client.poll() else "timeout"
        time.sleep(0.1)
    client.kill()  # as Snakemake stops a job
    client.wait()
    assert _gone(job.pids[0])
    assert not (job.dir / "b.out").exists()


def test_a_job_dropped_by_a_worker_going_idle_goes_to_a_new_worker(job):
    res = job("a", "stale")
    assert res.returncode == 0, res.stderr
    pid, flag = (job.dir / "a.out").read_text().split()
    assert flag == "1" and "ran in worker pid" in (job.dir / "a.log").read_text()


def test_an_idle_worker_exits(job):
    assert job("a", BASTION_WORKER_IDLE_S="1").returncode == 0
    assert _gone(job.pids[0], within_s=15)


def test_auto_uses_the_worker_outside_slurm(monkeypatch):
    monkeypatch.delenv(worker.IN_WORKER, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert worker.wanted("auto") and worker.wanted(True) and worker.wanted("true")
    assert not worker.wanted(False) and not worker.wanted("false")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert not worker.wanted("auto")  # each SLURM job has its own allocation
    assert worker.wanted(True)
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.setenv(worker.IN_WORKER, "1")
    assert not worker.wanted(True)  # the worker runs the script itself
    with pytest.raises(ValueError, match="`job_worker`: 'sometimes' is not one of auto, true, false"):
        worker.wanted("sometimes")


def test_a_cpu_job_that_finds_the_worker_busy_runs_in_its_own_process(job):
    client = job("a", "sleep", wait=False)
    deadline = time.monotonic() + 60
    while "job ran" not in ((job.dir / "a.log").read_text() if (job.dir / "a.log").exists() else ""):
        assert time.monotonic() < deadline and client.poll() is None, client.stderr.read() if client.poll() else "timeout"
        time.sleep(0.1)
    try:
        second = job("b")
        assert second.returncode == 0, second.stderr
        assert "busy with another CPU job; this job runs in its own process" in second.stderr
        pid, flag = (job.dir / "b.out").read_text().split()
        assert flag == "None" and int(pid) != client.pid  # its own process, not the worker's
        assert "ran in worker" not in (job.dir / "b.log").read_text()
    finally:
        client.kill()
        client.wait()
    assert job("c").returncode == 0  # the claim ends with its client: the next job gets a worker again
    assert "ran in worker pid" in (job.dir / "c.log").read_text()


def test_the_key_follows_torch_related_environment(monkeypatch):
    before = worker._key()
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")
    assert worker._key() != before
    monkeypatch.delenv("TORCHINDUCTOR_MAX_AUTOTUNE")
    monkeypatch.setenv("UNRELATED_VARIABLE_FOR_THE_TEST", "1")
    assert worker._key() == before


def test_a_job_in_the_worker_uses_the_slot_its_client_holds(monkeypatch, tmp_path):
    monkeypatch.setenv(gpu_slots.HELD_ENV, "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    slot = gpu_slots.acquire(["2", "3"], lock_dir=tmp_path)
    assert (slot.index, slot.device, slot.fd) == (1, "3", None)
    assert not list(tmp_path.iterdir())  # no lock taken: the client holds it


LOGGING_SCRIPT = '''
import logging, sys, types
if "snakemake" not in globals():
    snakemake = types.SimpleNamespace(config={"job_worker": True}, log=[sys.argv[1]], output=[sys.argv[2]], mode=sys.argv[3])
from bastion.pipeline.worker import hand_off
hand_off(snakemake, __file__, "cpu")
from bastion.pipeline.joblog import job_log
with job_log(snakemake.log[0]):
    log = logging.getLogger("made.in.the.first.job")
    if not log.handlers:  # as torch and Transformers make theirs: once per process, on sys.stderr of that moment
        log.addHandler(logging.StreamHandler(sys.stderr))
    log.warning("record of %s", snakemake.output[0])
    open(snakemake.output[0], "w").write(f"{__import__('os').getpid()} 1")
'''


def test_a_log_handler_made_in_one_job_writes_to_the_later_jobs_logs(job):
    (job.dir / "job.py").write_text(LOGGING_SCRIPT)
    assert job("a").returncode == 0 and job("b").returncode == 0
    assert job.pids[0] == job.pids[1]
    log_b = (job.dir / "b.log").read_text()
    assert f"record of {job.dir / 'b.out'}" in log_b and "Logging error" not in log_b
