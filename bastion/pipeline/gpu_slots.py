"""One GPU per job on a multi-GPU machine: slot files under a lock directory.

``snakemake --cores N --resources gpu=K`` runs up to K GPU jobs at once but never says
which GPU each should use, so without help two jobs can share a device while another
idles.  A job takes the first free slot by an exclusive ``flock`` on ``gpu<i>.lock``
and pins itself with ``CUDA_VISIBLE_DEVICES`` before CUDA starts.  The kernel drops the
lock when the process ends, however it ends, so a killed job's slot frees itself.  With
no free slot a job waits (up to a timeout) and then fails with a clear message; it never
shares a device silently.

Under SLURM the scheduler already gave the job its GPUs (and set
``CUDA_VISIBLE_DEVICES``), so no slot is taken there; on a machine without GPUs neither.
A job run by the job worker (:mod:`bastion.pipeline.worker`) takes none either: its
client process holds the slot, and the worker runs on that slot's GPU.

The lock folder is this user's alone (``/tmp/bastion-gpu-slots-<uid>``, or
``BASTION_GPU_LOCK_DIR``), checked like the worker's (:mod:`bastion.pipeline.private`):
another user's folder, or one others may write to, is refused, and a lock file is never
opened through a symbolic link, so nobody can make a job truncate a file of its user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bastion.pipeline.private import private_dir, try_lock

LOCK_DIR_ENV = "BASTION_GPU_LOCK_DIR"
HELD_ENV = "BASTION_GPU_SLOT_HELD"  # set by the job worker while it runs a job whose client holds this slot


class NoFreeSlotError(RuntimeError):
    """Every GPU slot stayed taken for the whole waiting time."""


@dataclass
class Slot:
    index: int | None  # None: no slot was needed (CPU machine, or SLURM assigned the GPU)
    device: str  # what CUDA_VISIBLE_DEVICES holds for this job ("" when unchanged)
    fd: int | None = None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def visible_gpus() -> list[str]:
    """Physical GPU ids this process may use, without initialising CUDA.

    Counting through torch would start CUDA, after which CUDA_VISIBLE_DEVICES is ignored.
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d for d in env.split(",") if d.strip() != ""]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def default_lock_dir() -> Path:
    """This user's slot folder: fixed (not ``TMPDIR``), so every job of the user finds the same locks."""
    return Path(f"/tmp/bastion-gpu-slots-{os.getuid()}")


def acquire(
    devices: list[str] | None = None,
    lock_dir: str | os.PathLike | None = None,
    timeout_s: float = 3600.0,
    poll_s: float = 0.5,
) -> Slot:
    """Take a free slot and pin this process to its device (see the module docstring)."""
    held = os.environ.get(HELD_ENV)
    if held is not None:
        return Slot(int(held), os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    if devices is None:
        if os.environ.get("SLURM_JOB_ID"):
            return Slot(None, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
        devices = visible_gpus()
    if not devices:
        return Slot(None, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    folder = private_dir(os.environ.get(LOCK_DIR_ENV) or lock_dir or default_lock_dir(), "the GPU slot lock folder")
    deadline = time.monotonic() + timeout_s
    while True:
        for i, dev in enumerate(devices):
            fd = try_lock(folder / f"gpu{dev}.lock")
            if fd is None:
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            os.environ["CUDA_VISIBLE_DEVICES"] = dev
            return Slot(i, dev, fd)
        if time.monotonic() >= deadline:
            holders = ", ".join(f"gpu{d}: pid {_holder(folder / f'gpu{d}.lock')}" for d in devices)
            raise NoFreeSlotError(
                f"no free GPU slot among {len(devices)} after {timeout_s:.0f} s ({holders}); run fewer GPU jobs at once "
                f"(snakemake --resources gpu={len(devices)}) or remove stale locks in {folder}"
            )
        time.sleep(poll_s)


def _holder(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "?"
    with os.fdopen(fd, "rb") as fh:
        return fh.read(64).decode(errors="replace").strip() or "?"


class pinned:  # noqa: N801 - used as a context manager, like open()
    """``with pinned(device):`` hold a GPU slot for the job when ``device`` may be a GPU."""

    def __init__(self, device: str = "auto", **kwargs) -> None:
        self.device, self.kwargs, self.slot = device, kwargs, None

    def __enter__(self) -> Slot:
        if self.device == "cpu":
            self.slot = Slot(None, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
        else:
            self.slot = acquire(**self.kwargs)
        print(f"[gpu-slot] {time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} slot {self.slot.index} "
              f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)
        return self.slot

    def __exit__(self, *exc) -> None:
        print(f"[gpu-slot] {time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} released slot {self.slot.index}", flush=True)
        self.slot.release()
