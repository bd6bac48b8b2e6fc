"""The pipeline run that several test modules check, made once per pytest session.

A full run of the tiny experiment costs minutes on a 2-core machine.  ``tiny_run`` makes
it once, in a throwaway copy of the checkout, and keeps a copy of its results as they
were: test_pipeline.py checks the run and then changes it (reruns, kills, switches),
and the SLURM tests compare their cluster run's records with the untouched copy.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.pipeline_support import copy_checkout, smk


@dataclass(frozen=True)
class TinyRun:
    work: Path  # the run's folder; test_pipeline.py changes it
    pristine: Path  # its results/ as the run left them, for reading only
    seconds: float  # wall time of the run, from a clean copy


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> TinyRun:
    """`snakemake --cores 1 figures/speedup_table.pdf` from a clean copy, as a new user runs it."""
    work = copy_checkout(tmp_path_factory.mktemp("pipeline"))
    t0 = time.monotonic()
    smk(work, "--cores", "1", "figures/speedup_table.pdf", timeout=900)
    seconds = time.monotonic() - t0
    pristine = tmp_path_factory.mktemp("pipeline-pristine")
    shutil.copytree(work / "results", pristine / "results")
    return TinyRun(work, pristine, seconds)
