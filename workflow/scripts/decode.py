"""Decode one cell (or shard) as a DecodeRun, the CLI's own run; resumes from <output>.partial."""

import json

import torch

from bastion.calibration import hardware
from bastion.pipeline.gpu_slots import pinned
from bastion.pipeline.joblog import job_log
from bastion.runs.checks import parse_shard
from bastion.runs.run import DecodeRun

k = snakemake.params.knobs
with job_log(snakemake.log[0]), pinned(k["device"]):
    torch.set_num_threads(snakemake.threads)
    hardware.check_device(snakemake.wildcards.hardware, k["pattern"], hardware.resolve_device(k["device"]))
    models = json.load(open(snakemake.input.model))
    DecodeRun(
        model=models["target"], draft_model=models["drafter"], dataset=snakemake.input.data, methods=(k["method"],),
        temperature=k["temperature"], max_new_tokens=k["max_new_tokens"], max_samples=k["max_samples"] or None,
        n_min=k["n_min"], n_max=k["n_max"], topk=k["topk"], budget=k["budget"] or None, block_size=k["block_size"] or None,
        device=k["device"], dtype=k["dtype"], attn_impl=k["attn_impl"], engine=k["engine"], seed=k["seed"],
        data_seed=k["seed"], calibration=snakemake.input.calibration, hardware=snakemake.wildcards.hardware,
        output=snakemake.output[0], model_name=snakemake.wildcards.model, dataset_name=snakemake.wildcards.dataset,
        shard=parse_shard(snakemake.params.shard or None), eagle3_model=models.get("eagle3"),
        history_from=snakemake.input.get("history"), **k.get("eagle3_tree", {}),
    ).execute()
