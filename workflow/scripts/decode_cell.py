"""Decode every method of one cell (or, for `decode_jobs: model`, of every dataset) in one process,
models and engine loaded once, each into its own output as the per-method job would write it;
each run resumes from its <output>.partial.  The budget ablation's jobs run this too, with
their own AR, budget rules and fixed budgets."""

from bastion.pipeline.worker import hand_off

# a GPU job runs in the warm job worker, which exits this process with its status (bastion/pipeline/worker.py)
hand_off(snakemake, __file__, next(iter(snakemake.params.knobs.values()))["device"])

import json

from bastion.runs.device_job import device_job
from bastion.runs.cell import decode_cell
from bastion.runs.run import run_from_knobs

cell = snakemake.params.knobs  # run name -> knobs with dataset, data and output; AR first in each dataset
k0 = next(iter(cell.values()))
with device_job(snakemake.log[0], snakemake.wildcards.hardware, k0["pattern"], k0["device"]):
    models = json.load(open(snakemake.input.model))
    decode_cell([
        run_from_knobs(
            k, models, k["data"], snakemake.input.calibration, snakemake.wildcards.hardware,
            snakemake.wildcards.model, k["dataset"], k["output"], history=k["history"], threads=snakemake.threads,
            eagle3_tree_file=snakemake.input.get("eagle3_tree"),
        )
        for k in cell.values()
    ])
