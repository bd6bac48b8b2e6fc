"""BASTION's adaptive tree size over the decoding steps and against the context length."""

from bastion.pipeline.joblog import job_log
from bastion.report import plots_steps

with job_log(snakemake.log[0]):
    plots_steps.tree_budget(snakemake.input.steps, snakemake.output[0], snakemake.params.title)
    print(f"wrote {snakemake.output[0]}")
