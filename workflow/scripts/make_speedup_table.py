"""The main table (speedup and tau per dataset) in its csv, md, tex and pdf twins."""

from bastion.pipeline.joblog import job_log
from bastion.report import table_formats

with job_log(snakemake.log[0]):
    out = snakemake.output
    table = table_formats.write_speedup_table(snakemake.input.cells, snakemake.params.methods, snakemake.params.title,
                                             out.csv, out.md, out.tex, out.pdf)
    print(f"speedup table: {len(table) - 1} datasets, {len(table.columns)} columns")
