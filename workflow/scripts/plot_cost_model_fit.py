"""Predicted against measured verification latency of each model's calibrated cost model."""

from bastion.pipeline.joblog import job_log
from bastion.report import plots_steps

with job_log(snakemake.log[0]):
    plots_steps.cost_model_fit(list(snakemake.input.grids), list(snakemake.params.models), snakemake.output[0],
                         snakemake.params.title)
    print(f"wrote {snakemake.output[0]}")
