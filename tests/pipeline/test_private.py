"""No way in for other local users: private folders, lock files never followed through a link,
and sockets whose peer must be this user before anything from it is unpickled.

Other users are played by uid 12345: the tests run as root, so they can hand a folder or
file to it (``os.chown``) and fork a process that runs as it (``os.setuid``).
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bastion.pipeline import gpu_slots, private, worker, worker_process
from tests.pipeline.test_worker import REPO, SCRIPT

OTHER = 12345
as_root = pytest.mark.skipif(os.getuid() != 0, reason="playing another user needs root (chown, setuid)")


def listing(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry's mode, owner and content (for files): proof that nothing in it changed."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = os.lstat(p)
        body = p.read_bytes() if stat.S_ISREG(st.st_mode) else b""
        out[str(p.relative_to(folder))] = (st.st_mode, st.st_uid, body)
    return out


# --------------------------------------------------------------------------- folders


def test_a_private_folder_is_made_closed_to_others_and_kept(tmp_path):
    folder = private.private_dir(tmp_path / "a" / "w", "the test folder")
    st = os.lstat(folder)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    (folder / "kept").write_text("x")
    assert private.private_dir(folder, "the test folder") == folder and (folder / "kept").read_text() == "x"


@as_root
def test_a_folder_of_another_user_is_refused_untouched(tmp_path):
    folder = tmp_path / "w"
    folder.mkdir(mode=0o700)
    (folder / "their.sock").write_text("theirs")
    os.chown(folder, OTHER, OTHER)
    before = listing(tmp_path)
    with pytest.raises(private.UnsafePathError) as err:
        private.private_dir(folder, "the job worker's folder")
    assert str(err.value) == (f"the job worker's folder {folder} is a folder owned by uid {OTHER}, mode 0700; it must "
                              f"be a folder of uid {os.getuid()} closed to others (mode 0700): remove it (or have its "
                              "owner remove it) and rerun")
    assert listing(tmp_path) == before


def test_a_world_writable_folder_or_a_link_is_refused_untouched(tmp_path):
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    (open_folder / "planted").write_text("?")
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    before = listing(tmp_path)
    mine = f"owned by uid {os.getuid()}"
    with pytest.raises(private.UnsafePathError, match=rf"{open_folder} is a folder {mine}, mode 0777"):
        private.private_dir(open_folder, "the job worker's folder")
    with pytest.raises(private.UnsafePathError, match=rf"{link} is a symbolic link {mine}"):
        private.private_dir(link, "the GPU slot lock folder")
    assert listing(tmp_path) == before


def test_the_worker_folder_prefers_a_private_runtime_folder(tmp_path, monkeypatch):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert worker.socket_dir() == runtime / f"bastion-worker-{os.getuid()}"
    runtime.chmod(0o755)  # others may enter it: not the user's runtime folder
    assert worker.socket_dir().parent != runtime
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "absent"))
    assert worker.socket_dir().parent != tmp_path / "absent"


@as_root
def test_a_job_refuses_a_planted_worker_folder_in_one_line(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    planted = runtime / f"bastion-worker-{os.getuid()}"
    planted.mkdir(mode=0o700)
    (planted / "trap.sock").write_text("theirs")
    os.chown(planted, OTHER, OTHER)
    before = listing(runtime)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_RUNTIME_DIR=str(runtime))
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "a.log"), str(tmp_path / "a.out"), "ok"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        f"error: the job worker's folder {planted} is a folder owned by uid {OTHER}, mode 0700; it must be a folder "
        f"of uid {os.getuid()} closed to others (mode 0700): remove it (or have its owner remove it) and rerun"]
    assert not (tmp_path / "a.out").exists() and listing(runtime) == before


# --------------------------------------------------------------------------- GPU slot locks


def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    monkeypatch.delenv(gpu_slots.LOCK_DIR_ENV, raising=False)
    monkeypatch.delenv(gpu_slots.HELD_ENV, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's work\n")
    (locks / "gpu0.lock").symlink_to(precious)
    with pytest.raises(private.UnsafePathError, match=rf"lock file {locks}/gpu0.lock is a symbolic link"):
        gpu_slots.acquire(["0", "1"], lock_dir=locks, timeout_s=1)
    assert precious.read_text() == "the user's work\n"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1" and sorted(p.name for p in locks.iterdir()) == ["gpu0.lock"]


@as_root
def test_a_lock_folder_or_lock_file_of_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(gpu_slots.HELD_ENV, raising=False)
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, OTHER, OTHER)
    monkeypatch.setenv(gpu_slots.LOCK_DIR_ENV, str(foreign))
    with pytest.raises(private.UnsafePathError, match=rf"the GPU slot lock folder {foreign} is a folder owned by uid"):
        gpu_slots.acquire(["0"], timeout_s=1)
    assert not list(foreign.iterdir())
    monkeypatch.delenv(gpu_slots.LOCK_DIR_ENV)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (mine / "gpu0.lock").write_text("their pid\n")
    os.chown(mine / "gpu0.lock", OTHER, OTHER)
    with pytest.raises(private.UnsafePathError, match=rf"lock file {mine}/gpu0.lock is a file owned by uid {OTHER}"):
        gpu_slots.acquire(["0"], lock_dir=mine, timeout_s=1)
    assert (mine / "gpu0.lock").read_text() == "their pid\n"


# --------------------------------------------------------------------------- peers


class Trap:
    """Unpickling it writes a file: proof of whether anything from the peer was unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (self.path, "unpickled"))


