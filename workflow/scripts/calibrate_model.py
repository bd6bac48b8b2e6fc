"""A small model's whole calibration chain in one job: hardware, latency grid(s) and overheads."""

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
out = snakemake.output
compile_cache.persist(snakemake.wildcards.hardware)  # before anything compiles: later jobs load the kernels
with job_log(snakemake.log[0]), pinned(p.device):
    calibrations = stages.calibrate_all(
        out.hardware, list(zip(out.latency, out.calibration, p.temperatures)), snakemake.wildcards.hardware, p.pattern,
        snakemake.wildcards.model, snakemake.input.model, p.grid, p.device, p.dtype, p.attn_impl, p.engine, p.n_min, p.seed,
        datasets=list(snakemake.input.datasets), max_new_tokens=p.max_new_tokens,
        max_heldout_mape=None if p.accept_error else stages.MAX_HELDOUT_MAPE, n_max=p.n_max,
        kernels=Kernels(**p.kernels), threads=snakemake.threads,
    )
    for cal in calibrations:
        print(f"T={cal.temperature:g}: held-out error {cal.report.get('heldout_mape', float('nan')):.3f}, "
              f"{describe_overheads(cal.overheads)}; {describe_baselines(cal.baselines)}")
