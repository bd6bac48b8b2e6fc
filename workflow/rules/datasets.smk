# Datasets: one job per dataset, hardware-independent, shared by every experiment.


rule prepare_dataset:
    output:
        "results/datasets/{dataset}.jsonl",
    log:
        "logs/prepare_dataset/{dataset}.log",
    benchmark:
        "logs/benchmarks/prepare_dataset/{dataset}.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        code=CODE_DATA,
        cache_dir="cache",
    script:
        "../scripts/prepare_dataset.py"
