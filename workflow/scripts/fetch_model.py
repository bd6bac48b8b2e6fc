"""Resolve a target/drafter pair and its EAGLE-3 head to local folders (downloading on first use)."""

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
    # the EAGLE-3 head: the entry's own, else the registry's for a registered target; only
    # fetched when the experiment runs eagle3 (a pair without a head still decodes the rest)
    eagle3 = spec.get("eagle3") or models.resolve_eagle3(spec["target"])
    if eagle3 is not None and snakemake.params.eagle3:
        resolved["eagle3_ref"] = eagle3
        resolved["eagle3"] = models.fetch(eagle3, "eagle3")
    with open(snakemake.output[0], "w") as fh:
        json.dump(resolved, fh, indent=1)
    print(json.dumps(resolved, indent=1))
