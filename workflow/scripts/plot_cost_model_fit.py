"""Predicted against measured verification latency of each model's calibrated cost model."""

from bastion.report import plots_steps
from bastion.pipeline.joblog import job_log

with job_log(snakemake.log[0]):
    plots_steps.cost_model_fit(list(snakemake.input.grids), list(snakemake.params.models), snakemake.output[0],
                         snakemake.params.title)
    print(f"wrote {snakemake.output[0]}")
