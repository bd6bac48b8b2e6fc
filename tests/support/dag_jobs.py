"""Print, as JSON, every job a dry run would execute, with its evaluated params.

A dry run's printout names each job's inputs and outputs but not its params, and a cell
or model job wires multi-turn histories through params (the job makes AR's records
itself).  This builds the DAG through Snakemake's API, as ``snakemake -n`` does, and
prints rule, input, output, params, threads, log and benchmark of each job.  Run in the
workflow's folder:

    python -m tests.support.dag_jobs '{"targets": [...], "configfiles": [...], "config": {...}, "cores": 1}'

It reaches into the workflow object (``_prepare_dag``, ``_build_dag``): Snakemake's
public API runs or prints a DAG but does not hand out its jobs (checked with Snakemake 9).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def jobs(targets: list[str], configfiles: list[str], config: dict[str, Any], cores: int = 1) -> list[dict[str, Any]]:
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        OutputSettings,
        Quietness,
        ResourceSettings,
        StorageSettings,
    )

    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(cores=cores),
            config_settings=ConfigSettings(config=config, configfiles=[Path(p) for p in configfiles]),
            storage_settings=StorageSettings(), snakefile=Path("Snakefile"), workdir=Path.cwd())
        workflow = workflow_api.dag(dag_settings=DAGSettings(targets=set(targets))).workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        workflow._build_dag()
        return [{
            "rule": job.rule.name, "input": [str(f) for f in job.input], "output": [str(f) for f in job.output],
            "params": dict(job.params.items()), "threads": job.threads, "log": [str(f) for f in job.log],
            "benchmark": str(job.benchmark) if job.benchmark else None,
        } for job in workflow.dag.needrun_jobs()]


def main() -> None:
    spec = json.loads(sys.argv[1])
    found = jobs(spec["targets"], spec.get("configfiles", []), spec.get("config", {}), spec.get("cores", 1))
    print(json.dumps(found, default=repr))


if __name__ == "__main__":
    main()
