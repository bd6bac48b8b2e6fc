"""Speedup of each method per dataset, the average first."""

from bastion.report import plots
from bastion.pipeline.joblog import job_log

with job_log(snakemake.log[0]):
    plots.speedup_bars(snakemake.input.cells, snakemake.output[0], snakemake.params.title, snakemake.params.methods)
    print(f"wrote {snakemake.output[0]}")
