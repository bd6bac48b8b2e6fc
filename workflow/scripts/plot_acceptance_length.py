"""Distribution of tokens committed per step, EAGLE-3 and DFlash against BASTION."""

from bastion.pipeline.joblog import job_log
from bastion.report import plots_steps

with job_log(snakemake.log[0]):
    plots_steps.acceptance_length(snakemake.input.steps, snakemake.output[0], snakemake.params.title)
    print(f"wrote {snakemake.output[0]}")
