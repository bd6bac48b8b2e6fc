"""Decode one cell (or shard) with the benchmark harness; resumes from <output>.partial."""

import json

import torch

from bastion import benchmark
from bastion.calibration import hardware
from bastion.pipeline.gpu_slots import pinned
from bastion.pipeline.joblog import job_log

k = snakemake.params.knobs
with job_log(snakemake.log[0]), pinned(k["device"]):
    torch.set_num_threads(snakemake.threads)
    hardware.check_device(snakemake.wildcards.hardware, k["pattern"], hardware.resolve_device(k["device"]))
    models = json.load(open(snakemake.input.model))
    argv = [
        "--model", models["target"], "--draft-model", models["drafter"], "--dataset", snakemake.input.data,
        "--methods", k["method"], "--temperature", str(k["temperature"]), "--max-new-tokens", str(k["max_new_tokens"]),
        "--n-min", str(k["n_min"]), "--n-max", str(k["n_max"]), "--topk", str(k["topk"]),
        "--device", k["device"], "--dtype", k["dtype"], "--attn-impl", k["attn_impl"], "--engine", k["engine"], "--seed", str(k["seed"]),
        "--data-seed", str(k["seed"]), "--calibration", snakemake.input.calibration,
        "--hardware", snakemake.wildcards.hardware, "--output", snakemake.output[0], "--model-name", snakemake.wildcards.model,
        "--dataset-name", snakemake.wildcards.dataset,
    ]
    argv += ["--max-samples", str(k["max_samples"])] if k["max_samples"] else []
    argv += ["--budget", str(k["budget"])] if k["budget"] else []
    argv += ["--block-size", str(k["block_size"])] if k["block_size"] else []
    argv += ["--shard", snakemake.params.shard] if snakemake.params.shard else []
    benchmark.run(benchmark.build_parser().parse_args(argv))