@pytest.fixture
def shared():
    """A folder both users can reach (pytest's own temp folders are closed to others)."""
    folder = Path(tempfile.mkdtemp(prefix="bastion-peer-test-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder)


def _as_other(body) -> int:
    """Fork a child that runs ``body()`` as uid 12345 and exits; returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(OTHER)
            os.setuid(OTHER)
            body()
        finally:
            os._exit(0)
    return pid


def test_a_peer_of_another_uid_is_refused_before_anything_is_read(tmp_path, monkeypatch):
    """A fake peer check fed another uid: the client never sends nor reads."""
    path = tmp_path / "w.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    monkeypatch.setattr(worker, "peer_uid", lambda conn: os.getuid() + 1)
    with pytest.raises(worker.ForeignPeerError, match=rf"runs as uid {os.getuid() + 1}, not as this user"):
        worker._connect(path)
    monkeypatch.undo()
    conn = worker._connect(path)  # the same socket, served by this user: accepted
    assert conn is not None and private.peer_uid(conn) == os.getuid()
    conn.close()
    srv.close()


@as_root
def test_a_worker_socket_served_by_another_user_is_never_read(tmp_path, shared):
    path, marker = shared / "w.sock", tmp_path / "marker"

    def serve_a_trap() -> None:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(path))
        srv.listen(1)
        conn, _ = srv.accept()
        worker.send(conn, Trap(marker))
        conn.recv(1)

    pid = _as_other(serve_a_trap)
    try:
        deadline = time.monotonic() + 30
        while not path.exists():
            assert time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0), "the other user's server"
            time.sleep(0.02)
        with pytest.raises(worker.ForeignPeerError, match=rf"{path} runs as uid {OTHER}, not as this user"):
            worker._connect(path)
    finally:
        os.waitpid(pid, 0)
    assert not marker.exists()


@as_root
def test_the_worker_closes_a_client_of_another_user_unread(tmp_path, shared, capsys):
    path, marker = shared / "w.sock", tmp_path / "marker"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    path.chmod(0o777)  # so that the other user can connect at all
    srv.listen(2)
    srv.settimeout(30)

    def send_a_trap() -> None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(path))
        data = pickle.dumps(Trap(marker))
        conn.sendall(len(data).to_bytes(8, "big") + data)

    pid = _as_other(send_a_trap)
    try:
        assert worker_process.accept(srv, path) is None
    finally:
        os.waitpid(pid, 0)
    assert not marker.exists()
    assert f"refused a client: the other end of {path} runs as uid {OTHER}" in capsys.readouterr().out
    mine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mine.connect(str(path))
    conn = worker_process.accept(srv, path)
    assert conn is not None
    for s in (conn, mine, srv):
        s.close()
