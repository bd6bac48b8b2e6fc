"""Speedup of each method per dataset, the average first."""

from bastion.pipeline.joblog import job_log
from bastion.report import plots

with job_log(snakemake.log[0]):
    plots.speedup_bars(snakemake.input.cells, snakemake.output[0], snakemake.params.title, snakemake.params.methods)
    print(f"wrote {snakemake.output[0]}")
