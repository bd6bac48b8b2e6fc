# Model weights: resolve (and on the first run download) each target/drafter pair once,
# with its EAGLE-3 head when the experiment runs eagle3.


rule fetch_model:
    output:
        "results/models/{model}.json",
    log:
        "logs/fetch_model/{model}.log",
    benchmark:
        "logs/benchmarks/fetch_model/{model}.tsv"
    conda:
        "../../envs/bastion.yaml"
    params:
        spec=get_model_spec,
        eagle3="eagle3" in METHODS,
    script:
        "../scripts/fetch_model.py"
