"""Probe the verification-latency grid and fit the calibrated roofline."""

from bastion.pipeline.worker import hand_off

# a GPU job runs in the warm job worker, which exits this process with its status (bastion/pipeline/worker.py)
hand_off(snakemake, __file__, snakemake.params.device)

import json

from bastion.calibration import stages
from bastion.engines.choice import Kernels
from bastion.pipeline import compile_cache
from bastion.pipeline.gpu_slots import pinned
from bastion.pipeline.joblog import job_log

p = snakemake.params
compile_cache.persist(snakemake.wildcards.hardware)  # before anything compiles: later jobs load the kernels
with job_log(snakemake.log[0]), pinned(p.device):
    result = stages.calibrate_latency(
        snakemake.output[0], snakemake.input.model, snakemake.input.hardware, p.grid, p.device, p.dtype, p.attn_impl, p.engine,
        datasets=list(snakemake.input.datasets), max_new_tokens=p.max_new_tokens,
        temperature=p.temperature, max_heldout_mape=None if p.accept_error else stages.MAX_HELDOUT_MAPE,
        kernels=Kernels(**p.kernels), threads=snakemake.threads,
    )
    print(json.dumps({"cost_model": result["cost_model"], "report": result["report"]}, indent=1))
