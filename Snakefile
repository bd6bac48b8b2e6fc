# BASTION reproduction pipeline: datasets -> per-(hardware, model) calibration ->
# per-(hardware, model, dataset, temperature, method) decoding -> aggregation -> figures.
#   snakemake --cores 1 figures/speedup_table.pdf
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/calibrate.smk"
include: "workflow/rules/decode.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"


rule all:
    default_target: True
    input:
        get_final_targets(),
