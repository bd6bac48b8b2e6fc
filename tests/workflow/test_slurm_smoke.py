"""Smoke test of profiles/slurm against a real SLURM cluster.

Runs a toy workflow through ``snakemake --profile profiles/slurm`` (executor
plugin -> sbatch -> slurmd -> job step -> srun -> snakemake inside the job);
tests/workflow/test_slurm.py runs the real pipeline the same way.

The cluster comes from tests/support/slurm_cluster.py: an already running one, or a
single-node cluster started (and stopped) with .ci/slurm/start.sh / stop.sh.
A reused cluster must offer GPUs of GRES type "fake" (start.sh does).
Skipped only when slurmctld is not installed (.ci/slurm/install.sh).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.slurm_cluster import REPO, slurm_fixture, slurm_installed

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        not slurm_installed(),
        reason="slurmctld is not installed (run .ci/slurm/install.sh as root)",
    ),
]

slurm = slurm_fixture(scope="module")

PROFILE = REPO / "profiles" / "slurm"
RUN_TIMEOUT = 300  # seconds, for the whole toy workflow

SNAKEFILE = textwrap.dedent(
    """
    rule all:
        input: "summary.txt"

    # Generic GPU request: plugin -> sbatch --gpus=1
    rule gpu_job:
        output: "gpu.txt"
        resources: gpu=1, mem_mb=200, runtime=5
        shell: "echo \\"$CUDA_VISIBLE_DEVICES\\" > {output}"

    # GPU type request: plugin -> sbatch --gpus=fake:1 (type from gres.conf)
    rule gpu_model_job:
        output: "gpu_model.txt"
        resources: gpu=1, gpu_model="fake", mem_mb=200, runtime=5
        shell: "echo \\"$CUDA_VISIBLE_DEVICES\\" > {output}"

    rule cpu_job:
        input: "gpu.txt", "gpu_model.txt"
        output: "summary.txt"
        resources: mem_mb=200, runtime=5
        shell: "cat {input} > {output}; echo \\"job=$SLURM_JOB_ID\\" >> {output}"
    """
)

# Poll quickly so the test takes seconds, not minutes (the plugin waits 40 s
# before its first status check by default); keep logs of successful jobs.
FAST = [
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--seconds-between-status-checks",
    "1",
    "--slurm-keep-successful-logs",
]


def _snakemake(
    workdir: Path,
    *extra: str,
    limit: int,
    targets: tuple[str, ...] = (),
    fast: bool = True,
) -> tuple[int, str, float]:
    """Run snakemake with the SLURM profile under `timeout`; (rc, output, s)."""
    # --foreground: stay in pytest's process group, so that whoever stops
    # pytest (e.g. .ci/slurm/run-tests.sh on its time limit) stops this too.
    cmd = [
        "timeout", "--foreground", "-k", "10", str(limit),
        sys.executable, "-m", "snakemake", *targets,
        "--profile", str(PROFILE),
        "--snakefile", str(workdir / "Snakefile"),
        "--directory", str(workdir),
        *(FAST if fast else ()),
        *extra,
    ]  # fmt: skip
    t0 = time.monotonic()
    res = subprocess.run(
        cmd,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=limit + 30,
        check=False,
    )
    return res.returncode, res.stdout, time.monotonic() - t0


def _scontrol_job(jobid: str) -> str:
    res = subprocess.run(
        ["scontrol", "show", "job", jobid],
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    )
    return res.stdout if res.returncode == 0 else ""


def _toy(tmp_path: Path) -> Path:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    return tmp_path


def test_profile_runs_jobs_through_slurm(slurm, tmp_path):
    wd = _toy(tmp_path)
    extra = []
    if slurm.partition != "debug":  # a reused cluster with another default
        extra = ["--default-resources", f"slurm_partition='{slurm.partition}'",
                 "mem_mb=200", "runtime=5"]  # fmt: skip
    rc, out, secs = _snakemake(wd, *extra, limit=RUN_TIMEOUT)
    assert rc not in (124, 137), f"snakemake hung (> {RUN_TIMEOUT} s):\n{out}"
    assert rc == 0, f"snakemake failed (exit {rc}) after {secs:.0f} s:\n{out}"

    # Every rule except `all` went through sbatch and got a SLURM job id.
    submitted = dict(
        re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/rule_(\w+)/", out)
    )
    rules = sorted(submitted.values())
    assert rules == ["cpu_job", "gpu_job", "gpu_model_job"], out
    for jobid, rule in submitted.items():
        log = wd / ".snakemake" / "slurm_logs" / f"rule_{rule}" / f"{jobid}.log"
        assert log.is_file(), f"missing SLURM log {log}\n{out}"
        assert "Finished jobid" in log.read_text(), log.read_text()
        info = _scontrol_job(jobid)
        if info:  # gone if the cluster's MinJobAge is short; fine then
            assert "JobState=COMPLETED" in info, info
            assert f"Partition={slurm.partition}" in info, info
            if rule == "gpu_job":
                assert "TresPerJob=gres:gpu:1" in info, info
            if rule == "gpu_model_job":
                assert "TresPerJob=gres:gpu:fake:1" in info, info

    # The GPU jobs were given devices by SLURM (fake GPUs on the CI cluster).
    for name in ("gpu.txt", "gpu_model.txt"):
        cvd = (wd / name).read_text().strip()
        assert re.fullmatch(r"\d+(,\d+)*", cvd), f"{name}: CUDA_VISIBLE_DEVICES={cvd!r}"
    summary = (wd / "summary.txt").read_text()
    assert re.search(r"^job=\d+$", summary, re.M), summary
    how = f"started in {slurm.start_seconds:.1f} s" if slurm.started_here else "reused"
    print(f"toy workflow through SLURM: {secs:.1f} s (cluster {how})")
