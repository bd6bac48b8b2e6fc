"""Measure the step overheads (T_draft, T_other) and write the calibration file."""

from bastion.calibration import stages
from bastion.pipeline import compile_cache
from bastion.pipeline.gpu_slots import pinned
from bastion.pipeline.joblog import job_log

p = snakemake.params
compile_cache.persist(snakemake.wildcards.hardware)  # before anything compiles: later jobs load the kernels
with job_log(snakemake.log[0]), pinned(p.device):
    cal = stages.profile_constants(
        snakemake.output[0], snakemake.wildcards.model, snakemake.input.model, snakemake.input.latency,
        p.device, p.dtype, p.attn_impl, p.engine, p.n_min, p.seed,
    )
    print(f"T_draft {cal.overheads.t_draft * 1e3:.3f} ms, T_other {cal.overheads.t_other * 1e3:.3f} ms")
