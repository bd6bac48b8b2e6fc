"""Merge a cell's shards into one record file (each prompt exactly once)."""

from bastion.pipeline.joblog import job_log
from bastion.results import records

with job_log(snakemake.log[0]):
    n = records.merge(snakemake.input, snakemake.output[0])
    print(f"merged {len(snakemake.input)} shards: {n} records")
