"""Snakemake's conventions, as the workflow catalog checks them: snakefmt's formatting,
`get_*` input functions, and the catalog's usage file (the linter runs in test_pipeline.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_snakefmt_leaves_the_workflow_unchanged():
    res = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow/"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def test_functions_of_wildcards_are_named_get():
    """Every public function of common.smk that takes the job's wildcards is an input (or params) function: get_*."""
    text = (REPO / "workflow/rules/common.smk").read_text()
    takes_wildcards = re.findall(r"^def (\w+)\(\s*wildcards\b", text, re.M)
    assert len(takes_wildcards) >= 8
    assert [n for n in takes_wildcards if not n.startswith(("get_", "_"))] == []  # "_": private helpers


def test_the_catalog_file_describes_usage():
    usage = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert "--cores" in usage["mandatory-flags"]["desc"]
    stack = usage["software-stack-deployment"]
    assert stack["conda"] is True and stack["apptainer"] is False and usage["report"] is True
    # the conda claim holds: every rule names the pinned environment
    rules = "".join(p.read_text() for p in (REPO / "workflow/rules").glob("*.smk"))
    assert rules.count('"../../envs/bastion.yaml"') >= rules.count("    script:") > 0
