"""Distribution of tokens committed per step, DFlash against BASTION."""

from bastion import plots
from bastion.joblog import job_log

with job_log(snakemake.log[0]):
    plots.acceptance_length(snakemake.input.steps, snakemake.output[0], snakemake.params.title)
    print(f"wrote {snakemake.output[0]}")
