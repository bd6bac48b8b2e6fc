# Decode jobs: one job per (hardware, model, dataset, temperature, method), optionally sharded;
# with `decode_jobs: cell` one job per (hardware, model, dataset, temperature) that decodes
# every method in one process (models and engine loaded once) into the same files; with
# `decode_jobs: model` one job per (hardware, model, temperature) for every dataset too.
# The budget ablation is a job of its own in every mode (`decode_model_ablation` per
# (hardware, model, temperature) with `decode_jobs: model`, else `decode_cell_ablation` per
# cell), so the speedup table never waits for it: AR, the budget rules and the fixed budgets,
# prompt by prompt in turn, into <cell>/ablation/<method>.jsonl.  Jobs append finished
# prompts to <output>.partial and resume from it after a kill.  Every job computes with
# `cpu_threads` CPU threads (scaled down to --cores, as the calibration jobs are).
# The rules of one script differ only in name, scope, inputs, outputs and params:
# get_cell_rules() and get_method_rules() (common.smk) list them, and one block per script
# makes each.  (Snakemake evaluates a `script:` path again when the job runs, after a
# loop has moved on, so the path is written out in each block.)


for job in get_cell_rules():

    rule:
        name:
            job["name"]
        input:
            unpack(job["inputs"]),
        output:
            job["outputs"],
        log:
            job["log"],
        benchmark:
            job["benchmark"]
        wildcard_constraints:
            temperature=job["temperature"],
        conda:
            "../../envs/bastion.yaml"
        threads: CPU_THREADS
        resources:
            **gpu_resources(),
        params:
            **job["params"],
        script:
            "../scripts/decode_cell.py"


for job in get_method_rules():

    rule:
        name:
            job["name"]
        input:
            unpack(job["inputs"]),
        output:
            job["outputs"],
        log:
            job["log"],
        benchmark:
            job["benchmark"]
        wildcard_constraints:
            temperature=job["temperature"],
        conda:
            "../../envs/bastion.yaml"
        threads: CPU_THREADS
        resources:
            **gpu_resources(),
        params:
            **job["params"],
        script:
            "../scripts/decode.py"


if DECODE_JOBS == "method" and SHARDS > 1:

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
