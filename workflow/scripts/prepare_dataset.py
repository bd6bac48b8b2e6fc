"""Write one dataset's formatted prompts ({"turns": [...]} per line) for the decode jobs."""

from bastion.data import registry as datasets
from bastion.pipeline.joblog import job_log

with job_log(snakemake.log[0]):
    n = datasets.prepare(snakemake.wildcards.dataset, snakemake.output[0], cache_dir=snakemake.params.cache_dir)
    print(f"{snakemake.wildcards.dataset}: {n} records -> {snakemake.output[0]}")
