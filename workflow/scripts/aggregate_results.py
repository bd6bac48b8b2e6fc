"""Turn one hardware key's decode records into per-prompt, per-step and per-cell CSVs."""

from bastion.pipeline.joblog import job_log
from bastion.report import aggregate as analysis

with job_log(snakemake.log[0]):
    out = snakemake.output
    n = analysis.aggregate(snakemake.input, out.per_prompt, out.cells, out.steps, out.get("same_size"))
    print(f"aggregated {n} records from {len(snakemake.input)} files")
