"""The job worker's own process: it serves one job after another (see :mod:`bastion.pipeline.worker`).

Each job's script runs as Snakemake would run it, with the job's ``snakemake`` object,
in the client's working directory, under the slot the client holds.  What the job writes
to the console (a failure's one-line reason) goes back to the client; its log and outputs
are written where the script writes them.
"""

from __future__ import annotations

import gc
import io
import logging
import os
import runpy
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from bastion.pipeline import gpu_slots
from bastion.pipeline.worker import IN_WORKER, ForeignPeerError, check_peer, recv, send


def serve_main() -> None:
    """Entry point of the worker process: ``<socket> <idle seconds> <gpu name or ''>``."""
    path, idle_s, gpu = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    os.environ[IN_WORKER] = "1"
    serve(path, idle_s, gpu or None)


def serve(path: Path, idle_s: float, gpu: str | None = None) -> None:
    signal.signal(signal.SIGTERM, _retired)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    os.chmod(path, 0o600)  # its folder is closed to others already; the socket too
    srv.listen(8)
    srv.settimeout(0.5)
    inode = path.stat().st_ino
    if gpu is not None:
        (path.parent / f"{gpu}.pid").write_text(f"{os.getpid()}\n{path}\n")
    print(f"[job-worker] {time.strftime('%H:%M:%S')} pid {os.getpid()} serving {path}", flush=True)
    last, jobs, rc = time.monotonic(), 0, 0
    try:
        while time.monotonic() - last < idle_s and _still_ours(path, inode):
            conn = accept(srv, path)
            if conn is None:
                continue
            with conn:
                request = recv(conn)
                if request is None:
                    continue
                jobs += 1
                try:
                    rc = _serve_job(conn, request, jobs, path.with_suffix(".log"))
                except Exception:  # noqa: BLE001 - the worker's own failure: log it, end (the client reports it)
                    traceback.print_exc(file=sys.stdout)
                    rc = 1
            last = time.monotonic()
            if rc != 0:
                print(f"[job-worker] job {jobs} failed (status {rc}): exiting", flush=True)
                break
    except Retired:
        print("[job-worker] retired by a newer worker of its GPU", flush=True)
    finally:
        if _still_ours(path, inode):
            path.unlink(missing_ok=True)  # the log stays: torch's TORCH_LOGS output goes there, not to the jobs' logs
        srv.close()  # a job that connected just now is refused, and its client starts another worker
    print(f"[job-worker] {time.strftime('%H:%M:%S')} exiting after {jobs} job(s)", flush=True)


def accept(srv: socket.socket, path: Path) -> socket.socket | None:
    """The next client of this user, or None (the wait timed out, or the peer is another user and was closed
    unread: nothing of theirs is unpickled)."""
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        return None
    try:
        check_peer(conn, path)
    except ForeignPeerError as exc:
        print(f"[job-worker] {time.strftime('%H:%M:%S')} refused a client: {exc}", flush=True)
        return None
    return conn


class Retired(BaseException):
    """SIGTERM: a newer worker of this GPU ends this one (a job it ran then fails, never passes)."""


def _retired(*_: Any) -> None:
    raise Retired


def _still_ours(path: Path, inode: int) -> bool:
    try:
        return path.stat().st_ino == inode
    except OSError:
        return False


def _serve_job(conn: socket.socket, request: dict[str, Any], number: int, log: Path) -> int:
    send(conn, {"accepted": os.getpid()})  # from here on the job is this worker's: a client that loses it fails
    done = threading.Event()
    threading.Thread(target=_watch_client, args=(conn, done), daemon=True).start()
    smk = request["snakemake"]
    t0, before = time.monotonic(), _work_counts()
    print(f"[job-worker] {time.strftime('%H:%M:%S')} job {number}: {request['script']} in {request['cwd']}", flush=True)
    rc, console = _run_script(request)
    graphs, captures, capture_s = (b - a for a, b in zip(before, _work_counts()))
    note = (f"[job-worker] ran in worker pid {os.getpid()} as its job {number} "
            f"({'a fresh worker' if number == 1 else 'imports, compiled functions and caches of earlier jobs reused'}), "
            f"{time.monotonic() - t0:.1f} s: {graphs:g} graphs compiled by torch.compile, "
            f"{captures:g} CUDA graphs captured in {capture_s:.1f} s; the worker's log: {log}")
    for job_log in list(getattr(smk, "log", []) or [])[:1]:
        with open(job_log, "a", encoding="utf-8") as fh:
            print(note, file=fh)
    done.set()
    send(conn, {"rc": rc, "console": console})
    print(f"[job-worker] {time.strftime('%H:%M:%S')} job {number} done, status {rc}", flush=True)
    return rc


def _work_counts() -> tuple[float, float, float]:
    """Graphs torch.compile made, and CUDA graph captures (count, seconds), in this process so far."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    graphs = dynamo.counters["stats"]["unique_graphs"] if dynamo is not None else 0
    captures = getattr(sys.modules.get("bastion.engines.graphs"), "CAPTURES", {"count": 0, "seconds": 0.0})
    return float(graphs), float(captures["count"]), float(captures["seconds"])


def _watch_client(conn: socket.socket, done: threading.Event) -> None:
    """End the worker if the job's client goes away before the job is done."""
    try:
        conn.recv(1)
    except OSError:
        pass
    if not done.is_set():
        print("[job-worker] the job's process went away mid-job (Snakemake stopped it): exiting", flush=True)
        os._exit(3)


class _Console(io.StringIO):
    """What the job writes to the console: kept for the client, echoed to the worker's log."""

    def write(self, s: str) -> int:
        sys.__stdout__.write(s)
        return super().write(s)


def _run_script(request: dict[str, Any]) -> tuple[int, str]:
    os.chdir(request["cwd"])
    console, real_err = _Console(), sys.__stderr__
    sys.__stderr__ = console  # job_log() prints a failure's one-line reason there
    if request["slot"] is not None:
        os.environ[gpu_slots.HELD_ENV] = str(request["slot"])
    try:
        runpy.run_path(request["script"], init_globals={"snakemake": request["snakemake"]}, run_name="__main__")
        rc = 0
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            console.write(exc.code + "\n")
    except BaseException:  # noqa: BLE001 - the job's failure is reported to its client, whatever it is
        console.write(traceback.format_exc())
        rc = 1
    finally:
        sys.__stderr__ = real_err
        sys.stdout, sys.stderr = sys.__stdout__, real_err
        os.environ.pop(gpu_slots.HELD_ENV, None)
    _rebind_log_handlers()
    _free_memory()
    return rc, console.getvalue()


class _CurrentStderr:
    """A stream that is whatever ``sys.stderr`` is now: the running job's log."""

    def write(self, s: str) -> int:
        return sys.stderr.write(s)

    def flush(self) -> None:
        sys.stderr.flush()


def _rebind_log_handlers() -> None:
    """Point logging handlers made during the job at the next job's log.

    A handler created while a job ran (torch's, Transformers') holds that job's log file,
    closed now; the next job's records would be lost in "--- Logging error ---" messages.
    """
    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger))]
    for handler in (h for lg in loggers for h in lg.handlers):
        stream = getattr(handler, "stream", None)
        if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
            with handler.lock:  # not setStream(): it flushes the closed file first
                handler.stream = _CurrentStderr()


def _free_memory() -> None:
    """Drop what the finished job left, so the next one starts with the GPU's memory free."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
