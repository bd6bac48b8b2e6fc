"""Check the device against the hardware key, fingerprint it and measure its ceilings."""

from bastion.pipeline.worker import hand_off

# a GPU job runs in the warm job worker, which exits this process with its status (bastion/pipeline/worker.py)
hand_off(snakemake, __file__, snakemake.params.device)

import json

from bastion.calibration import stages
from bastion.engines.choice import Kernels
from bastion.pipeline.gpu_slots import pinned
from bastion.pipeline.joblog import job_log

p = snakemake.params
with job_log(snakemake.log[0]), pinned(p.device):
    result = stages.measure_hardware(
        snakemake.output[0], snakemake.wildcards.hardware, p.pattern, p.device, p.dtype, p.attn_impl, p.engine,
        kernels=Kernels(**p.kernels), threads=snakemake.threads,
    )
    print(json.dumps(result, indent=1))
