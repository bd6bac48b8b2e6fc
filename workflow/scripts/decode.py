"""Decode one cell (or shard) as a DecodeRun, the CLI's own run; resumes from <output>.partial."""

from bastion.pipeline.worker import hand_off

# a GPU job runs in the warm job worker, which exits this process with its status (bastion/pipeline/worker.py)
hand_off(snakemake, __file__, snakemake.params.knobs["device"])

import json

from bastion.runs.device_job import device_job
from bastion.runs.checks import parse_shard
from bastion.runs.run import run_from_knobs

k = snakemake.params.knobs
with device_job(snakemake.log[0], snakemake.wildcards.hardware, k["pattern"], k["device"]):
    models = json.load(open(snakemake.input.model))
    run_from_knobs(
        k, models, snakemake.input.data, snakemake.input.calibration, snakemake.wildcards.hardware,
        snakemake.wildcards.model, snakemake.wildcards.dataset, snakemake.output[0],
        history=snakemake.input.get("history"), shard=parse_shard(snakemake.params.shard or None),
        threads=snakemake.threads, eagle3_tree_file=snakemake.input.get("eagle3_tree"),
    ).execute()
