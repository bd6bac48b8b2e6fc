# Decoding: one job per (hardware, model, dataset, temperature, method), optionally sharded;
# with `decode_jobs: cell` one job per (hardware, model, dataset, temperature) that decodes
# every method in one process (models and engine loaded once) into the same files; with
# `decode_jobs: model` one job per (hardware, model, temperature) for every dataset too.
# In those two modes the budget ablation's fixed-budget runs are a job of their own
# (`decode_cell_ablation`, `decode_model_ablation`), so the speedup table never waits
# for them.  Jobs append finished prompts to <output>.partial and resume from it after a kill.


SHARDS = int(config["shards"])

if DECODE_JOBS == "model":

    rule decode_model:
        input:
            unpack(model_inputs),
        output:
            expand(
                "results/{{hardware}}/{{model}}/{dataset}/t{{temperature}}/{method}.jsonl",
                dataset=DATASETS,
                method=MAIN_METHODS,
            ),
        params:
            knobs=decode_model_params,
            software=SOFTWARE,
            code=CODE_DECODE,
        threads: 1
        resources:
            **gpu_resources(),
        log:
            "logs/decode_model/{hardware}/{model}/t{temperature}.log",
        benchmark:
            "logs/benchmarks/decode_model/{hardware}/{model}/t{temperature}.tsv"
        conda:
            "../../envs/bastion.yaml"
        script:
            "../scripts/decode_cell.py"

    if ABLATION_METHODS:

        rule decode_model_ablation:
            input:
                unpack(ablation_model_inputs),
            output:
                expand(
                    "results/{{hardware}}/{{model}}/{dataset}/t{{temperature}}/{method}.jsonl",
                    dataset=DATASETS,
                    method=ABLATION_METHODS,
                ),
            params:
                knobs=ablation_model_params,
                software=SOFTWARE,
                code=CODE_DECODE,
            threads: 1
            resources:
                **gpu_resources(),
            log:
                "logs/decode_model_ablation/{hardware}/{model}/t{temperature}.log",
            benchmark:
                "logs/benchmarks/decode_model_ablation/{hardware}/{model}/t{temperature}.tsv"
            conda:
                "../../envs/bastion.yaml"
            script:
                "../scripts/decode_cell.py"

elif DECODE_JOBS == "cell":

    rule decode_cell:
        input:
            unpack(cell_inputs),
        output:
            expand(
                "results/{{hardware}}/{{model}}/{{dataset}}/t{{temperature}}/{method}.jsonl",
                method=MAIN_METHODS,
            ),
        params:
            knobs=decode_cell_params,
            software=SOFTWARE,
            code=CODE_DECODE,
        threads: 1
        resources:
            **gpu_resources(),
        log:
            "logs/decode_cell/{hardware}/{model}/{dataset}/t{temperature}.log",
        benchmark:
            "logs/benchmarks/decode_cell/{hardware}/{model}/{dataset}/t{temperature}.tsv"
        conda:
            "../../envs/bastion.yaml"
        script:
            "../scripts/decode_cell.py"

    if ABLATION_METHODS:

        rule decode_cell_ablation:
            input:
                unpack(ablation_cell_inputs),
            output:
                expand(
                    "results/{{hardware}}/{{model}}/{{dataset}}/t{{temperature}}/{method}.jsonl",
                    method=ABLATION_METHODS,
                ),
            params:
                knobs=ablation_cell_params,
                software=SOFTWARE,
                code=CODE_DECODE,
            threads: 1
            resources:
                **gpu_resources(),
            log:
                "logs/decode_cell_ablation/{hardware}/{model}/{dataset}/t{temperature}.log",
            benchmark:
                "logs/benchmarks/decode_cell_ablation/{hardware}/{model}/{dataset}/t{temperature}.tsv"
            conda:
                "../../envs/bastion.yaml"
            script:
                "../scripts/decode_cell.py"

elif SHARDS == 1:

    rule decode:
        input:
            unpack(decode_inputs),
        output:
            "results/{hardware}/{model}/{dataset}/t{temperature}/{method}.jsonl",
        params:
            knobs=decode_params,
            shard=None,
            software=SOFTWARE,
            code=CODE_DECODE,
        threads: 1
        resources:
            **gpu_resources(),
        log:
            "logs/decode/{hardware}/{model}/{dataset}/t{temperature}/{method}.log",
        benchmark:
            "logs/benchmarks/decode/{hardware}/{model}/{dataset}/t{temperature}/{method}.tsv"
        conda:
            "../../envs/bastion.yaml"
        script:
            "../scripts/decode.py"

else:

    rule decode_shard:
        input:
            unpack(decode_inputs),
        output:
            "results/{hardware}/{model}/{dataset}/t{temperature}/shards/{method}.{shard}.jsonl",
        params:
            knobs=decode_params,
            shard=lambda wildcards: f"{wildcards.shard}/{SHARDS}",
            software=SOFTWARE,
            code=CODE_DECODE,
        threads: 1
        resources:
            **gpu_resources(),
        log:
            "logs/decode/{hardware}/{model}/{dataset}/t{temperature}/{method}.{shard}.log",
        benchmark:
            "logs/benchmarks/decode/{hardware}/{model}/{dataset}/t{temperature}/{method}.{shard}.tsv"
        conda:
            "../../envs/bastion.yaml"
        script:
            "../scripts/decode.py"

    rule merge_shards:
        input:
            expand(
                "results/{{hardware}}/{{model}}/{{dataset}}/t{{temperature}}/shards/{{method}}.{shard}.jsonl",
                shard=range(SHARDS),
            ),
        output:
            "results/{hardware}/{model}/{dataset}/t{temperature}/{method}.jsonl",
        log:
            "logs/merge_shards/{hardware}/{model}/{dataset}/t{temperature}/{method}.log",
        benchmark:
            "logs/benchmarks/merge_shards/{hardware}/{model}/{dataset}/t{temperature}/{method}.tsv"
        conda:
            "../../envs/bastion.yaml"
        script:
            "../scripts/merge_shards.py"
