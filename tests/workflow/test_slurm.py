"""The tiny experiment through `snakemake --profile profiles/slurm` on a real SLURM cluster.

slurmctld and slurmd run on this machine (started by the fixture when none is running;
skipped only when slurmctld is not installed).  Jobs go executor plugin -> sbatch ->
slurmd -> snakemake inside the job, with fake GPUs (device nodes listed in gres.conf),
so GPU rules get a real GRES allocation and CUDA_VISIBLE_DEVICES while decoding on CPU.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.pipeline_support import copy_checkout, env, hardware_key
from tests.support.slurm_cluster import slurm_fixture

pytestmark = pytest.mark.slurm
slurm = slurm_fixture(scope="module")

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "slurm"
# poll every second instead of the plugin's default 40 s first wait; keep job logs
FAST = ["--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "1",
        "--slurm-keep-successful-logs"]
# tiny calibrates in one job (`calibration_jobs: one`) and decodes in one (`decode_jobs: model`)
GPU_RULES = ("calibrate_model", "decode_model")


def slurm_smk(work: Path, *args: str, limit: int = 1200, fast: bool = True) -> tuple[int, str]:
    cmd = ["timeout", "--foreground", "-k", "10", str(limit), sys.executable, "-m", "snakemake",
           "--profile", str(PROFILE), *(FAST if fast else ()), *args]
    res = subprocess.run(cmd, cwd=work, env=env(work), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=limit + 60)
    return res.returncode, res.stdout


def _partition_args(cluster) -> list[str]:
    return [] if cluster.partition == "debug" else ["--default-resources", f"slurm_partition='{cluster.partition}'"]


@pytest.fixture(scope="module")
def runs(slurm, tmp_path_factory, tiny_run):
    """One SLURM run, and the session's local run of the same experiment (as it left it)."""
    remote = copy_checkout(tmp_path_factory.mktemp("slurm-run"))
    t0 = time.monotonic()
    rc, out = slurm_smk(remote, *_partition_args(slurm), "--", "figures/speedup_table.pdf")
    seconds = time.monotonic() - t0
    assert rc not in (124, 137), f"snakemake hung:\n{out[-6000:]}"
    assert rc == 0, out[-8000:]
    print(f"tiny experiment through SLURM: {seconds:.0f} s")
    return remote, tiny_run.pristine, out


def test_jobs_went_through_slurm_with_gpu_allocations(runs):
    remote, _, out = runs
    submitted = re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/rule_(\w+)/", out)
    by_rule: dict[str, list[str]] = {}
    for jobid, rule in submitted:
        by_rule.setdefault(rule, []).append(jobid)
    for rule in GPU_RULES:
        assert by_rule.get(rule), f"no {rule} job was submitted to SLURM:\n{out[-4000:]}"
    for rule, ids in by_rule.items():
        for jobid in ids:
            log = remote / ".snakemake" / "slurm_logs" / f"rule_{rule}"
            assert any(log.rglob(f"{jobid}.log")), f"no SLURM log for job {jobid} ({rule})"
    # every GPU rule's job saw a GPU allocation from SLURM
    hw = hardware_key(remote)
    for rule in GPU_RULES:
        logs = list((remote / "logs" / rule).rglob("*.log"))
        assert logs, rule
        for log in logs:
            m = re.search(r"\[gpu-slot\] .* CUDA_VISIBLE_DEVICES=(\S*)", log.read_text())
            assert m and re.fullmatch(r"\d+(,\d+)*", m.group(1)), f"{log}: {log.read_text()[-1500:]}"
    rec = json.loads((remote / "results" / hw / "tiny" / "stdlib-heldout" / "t0" / "bastion.jsonl").read_text().splitlines()[0])
    assert re.fullmatch(r"\d+", rec["fingerprint"]["cuda_visible_devices"])


