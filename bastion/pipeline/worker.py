"""A warm process per GPU, or one for the CPU, that runs the pipeline's device jobs one after another.

Snakemake starts one process per job, and on a GPU host most of a small job is start-up:
importing torch and Transformers (about 15 s on an H200 host), then Dynamo's tracing,
Inductor's loads and the CUDA graph captures.  Run alone, the tiny experiment's
calibration job and its decode job each pay all of that, in 90-100 s jobs that decode
for a few seconds (docs/performance.md).  A job handed to the worker runs its script in
a process that already imported, traced and compiled what the jobs before it used.

A job's script calls :func:`hand_off` first.  In the worker the call returns at once and
the script runs as it would alone; in the job's own process it sends the script and its
``snakemake`` object to the worker (starting one if none answers), waits, and exits with
the job's status.  Every output, log line and benchmark row is the one the script writes
either way; the job's log ends with a line naming the worker.

- One worker per working directory, Python, package sources (path, size, mtime of every
  file), GPU slot and torch-related environment: an edit, another checkout or another GPU
  gets a fresh worker.  Starting a worker for a GPU retires the previous one of that GPU,
  so two never hold its memory.
- One job at a time.  A failed job ends the worker (its CUDA state is not trusted); so
  does a job whose client went away (Snakemake stopped it), so nothing writes after
  Snakemake gave up on a job.  An idle worker exits after ``BASTION_WORKER_IDLE_S``
  (default 120 s).
- Config ``job_worker``: ``auto`` uses it outside SLURM (each SLURM job has its own
  allocation), ``true`` always, ``false`` never.  A CPU job's start-up is seconds, not
  minutes, but the tiny experiment's four CPU jobs each took 4-8 s longer in their own
  processes than in the worker, 23 s of a 289-s run (docs/performance.md).
- A GPU job waits for its GPU's worker; a CPU job that finds its worker busy with another
  job (``--cores`` above 1) runs in its own process instead, so CPU jobs still run side by
  side.
- No other local user gets in (:mod:`bastion.pipeline.private`): the socket lives in a
  folder of this user closed to others, in ``XDG_RUNTIME_DIR`` where there is one; a folder
  another user made, or one others may write to, is refused; and both ends check the
  peer's uid before reading a byte from it, so nothing from another user is unpickled.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bastion.pipeline import gpu_slots
from bastion.pipeline.private import UnsafePathError, open_lock, peer_uid, private_dir, runtime_base, try_lock

IN_WORKER = "BASTION_IN_WORKER"
IDLE_ENV = "BASTION_WORKER_IDLE_S"
DEFAULT_IDLE_S = 120.0
START_TIMEOUT_S = 60.0
# variables that change what torch, Triton or our code do: a job with other values gets its own worker
ENV_PREFIXES = ("BASTION_", "TORCH", "PYTORCH", "CUDA_", "OMP_", "MKL_", "TRITON", "HF_", "TRANSFORMERS", "NCCL_")
_HEADER = struct.Struct("!Q")


class WorkerStartError(RuntimeError):
    """No worker could be started or reached; the job then runs in its own process."""


def wanted(mode: Any) -> bool:
    """Whether a job goes to the worker under the config's ``job_worker`` ``mode``."""
    if mode not in (True, False, "true", "false", "auto"):
        raise ValueError(f"config key `job_worker`: {mode!r} is not one of auto, true, false")
    if os.environ.get(IN_WORKER) or mode in (False, "false"):
        return False
    return mode in (True, "true") or not os.environ.get("SLURM_JOB_ID")


