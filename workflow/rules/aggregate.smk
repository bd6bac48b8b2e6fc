# Aggregation: per-prompt, per-step and per-cell tables of one hardware key's results.


rule aggregate_results:
    input:
        lambda wildcards: all_decode_outputs(wildcards.hardware),
    output:
        per_prompt=report(
            "results/{hardware}/aggregate/{experiment}/per_prompt.csv",
            caption="../report/per_prompt.rst",
            category="Tables",
        ),
        cells=report(
            "results/{hardware}/aggregate/{experiment}/cells.csv",
            caption="../report/cells.rst",
            category="Tables",
        ),
        steps="results/{hardware}/aggregate/{experiment}/steps.csv",
    params:
        code=CODE_REPORT,
    log:
        "logs/aggregate_results/{hardware}/{experiment}.log",
    benchmark:
        "logs/benchmarks/aggregate_results/{hardware}/{experiment}.tsv"
    conda:
        "../../envs/bastion.yaml"
    script:
        "../scripts/aggregate_results.py"