def test_outputs_equal_a_local_run(runs):
    remote, local, _ = runs
    hw = hardware_key(remote)
    files = sorted((remote / "results" / hw).rglob("*.jsonl"))
    assert len(files) >= 8  # both datasets' ar, eagle3, dflash and bastion
    for path in files:
        rel = path.relative_to(remote)
        ours = [(r["prompt_index"], r["turn"], r["output_ids"]) for r in map(json.loads, path.read_text().splitlines())]
        theirs = [(r["prompt_index"], r["turn"], r["output_ids"]) for r in map(json.loads, (local / rel).read_text().splitlines())]
        assert ours == theirs, rel


def _decode_job_id(workdir: Path, rule: str = "decode_model") -> str | None:
    """The running job of ``rule`` submitted from ``workdir``: never a job of another run on the same cluster."""
    res = subprocess.run(["squeue", "-h", "-o", "%i|%k|%T|%Z"], capture_output=True, text=True, timeout=15)
    for line in res.stdout.splitlines():
        jobid, comment, state, folder = (line.split("|") + ["", "", "", ""])[:4]
        if f"rule_{rule}" in comment and state == "RUNNING" and Path(folder).resolve() == workdir.resolve():
            return jobid
    return None


def test_scancelled_decode_job_finishes_on_the_next_invocation(runs, slurm):
    remote, _, _ = runs
    hw = hardware_key(remote)
    target = f"results/{hw}/tiny/humaneval-pkg/t0/bastion.jsonl"
    before = [json.loads(l) for l in (remote / target).read_text().splitlines()]
    (remote / target).unlink()
    partial = remote / f"{target}.partial"
    cmd = ["timeout", "--foreground", "-k", "10", "600", sys.executable, "-m", "snakemake", "--profile", str(PROFILE),
           *FAST, "--retries", "0", *_partition_args(slurm), "--", target]
    proc = subprocess.Popen(cmd, cwd=remote, env=env(remote), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    jobid = None
    deadline = time.monotonic() + 420  # the job decodes ar, eagle3 and dflash of humaneval-pkg before bastion
    while time.monotonic() < deadline:
        jobid = jobid or _decode_job_id(remote)
        if jobid and partial.exists() and len({json.loads(l)["prompt_index"] for l in partial.read_text().splitlines()}) >= 2:
            break
        time.sleep(0.1)
    assert jobid, "the decode job never ran"
    subprocess.run(["scancel", jobid], check=True, timeout=30)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode != 0, out[-3000:]  # the cancelled job failed this invocation
    assert not (remote / target).exists() and partial.exists()
    rc, out = slurm_smk(remote, *_partition_args(slurm), "--", target)
    assert rc == 0, out[-6000:]
    log = (remote / f"logs/decode_model/{hw}/tiny/t0.log").read_text()
    assert re.search(r"\[resume\] [2-7] of 8 prompts already done in \S*/bastion\.jsonl\.partial", log), log[-2000:]
    after = [json.loads(l) for l in (remote / target).read_text().splitlines()]
    assert sorted(r["prompt_index"] for r in after) == list(range(8))
    assert [r["output_ids"] for r in after] == [r["output_ids"] for r in before]


def test_unknown_partition_fails_clearly_not_hangs(runs):
    remote, _, _ = runs
    hw = hardware_key(remote)
    target = f"results/{hw}/tiny/humaneval-pkg/t0/ar.jsonl"
    (remote / target).unlink()
    t0 = time.monotonic()
    # the profile as users get it (no fast polling), with a partition the cluster lacks
    rc, out = slurm_smk(remote, "--set-resources", "decode_model:slurm_partition='nope'", "--", target, limit=300, fast=False)
    assert rc not in (124, 137), f"snakemake hung on a bad partition:\n{out[-3000:]}"
    assert rc != 0 and time.monotonic() - t0 < 120
    assert "SLURM sbatch failed" in out and re.search(r"invalid partition.*nope", out, re.I), out[-3000:]
