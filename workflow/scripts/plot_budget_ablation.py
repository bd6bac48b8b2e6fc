"""Speedup against a fixed tree budget, with the adaptive BASTION point."""

from bastion.pipeline.joblog import job_log
from bastion.report import plots

with job_log(snakemake.log[0]):
    plots.budget_ablation(snakemake.input.cells, snakemake.output[0], snakemake.params.title)
    print(f"wrote {snakemake.output[0]}")
