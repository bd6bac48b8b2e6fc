"""Measure the step overheads (T_draft, the step excess) and write the calibration file."""

from bastion.pipeline.worker import hand_off

# a GPU job runs in the warm job worker, which exits this process with its status (bastion/pipeline/worker.py)
hand_off(snakemake, __file__, snakemake.params.device)

from bastion.calibration import stages
from bastion.calibration.overheads import describe_baselines, describe_overheads
from bastion.engines.choice import Kernels
from bastion.pipeline import compile_cache
from bastion.pipeline.gpu_slots import pinned
from bastion.pipeline.joblog import job_log

p = snakemake.params
compile_cache.persist(snakemake.wildcards.hardware)  # before anything compiles: later jobs load the kernels
with job_log(snakemake.log[0]), pinned(p.device):
    cal = stages.profile_constants(
        snakemake.output[0], snakemake.wildcards.model, snakemake.input.model, snakemake.input.latency,
        p.device, p.dtype, p.attn_impl, p.engine, p.n_min, p.seed, n_max=p.n_max,
        kernels=Kernels(**p.kernels), threads=snakemake.threads,
    )
    print(f"{describe_overheads(cal.overheads)}; {describe_baselines(cal.baselines)}")
