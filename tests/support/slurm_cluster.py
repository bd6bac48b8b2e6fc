"""Provide a real single-node SLURM cluster to tests (helper module, no tests).

``slurm_cluster()`` is a context manager:

* ``slurmctld`` not installed -> ``pytest.skip`` (install it with
  ``.ci/slurm/install.sh``);
* a cluster already answers (``sinfo`` lists a node that is idle, mixed or
  allocated) -> it is used as is and left running;
* otherwise ``.ci/slurm/start.sh`` starts one (needs root) with its state in a
  fresh temporary folder, and ``.ci/slurm/stop.sh`` stops exactly those
  daemons afterwards.

Every external command runs under a timeout; failures raise
``SlurmClusterError`` with the script output (start.sh prints the daemon log
tails when the node does not come up).

``slurm_fixture(scope=...)`` turns it into a pytest fixture::

    from tests.support.slurm_cluster import slurm_fixture
    slurm = slurm_fixture(scope="module")

    def test_x(slurm):
        assert slurm.partition == "debug"
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

REPO = Path(__file__).resolve().parents[2]
CI_DIR = REPO / ".ci" / "slurm"
START = CI_DIR / "start.sh"
STOP = CI_DIR / "stop.sh"

# Node states (sinfo %T, flags such as "*" = not responding stripped
# separately) in which the node accepts jobs.
READY_STATES = {"idle", "mixed", "allocated", "completing"}


class SlurmClusterError(RuntimeError):
    """The test cluster could not be found, started or stopped."""


@dataclasses.dataclass(frozen=True)
class SlurmCluster:
    started_here: bool  # True: started by this helper and stopped on exit
    state_dir: Optional[Path]  # start.sh state (logs, pid files) if started here
    partition: str  # default partition of the cluster
    node_states: tuple[str, ...]  # sinfo node states when it was found ready
    start_seconds: float  # wall time to bring the cluster up (0 if reused)


def slurm_installed() -> bool:
    """True if the SLURM controller daemon is installed on this machine."""
    return bool(shutil.which("slurmctld")) or Path("/usr/sbin/slurmctld").exists()


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def controller_up(timeout: float = 15) -> bool:
    """True if `scontrol ping` reaches a slurmctld (fails at once when down,
    whereas sinfo retries for ~10 s)."""
    if not shutil.which("scontrol"):
        return False
    try:
        res = _run(["scontrol", "ping"], timeout)
    except subprocess.TimeoutExpired:
        return False
    return res.returncode == 0 and " is UP" in res.stdout


def _node_states(timeout: float = 15) -> tuple[str, ...]:
    """Node states sinfo reports; empty if no controller answers."""
    if not shutil.which("sinfo") or not controller_up(timeout):
        return ()
    try:
        res = _run(["sinfo", "-h", "-N", "-o", "%T"], timeout)
    except subprocess.TimeoutExpired:
        return ()
    if res.returncode != 0:
        return ()
    return tuple(s.strip() for s in res.stdout.split() if s.strip())


def cluster_ready(timeout: float = 15) -> bool:
    """True if a SLURM controller answers and has a schedulable node."""
    return any(s in READY_STATES for s in _node_states(timeout))


def default_partition(timeout: float = 15) -> str:
    """Name of the default partition (sinfo marks it with '*')."""
    try:
        res = _run(["sinfo", "-h", "-o", "%P"], timeout)
    except subprocess.TimeoutExpired:
        return "debug"
    for name in res.stdout.split():
        if name.endswith("*"):
            return name[:-1]
    return "debug"


def _format(res: subprocess.CompletedProcess | subprocess.TimeoutExpired) -> str:
    def text(x) -> str:
        if x is None:
            return ""
        return x.decode(errors="replace") if isinstance(x, bytes) else x

    return f"--- stdout ---\n{text(res.stdout)}\n--- stderr ---\n{text(res.stderr)}"


def _stop(state_dir: Path, timeout: float) -> None:
    try:
        res = _run(["bash", str(STOP), str(state_dir)], timeout)
    except subprocess.TimeoutExpired as exc:
        raise SlurmClusterError(
            f"{STOP} {state_dir} did not finish within {timeout:.0f} s\n" + _format(exc)
        ) from None
    if res.returncode != 0:
        raise SlurmClusterError(
            f"{STOP} {state_dir} failed (exit {res.returncode})\n" + _format(res)
        )


@contextlib.contextmanager
def slurm_cluster(
    state_dir: Optional[os.PathLike] = None,
    start_timeout: float = 120,
    stop_timeout: float = 90,
) -> Iterator[SlurmCluster]:
    """Yield a running SLURM cluster (see module docstring)."""
    if not slurm_installed():
        import pytest

        pytest.skip("slurmctld is not installed (run .ci/slurm/install.sh as root)")

    states = _node_states()
    if any(s in READY_STATES for s in states):
        yield SlurmCluster(False, None, default_partition(), states, 0.0)
        return

    if os.geteuid() != 0:
        raise SlurmClusterError(
            "no SLURM cluster is answering and starting one needs root: run "
            "`sudo .ci/slurm/start.sh` first (sinfo node states: "
            f"{list(states) or 'no answer'})"
        )

    made_dir = state_dir is None
    sdir = Path(tempfile.mkdtemp(prefix="slurm-ci-") if made_dir else state_dir)
    t0 = time.monotonic()
    try:
        res = _run(["bash", str(START), str(sdir)], start_timeout)
    except subprocess.TimeoutExpired as exc:
        with contextlib.suppress(SlurmClusterError):
            _stop(sdir, stop_timeout)  # stop whatever came up before the timeout
        raise SlurmClusterError(
            f"{START} {sdir} did not finish within {start_timeout:.0f} s\n" + _format(exc)
        ) from None
    if res.returncode != 0:
        with contextlib.suppress(SlurmClusterError):
            _stop(sdir, stop_timeout)  # start.sh records each daemon as it starts
        raise SlurmClusterError(
            f"{START} {sdir} failed (exit {res.returncode})\n" + _format(res)
        )
    start_seconds = time.monotonic() - t0

    states = _node_states()
    if not any(s in READY_STATES for s in states):
        with contextlib.suppress(SlurmClusterError):
            _stop(sdir, stop_timeout)
        raise SlurmClusterError(
            f"start.sh succeeded but sinfo shows no ready node: {list(states)}\n"
            + _format(res)
        )
    try:
        yield SlurmCluster(True, sdir, default_partition(), states, start_seconds)
    finally:
        _stop(sdir, stop_timeout)
        if made_dir:
            # Keep the logs when something stayed up; otherwise tidy up.
            shutil.rmtree(sdir, ignore_errors=True)


def slurm_fixture(scope: str = "session", name: Optional[str] = None):
    """Return a pytest fixture that provides ``slurm_cluster()``.

    Assign it to a module-level name in a test module or conftest.py.
    """
    import pytest

    def _fixture():
        with slurm_cluster() as cluster:
            yield cluster

    kwargs = {"scope": scope}
    if name:
        kwargs["name"] = name
    return pytest.fixture(**kwargs)(_fixture)
