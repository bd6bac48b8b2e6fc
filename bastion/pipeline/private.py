"""Folders and files that no other local user can touch: the job worker's socket, the GPU slot locks.

On a shared login node or GPU server, a folder another user made first, or one others may
write to, lets them put a socket of their own where a job connects (and unpickles what
comes back) or a symbolic link where a job truncates its lock file.  So the pipeline's
folders must be real folders owned by this user, closed to everyone else (mode 0700);
anything else is refused in one line naming the path, its owner and its mode, before
anything in it is read or written.  Files in them are opened without following symbolic
links, and the peer of a socket is asked for its uid (``SO_PEERCRED``) before a byte
from it is read.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import struct
import tempfile
from pathlib import Path

RUNTIME_ENV = "XDG_RUNTIME_DIR"


class UnsafePathError(RuntimeError):
    """A folder or file of the pipeline could be reached or replaced by another local user."""


def _describe(st: os.stat_result) -> str:
    kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "a file"
    return f"{kind} owned by uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"


def is_private_dir(st: os.stat_result) -> bool:
    """A real folder (never a link) of this user that no one else may read, write or enter."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def private_dir(path: str | os.PathLike, what: str) -> Path:
    """Make ``path`` (mode 0700) or check the folder already there; refuse anything else.

    ``what`` names the folder's use in the error (``the job worker's folder``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not is_private_dir(st):
        raise UnsafePathError(
            f"{what} {path} is {_describe(st)}; it must be a folder of uid {os.getuid()} closed to others "
            f"(mode 0700): remove it (or have its owner remove it) and rerun")
    return path


def runtime_base() -> Path:
    """Where this user's private folders go: ``XDG_RUNTIME_DIR`` when it is set and private, else the temp folder."""
    runtime = os.environ.get(RUNTIME_ENV)
    if runtime:
        try:
            if is_private_dir(os.lstat(runtime)) and os.access(runtime, os.W_OK | os.X_OK):
                return Path(runtime)
        except OSError:
            pass
    return Path(tempfile.gettempdir())


def open_lock(path: str | os.PathLike) -> int:
    """Open (creating it, mode 0600) a lock file of this user, never through a symbolic link; returns the fd."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        try:
            st = os.lstat(path)
        except OSError:
            raise exc from None
        raise UnsafePathError(f"lock file {path} is {_describe(st)}; remove it and rerun ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        raise UnsafePathError(f"lock file {path} is {_describe(st)}, not a file of uid {os.getuid()}; "
                              "remove it and rerun")
    return fd


def try_lock(path: str | os.PathLike) -> int | None:
    """An exclusive ``flock`` on this user's lock file at ``path`` if nobody holds it (its fd), else None.

    The kernel drops it when the fd closes or the process ends, however it ends.
    """
    fd = open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket (Linux's ``SO_PEERCRED``)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        raise UnsafePathError("this system gives no peer credentials (SO_PEERCRED) on Unix sockets")
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return uid
