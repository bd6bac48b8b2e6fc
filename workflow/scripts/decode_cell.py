"""Decode every method of one cell in one process (models and engine loaded once), each into
its own output as the per-method job would write it; each method resumes from its <output>.partial."""

import json

import torch

from bastion.calibration import hardware
from bastion.pipeline.gpu_slots import pinned
from bastion.pipeline.joblog import job_log
from bastion.runs.cell import decode_cell
from bastion.runs.run import DecodeRun

cell = snakemake.params.knobs  # method -> knobs, AR first
k0 = next(iter(cell.values()))
with job_log(snakemake.log[0]), pinned(k0["device"]):
    torch.set_num_threads(snakemake.threads)
    hardware.check_device(snakemake.wildcards.hardware, k0["pattern"], hardware.resolve_device(k0["device"]))
    models = json.load(open(snakemake.input.model))
    decode_cell([
        DecodeRun(
            model=models["target"], draft_model=models["drafter"], dataset=snakemake.input.data, methods=(k["method"],),
            temperature=k["temperature"], max_new_tokens=k["max_new_tokens"], max_samples=k["max_samples"] or None,
            n_min=k["n_min"], n_max=k["n_max"], topk=k["topk"], budget=k["budget"] or None, block_size=k["block_size"] or None,
            device=k["device"], dtype=k["dtype"], attn_impl=k["attn_impl"], engine=k["engine"], seed=k["seed"],
            data_seed=k["seed"], calibration=snakemake.input.calibration, hardware=snakemake.wildcards.hardware,
            output=k["output"], model_name=snakemake.wildcards.model, dataset_name=snakemake.wildcards.dataset,
            eagle3_model=models.get("eagle3"), history_from=k["history"], **k.get("eagle3_tree", {}),
        )
        for k in cell.values()
    ])
