# Tables and figures of the current experiment on the current hardware key.

AGG = aggregate_dir()
TITLE = {"hardware": HW, "experiment": EXPERIMENT, "models": MODELS}


rule make_speedup_table:
    input:
        cells=f"{AGG}/cells.csv",
    output:
        pdf=report(
            "figures/speedup_table.pdf",
            caption="../report/speedup_table.rst",
            category="Figures",
        ),
        tex="figures/speedup_table.tex",
        csv="figures/speedup_table.csv",
        md="figures/speedup_table.md",
    log:
        "logs/make_speedup_table.log",
    benchmark:
        "logs/benchmarks/make_speedup_table.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        title=TITLE,
        code=CODE_REPORT,
        methods=MAIN_METHODS,
    script:
        "../scripts/make_speedup_table.py"


rule plot_speedup_bars:
    input:
        cells=f"{AGG}/cells.csv",
    output:
        report(
            "figures/speedup_bars.pdf",
            caption="../report/speedup_bars.rst",
            category="Figures",
        ),
    log:
        "logs/plot_speedup_bars.log",
    benchmark:
        "logs/benchmarks/plot_speedup_bars.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        title=TITLE,
        code=CODE_REPORT,
        methods=MAIN_METHODS,
    script:
        "../scripts/plot_speedup_bars.py"


rule plot_acceptance_length:
    input:
        steps=f"{AGG}/steps.csv",
    output:
        report(
            "figures/acceptance_length.pdf",
            caption="../report/acceptance_length.rst",
            category="Figures",
        ),
    log:
        "logs/plot_acceptance_length.log",
    benchmark:
        "logs/benchmarks/plot_acceptance_length.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        title=TITLE,
        code=CODE_REPORT,
    script:
        "../scripts/plot_acceptance_length.py"


rule plot_acceptance_by_position:
    input:
        steps=f"{AGG}/steps.csv",
    output:
        report(
            "figures/acceptance_by_position.pdf",
            caption="../report/acceptance_by_position.rst",
            category="Figures",
        ),
    log:
        "logs/plot_acceptance_by_position.log",
    benchmark:
        "logs/benchmarks/plot_acceptance_by_position.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        title=TITLE,
        code=CODE_REPORT,
    script:
        "../scripts/plot_acceptance_by_position.py"


rule plot_tree_budget:
    input:
        steps=f"{AGG}/steps.csv",
    output:
        report(
            "figures/tree_budget.pdf",
            caption="../report/tree_budget.rst",
            category="Figures",
        ),
    log:
        "logs/plot_tree_budget.log",
    benchmark:
        "logs/benchmarks/plot_tree_budget.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        title=TITLE,
        code=CODE_REPORT,
    script:
        "../scripts/plot_tree_budget.py"


rule plot_budget_ablation:
    input:
        cells=f"{AGG}/ablation/cells.csv",  # the ablation job's AR, budget rules and fixed budgets only
        same_size=f"{AGG}/ablation/same_size.csv",
    output:
        report(
            "figures/budget_ablation.pdf",
            caption="../report/budget_ablation.rst",
            category="Figures",
        ),
    log:
        "logs/plot_budget_ablation.log",
    benchmark:
        "logs/benchmarks/plot_budget_ablation.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        title=TITLE,
        code=CODE_REPORT,
    script:
        "../scripts/plot_budget_ablation.py"


rule plot_cost_model_fit:
    input:
        grids=expand(
            "results/{hardware}/{model}/latency_grid.json", hardware=HW, model=MODELS
        ),
    output:
        report(
            "figures/cost_model_fit.pdf",
            caption="../report/cost_model_fit.rst",
            category="Figures",
        ),
    log:
        "logs/plot_cost_model_fit.log",
    benchmark:
        "logs/benchmarks/plot_cost_model_fit.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        title=TITLE,
        code=CODE_REPORT,
        models=MODELS,
    script:
        "../scripts/plot_cost_model_fit.py"


rule plot_hardware_comparison:
    input:
        cells=other_hardware_cells(),
    output:
        report(
            "figures/hardware_comparison.pdf",
            caption="../report/hardware_comparison.rst",
            category="Figures",
        ),
    log:
        "logs/plot_hardware_comparison.log",
    benchmark:
        "logs/benchmarks/plot_hardware_comparison.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        title=TITLE,
        code=CODE_REPORT,
    script:
        "../scripts/plot_hardware_comparison.py"


if config.get("local_cpu_rules", True):

    localrules:
        prepare_dataset,
        fetch_model,
        aggregate_results,
        aggregate_ablation,
        make_speedup_table,
        plot_speedup_bars,
        plot_acceptance_length,
        plot_tree_budget,
        plot_budget_ablation,
        plot_cost_model_fit,
        plot_hardware_comparison,
