"""Speedup against a fixed tree budget, with each budget rule's point and the same-size check."""

from bastion.pipeline.joblog import job_log
from bastion.report import plots

with job_log(snakemake.log[0]):
    plots.budget_ablation(snakemake.input.cells, snakemake.output[0], snakemake.params.title,
                          snakemake.input.same_size)
    print(f"wrote {snakemake.output[0]}")
