"""Resolve a target/drafter pair to local folders (downloading on first use)."""

import json

from bastion.models import registry as models
from bastion.pipeline.joblog import job_log

with job_log(snakemake.log[0]):
    spec = snakemake.params.spec
    resolved = {
        "model": snakemake.wildcards.model,
        "target_ref": spec["target"],
        "drafter_ref": spec["drafter"],
        "target": models.fetch(spec["target"], "target"),
        "drafter": models.fetch(spec["drafter"], "drafter"),
    }
    with open(snakemake.output[0], "w") as fh:
        json.dump(resolved, fh, indent=1)
    print(json.dumps(resolved, indent=1))
