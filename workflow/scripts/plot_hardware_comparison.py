"""Average speedup per hardware key, grouped by method."""

from bastion.pipeline.joblog import job_log
from bastion.report import plots

with job_log(snakemake.log[0]):
    plots.hardware_comparison(list(snakemake.input.cells), snakemake.output[0], snakemake.params.title)
    print(f"wrote {snakemake.output[0]}")
