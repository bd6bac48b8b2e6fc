"""Choose EAGLE-3's tree for one (hardware, model, head): a short sweep on the first prompts of a
dataset, written where the pair's EAGLE-3 decode jobs read it (``eagle3_tree: auto``)."""

from bastion.pipeline.worker import hand_off

# a GPU job runs in the warm job worker, which exits this process with its status (bastion/pipeline/worker.py)
hand_off(snakemake, __file__, snakemake.params.knobs["device"])

import json

from bastion.runs.device_job import device_job
from bastion.runs.run import run_from_knobs

k = snakemake.params.knobs
with device_job(snakemake.log[0], snakemake.wildcards.hardware, k["pattern"], k["device"]):
    models = json.load(open(snakemake.input.model))
    run = run_from_knobs(k, models, snakemake.input.data, None, snakemake.wildcards.hardware,
                         snakemake.wildcards.model, snakemake.params.dataset, None, threads=snakemake.threads)
    run.choose_eagle3_tree(snakemake.output[0])
