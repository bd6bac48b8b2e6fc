# Aggregation: per-prompt, per-step and per-cell tables of one hardware key's results: the
# main comparison, and apart from it the budget ablation job's own files (its AR, the
# speedup baseline, its budget rules and fixed budgets), so that the paper's tables never
# wait for the ablation and the ablation's speedups never mix two processes.


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
    log:
        "logs/aggregate_results/{hardware}/{experiment}.log",
    benchmark:
        "logs/benchmarks/aggregate_results/{hardware}/{experiment}.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        code=CODE_REPORT,
    script:
        "../scripts/aggregate_results.py"


rule aggregate_ablation:
    input:
        get_ablation_aggregate_inputs,
    output:
        per_prompt="results/{hardware}/aggregate/{experiment}/ablation/per_prompt.csv",
        cells="results/{hardware}/aggregate/{experiment}/ablation/cells.csv",
        steps="results/{hardware}/aggregate/{experiment}/ablation/steps.csv",
        # a rule whose trees all had one size against the fixed budget of that size
        same_size="results/{hardware}/aggregate/{experiment}/ablation/same_size.csv",
    log:
        "logs/aggregate_ablation/{hardware}/{experiment}.log",
    benchmark:
        "logs/benchmarks/aggregate_ablation/{hardware}/{experiment}.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        code=CODE_REPORT,
    script:
        "../scripts/aggregate_results.py"
