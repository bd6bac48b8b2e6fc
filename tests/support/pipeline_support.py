"""Running the real pipeline from a throwaway copy of the checkout (test helper module).

Commands run in a temporary copy with that copy first on PYTHONPATH, so a test may edit
sources or configuration without touching the repository, and so the copy is what a
clean clone would hold (tracked and untracked-but-not-ignored files).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# A record a run finished earlier: the work a bad input's run must not lose, planted before it.
RECORD = json.dumps({"run_key": "finished-earlier", "prompt_index": 0, "method": "ar", "output_ids": [1, 2]}) + "\n"


def copy_checkout(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    # These tests check the pipeline's mechanics on a shared 2-core machine, where two
    # parallel jobs make timing noise that can exceed the calibration quality gate (tested
    # itself in tests/calibration and tests/faults).
    config = dest / "config.yaml"
    text = config.read_text()
    # The tests drive the pipeline's mechanics (jobs, reruns, resumes, SLURM), not its
    # speedups, which the default run's benchmark measures (docs/performance.md): the tiny
    # experiment's prompts are decoded to 64 new tokens instead of 128, and calibrated on
    # the small test grid, so each full run takes about half as long on the 2-core CI machine.
    # They decode at T = 0 only; tests/workflow/test_sampled.py runs the T = 1 panel's jobs.
    for old, new in (("accept_calibration_error: false", "accept_calibration_error: true"),
                     ("    max_new_tokens: 128 ", "    max_new_tokens: 64 "),
                     ("    calibration_grid: small ", "    calibration_grid: tiny "),
                     ("    temperatures: [0.0, 1.0]  ", "    temperatures: [0.0]  ")):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    config.write_text(text)
    return dest


def env(work: Path, **extra: str) -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=str(work), OMP_NUM_THREADS="1", BASTION_HUB_TIMEOUT_S="5", **extra)
    for k in ("SLURM_JOB_ID", "HF_HUB_OFFLINE"):
        e.pop(k, None)
    return e


def smk(work: Path, *args: str, timeout: float = 900, check: bool = True,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    res = subprocess.run([*SNAKEMAKE, *args], cwd=work, env=env(work, **(extra_env or {})), capture_output=True,
                         text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{res.stdout[-4000:]}\n{res.stderr[-6000:]}")
    return res


def dry_run_with(work: Path, overlay: Path, yaml_text: str) -> tuple[int, str]:
    """(exit status, output) of a dry run with ``yaml_text`` written to ``overlay`` on top of config.yaml."""
    overlay.write_text(yaml_text)
    res = smk(work, "-n", "--configfile", "config.yaml", str(overlay), check=False)
    return res.returncode, res.stdout + res.stderr


def planned(work: Path, *args: str, extra_env: dict[str, str] | None = None) -> dict[str, int]:
    """Rule -> number of jobs a dry run would execute ({} when nothing is to be done)."""
    res = smk(work, "-n", "--quiet", "rules", *args, extra_env=extra_env)
    return _job_counts(res.stdout + res.stderr)


def dry_run(work: Path, *args: str) -> tuple[dict[str, int], str]:
    """A dry run's job counts (as :func:`planned` gives them) and its printout, job by job."""
    res = smk(work, "-n", *args)
    return _job_counts(res.stdout + res.stderr), res.stdout


def _job_counts(out: str) -> dict[str, int]:
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:", 1)[1].split("\n\n", 1)[0] if "Job stats:" in out else out
    counts = {}
    for line in table.splitlines():
        m = re.match(r"^\s*([a-z_]+)\s+(\d+)\s*$", line)
        if m and m.group(1) != "total":
            counts[m.group(1)] = int(m.group(2))
    return counts


def dag_jobs(work: Path, *targets: str, configfiles: tuple[str, ...] = (), config: dict | None = None,
             cores: int = 1) -> list[dict]:
    """Every job a dry run of ``targets`` with ``--cores cores`` would execute, with its evaluated params
    and threads (tests/support/dag_jobs.py)."""
    spec = json.dumps({"targets": list(targets), "configfiles": list(configfiles), "config": config or {},
                       "cores": cores})
    res = subprocess.run([sys.executable, "-m", "tests.support.dag_jobs", spec], cwd=work, env=env(work),
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise AssertionError(f"dag_jobs {spec} failed:\n{res.stdout[-4000:]}\n{res.stderr[-6000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def hardware_key(work: Path) -> str:
    """The key `hardware: auto` gives this machine, when it has results (other keys' may exist too)."""
    from bastion.calibration.hardware import detect_key

    key = detect_key("cpu")
    if (work / "results" / key).is_dir():
        return key
    return next(p.name for p in sorted((work / "results").iterdir()) if p.is_dir() and p.name not in ("datasets", "models"))


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every file under ``root`` with its bytes (a symlink by its target): the proof that nothing changed."""
    out: dict[str, bytes | str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            rel = str(path.relative_to(root))
            out[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else (path.read_bytes() if path.is_file() else "/")
    return out


def missing_doc_rows(names) -> list[str]:
    """The bad-input cases among ``names`` that are not a row of docs/bad-inputs.md, the table users read."""
    table = (REPO / "docs" / "bad-inputs.md").read_text()
    return [name for name in names if f"| {name} |" not in table]
