# Decoding: one job per (hardware, model, dataset, temperature, method), optionally sharded.
# Jobs append finished prompts to <output>.partial and resume from it after a kill.


SHARDS = int(config["shards"])

if SHARDS == 1:

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
