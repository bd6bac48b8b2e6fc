"""Per method and temperature, the fraction of steps whose accepted path reaches each depth."""

from bastion.pipeline.joblog import job_log
from bastion.report import plots_steps

with job_log(snakemake.log[0]):
    plots_steps.acceptance_by_position(snakemake.input.steps, snakemake.output[0], snakemake.params.title)
    print(f"wrote {snakemake.output[0]}")