def hand_off(smk: Any, script: str, device: str = "auto") -> None:
    """Run this job in the worker and exit with its status; return when it should run here.

    ``smk`` is the script's ``snakemake`` object, ``script`` its ``__file__``.  The GPU slot
    is taken here and held until the job ends, so the worker runs on the slot's GPU.
    """
    if not wanted(smk.config.get("job_worker", "auto")):
        return
    parts = key_parts()
    try:
        slot = gpu_slots.acquire() if device != "cpu" else None
        path = socket_dir() / f"{_key(parts)}.sock"
    except UnsafePathError as exc:
        sys.exit(f"error: {exc}")
    gpu = f"gpu{slot.device}" if slot is not None and slot.index is not None else None  # names its pid file
    # a CPU job holds its worker until this process ends; a GPU job holds its slot
    busy = None if gpu is not None else try_lock(path.with_suffix(".busy"))
    if gpu is None and busy is None:
        print("[job-worker] busy with another CPU job; this job runs in its own process", file=sys.stderr, flush=True)
        return
    request = {"script": os.path.realpath(script), "snakemake": smk, "cwd": os.getcwd(),
               "slot": None if slot is None else slot.index}
    reply = accepted = None
    try:
        for _ in range(2):  # a worker that went idle just as this job connected never takes it: start another
            with _connect_or_start(path, gpu, parts) as conn:
                send(conn, request)
                accepted = recv(conn)
                if accepted is not None:
                    reply = recv(conn)
                    break
    except WorkerStartError as exc:
        print(f"[job-worker] {exc}; the job runs in its own process", file=sys.stderr, flush=True)
        if slot is not None:
            slot.release()  # the script's own pinned() takes a slot again
        if busy is not None:
            os.close(busy)  # another CPU job may try the worker again
        return
    if reply is None:
        what = "died during the job" if accepted is not None else "dropped the job twice"
        print(f"error: the job worker {what}; its log: {path.with_suffix('.log')}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.stderr.write(reply["console"])
    sys.stderr.flush()
    sys.exit(reply["rc"])


def socket_dir() -> Path:
    """This user's worker folder: in ``XDG_RUNTIME_DIR`` where it is usable, else the temp folder; checked private."""
    return private_dir(runtime_base() / f"bastion-worker-{os.getuid()}", "the job worker's folder")


def key_parts() -> dict[str, Any]:
    """What a worker must share with the job (see the module docstring), as it is hashed."""
    sources = {}
    for package in ("bastion", "dflash"):
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for f in sorted(Path(root).rglob("*.py")):
                st = f.stat()
                sources[str(f)] = f"{st.st_size}:{st.st_mtime_ns}"
    # Snakemake adds a source cache of its own, in a new temporary folder per invocation
    paths = [p for p in sys.path if "snakemake-runtime-cache" not in p]
    return {"python": sys.executable, "cwd": os.getcwd(), "sys_path": paths,
            "env": {k: os.environ[k] for k in sorted(os.environ) if k.startswith(ENV_PREFIXES)}, "sources": sources}


def _key(parts: dict[str, Any] | None = None) -> str:
    return hashlib.sha256(json.dumps(parts or key_parts(), sort_keys=True).encode()).hexdigest()[:24]


class ForeignPeerError(WorkerStartError):
    """The other end of a worker socket runs as another user: nothing is sent to it or read from it."""


def check_peer(conn: socket.socket, where: Path | str) -> None:
    """Refuse a connection whose other end is not this user (``where`` names the socket in the error)."""
    try:
        uid = peer_uid(conn)
    except (OSError, UnsafePathError) as exc:
        conn.close()
        raise ForeignPeerError(f"cannot tell who serves {where} ({exc})") from None
    if uid != os.getuid():
        conn.close()
        raise ForeignPeerError(f"the other end of {where} runs as uid {uid}, not as this user (uid {os.getuid()}): "
                               "nothing is sent to it or read from it")


def _connect(path: Path) -> socket.socket | None:
    """A connection to the worker at ``path`` (checked: this user's), or None when none answers there."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        return None
    check_peer(conn, path)
    return conn


def _connect_or_start(path: Path, gpu: str | None, parts: dict[str, Any]) -> socket.socket:
    with os.fdopen(open_lock(path.with_suffix(".lock")), "r+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one client starts the worker; the others wait and connect
        conn = _connect(path)
        if conn is not None:
            return conn
        if gpu is not None:
            _retire(path.parent / f"{gpu}.pid")
        path.unlink(missing_ok=True)
        path.with_suffix(".json").write_text(json.dumps(parts, indent=1))  # why a new worker: compare with an older one's
        log = path.with_suffix(".log")
        code = ("import json, os, sys; sys.path[:] = json.loads(os.environ.pop('BASTION_WORKER_PATH')); "
                "from bastion.pipeline.worker_process import serve_main; serve_main()")
        env = dict(os.environ, BASTION_WORKER_PATH=json.dumps(sys.path), **{IN_WORKER: "1"})
        idle = os.environ.get(IDLE_ENV, str(DEFAULT_IDLE_S))
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-c", code, str(path), idle, gpu or ""], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise WorkerStartError(f"the job worker exited at start with status {proc.returncode} (its log: {log})")
            conn = _connect(path)
            if conn is not None:
                return conn
            time.sleep(0.05)
        proc.kill()
        raise WorkerStartError(f"the job worker did not answer within {START_TIMEOUT_S:.0f} s (its log: {log})")


def _retire(pid_file: Path) -> None:
    """End the previous worker of this GPU (idle: the caller holds the GPU's slot) so its memory frees."""
    try:
        pid = int(pid_file.read_text().split()[0])
        if "bastion.pipeline.worker" not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            return  # the pid was reused by another program
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError, IndexError):
        return
    for _ in range(200):  # up to 10 s for the GPU memory to be released
        if not alive(pid):
            return
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: a container's init may never reap the worker)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def send(conn: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj)
    try:
        conn.sendall(_HEADER.pack(len(data)) + data)
    except OSError:
        pass  # the other side is gone: the next recv() says so


def recv(conn: socket.socket) -> Any:
    """The next message, or None when the other side closed or reset the connection."""
    try:
        head = _read(conn, _HEADER.size)
        body = None if head is None else _read(conn, _HEADER.unpack(head)[0])
    except OSError:
        return None
    return None if body is None else pickle.loads(body)


def _read(conn: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
