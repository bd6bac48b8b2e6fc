# Decoding: one job per (hardware, model, dataset, temperature, method), optionally sharded.
# Jobs append finished prompts to <output>.partial and resume from it after a kill.


def decode_inputs(wildcards):
    return {
        "data": f"results/datasets/{wildcards.dataset}.jsonl",
        "model": f"results/models/{wildcards.model}.json",
        # every decode job waits for its pair's calibration, which also checked the device
        "calibration": f"results/{wildcards.hardware}/{wildcards.model}/calibration.json",
    }


def decode_params(wildcards):
    """All knobs of a decode job, in one place so the sharded and plain rules agree."""
    method, _, budget = wildcards.method.partition("-b")
    return {
        "method": method,
        "budget": int(budget) if budget else None,
        "temperature": float(wildcards.temperature),
        "max_samples": EXP["datasets"][wildcards.dataset].get("max_samples"),
        "max_new_tokens": EXP["max_new_tokens"],
        "n_min": EXP.get("n_min", 32),
        "n_max": EXP.get("n_max", 8192),
        "topk": EXP.get("topk", 128),
        "block_size": EXP.get("block_size"),
        "device": EXP.get("device", "auto"),
        "dtype": EXP.get("dtype", "auto"),
        "attn_impl": config["attn_impl"],
        "seed": config["seed"],
        "pattern": HW_PATTERN,
    }


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
