"""Validation, the experiment's cells, and input functions shared by all rules.

Everything a job depends on reaches it through `input:` or `params:` so that Snakemake's
rerun triggers see it: the sample counts, the decoding knobs, a fingerprint of the
software stack (torch, transformers, dtype, attention backend, engine, kernels, device,
and on a CPU the threads) and a hash of the library sources each rule runs.  Nothing
here touches the network.
"""

import glob
import hashlib
import math
import os
import re
import sys
from dataclasses import asdict
from pathlib import Path

from snakemake.utils import validate

import bastion.data.registry as bds
from bastion.calibration import fingerprint, planning
from bastion.engines.choice import Kernels
from bastion.defaults import (
    ABLATION_PREFIX,
    BASELINE,
    MULTI_TURN_DATASETS,
    N_MAX,
    N_MIN,
    TOPK,
    ablation_method,
    temperature_dir,
)
from bastion.defaults import resolve_n_min
from bastion.defaults import METHODS as ALL_METHODS

REPO = Path(workflow.basedir).resolve()
# Jobs (local, conda or cluster) import the libraries from this checkout.
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
)


class ConfigError(ValueError):
    """A configuration value that the schema cannot check."""


def _stop(problem):
    """End planning with one line naming the key and value: Snakemake's own report of a bad
    config prints the whole schema, and of an error raised here, a traceback."""
    print(f"error: {problem}", file=sys.stderr)
    sys.exit(1)


def _schema_problem():
    """The schema's verdict on the config in one line (None: valid), before Snakemake's `validate`."""
    import jsonschema
    import yaml

    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(config)
    )
    if error is None:
        return None
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":  # name the unknown key itself
        known = error.schema.get("properties", {})
        path.append(min(set(error.instance) - set(known)))
        return f"unknown config key {_key(path)} (keys there: {', '.join(known)}); fix its spelling or remove it"
    value = repr(error.instance)
    value = value if len(value) <= 80 else value[:77] + "..."
    return f"config key {_key(path)} = {value}: {error.message}; fix it in config.yaml (or the --config that sets it)"


def _key(path):
    """A config key as `experiments['tiny']['n_min']`: unambiguous for keys with dots (llama3.1-8b)."""
    return f"`{path[0]}{''.join(f'[{k!r}]' for k in path[1:])}`" if path else "`config`"


_PROBLEM = _schema_problem()
if _PROBLEM:
    _stop(_PROBLEM)
validate(config, "../schemas/config.schema.yaml")  # fills in the schema's defaults


def _check_config():
    exps = config["experiments"]
    if config["experiment"] not in exps:
        raise ConfigError(
            f"config key `experiment`: unknown experiment {config['experiment']!r}; "
            f"defined experiments: {', '.join(exps)}"
        )
    exp = exps[config["experiment"]]
    where = f"experiments.{config['experiment']}"
    for m in exp["models"]:
        if m not in config["models"]:
            raise ConfigError(
                f"config key `{where}.models`: unknown model {m!r}; defined models: {', '.join(config['models'])}"
            )
    for d in exp["datasets"]:
        try:
            canonical = bds.canonical_name(d)
        except bds.UnknownDatasetError as exc:
            raise ConfigError(f"config key `{where}.datasets.{d}`: {exc}") from None
        if canonical != d or d in bds.GROUPS:
            raise ConfigError(
                f"config key `{where}.datasets.{d}`: use the canonical dataset names "
                f"({', '.join(bds.expand(d))}), one entry each, so every dataset has its own jobs"
            )
    _check_values(exp, where)
    _check_model_folders(exp)
    jobs = exp.get("decode_jobs", "method")
    if jobs != "method" and int(config["shards"]) > 1:
        raise ConfigError(
            f"config keys `{where}.decode_jobs: {jobs}` and `shards: {config['shards']}` do not combine (a {jobs} job "
            "decodes all its methods in one process, unsplit); set `shards: 1` or `decode_jobs: method`"
        )
    return exp


def _check_values(exp, where):
    """What the schema cannot say: NaN and infinite temperatures, device patterns that are no
    regular expression, and a hardware key that no job could run under."""
    bad = [t for t in exp["temperatures"] if not math.isfinite(t)]
    if bad:
        raise ConfigError(
            f"config key `{where}.temperatures`: {bad[0]} is not a finite temperature; use numbers >= 0"
        )
    _check_eagle3_tree(exp, where)
    keys = config.get("hardware_keys", {})
    for key, spec in keys.items():
        try:
            re.compile(spec["device_pattern"])
        except re.error as exc:
            raise ConfigError(
                f"config key `hardware_keys.{key}.device_pattern`: {spec['device_pattern']!r} is not a "
                f"regular expression ({exc}); give a pattern of the device's name, e.g. H200"
            ) from None
    hw = config["hardware"]
    detectable = re.fullmatch(
        r"(cpu|nvidia|tesla|quadro|geforce|amd|radeon)[a-z0-9-]*", hw
    )
    if (
        hw != "auto"
        and hw not in keys
        and not detectable
        and not Path("results", hw).is_dir()
    ):
        raise ConfigError(
            f"config key `hardware`: {hw!r} is neither under `hardware_keys` nor a detected device's key (those look "
            f"like nvidia-h200 or cpu-amd-epyc), so no job could run under it; map it under hardware_keys "
            f"({hw}: {{device_pattern: <part of the device name>}}) or set hardware=auto"
        )


def _check_eagle3_tree(exp, where):
    """An explicit EAGLE-3 tree that can be built and keeps every round (`auto` is chosen later)."""
    from bastion.runs.checks import UsageError, check_eagle3_tree

    try:
        check_eagle3_tree(
            str(exp.get("eagle3_tree", "auto")),
            flag=f"config key `{where}.eagle3_tree`:",
        )
    except UsageError as exc:
        raise ConfigError(str(exc)) from None


def _check_model_folders(exp):
    """A model of the experiment given as a local folder must hold a model of its role."""
    from bastion.runs import folders

    for name in exp["models"]:
        for role, ref in config["models"][name].items():
            if not folders.looks_like_path(ref):
                continue  # a registry key or a repo id: the fetch_model job resolves it
            try:
                if not Path(ref).expanduser().is_dir():
                    raise folders.FolderError(
                        "no such folder", "give the folder that holds the model"
                    )
                folders.check_folder(Path(ref).expanduser(), role)
            except folders.FolderError as exc:
                raise ConfigError(
                    f"config key `models.{name}.{role}`: {ref}: {exc}; {exc.fix}"
                ) from None


try:
    EXP = _check_config()
except ConfigError as exc:
    _stop(exc)
EXPERIMENT = config["experiment"]
# `method`: one decode job per (hardware, model, dataset, temperature, method); `cell`: one
# per (hardware, model, dataset, temperature) that decodes all its methods in one process;
# `model`: one per (hardware, model, temperature), every dataset and method in one process
DECODE_JOBS = EXP.get("decode_jobs", "method")
# per-method decode jobs split into this many shards each (`decode_jobs: method` only)
SHARDS = int(config["shards"])
# `chain`: measure_hardware, calibrate_latency and profile_constants as three jobs;
# `one`: calibrate_model runs them in one process (small models, where start-up dominates)
CALIBRATION_JOBS = EXP.get("calibration_jobs", "chain")


# torch's build, read without importing torch: a build without CUDA and ROCm runs on the
# CPU for certain, and then the hardware key and fingerprint need no torch (seconds saved)
TORCH_BUILD = planning.torch_build()
CPU_ONLY = TORCH_BUILD is not None and TORCH_BUILD.cpu_only


# a CUDA build with every visible GPU one model: nvidia-smi names it, and planning needs no torch either
GPU_NAME = None if CPU_ONLY else planning.gpu_name(TORCH_BUILD)


def _detect_hardware():
    if config["hardware"] != "auto":
        return config["hardware"]
    if CPU_ONLY:
        return planning.cpu_key()
    if GPU_NAME:
        return planning.gpu_key(GPU_NAME)
    from bastion.calibration.hardware import detect_key

    # a GPU experiment planned on a machine without one (a login node) keys by this machine
    return detect_key()


HW = _detect_hardware()
HW_PATTERN = config.get("hardware_keys", {}).get(HW, {}).get("device_pattern")
GPU_MODEL = config.get("hardware_keys", {}).get(HW, {}).get("slurm_gpu_model")


def _decodes_on_gpu():
    """Whether this run's jobs decode on a GPU, as far as planning can tell.

    `device` says so when set; else the hardware key: every CPU's detected key starts with
    `cpu` (name a CPU key of `hardware_keys` so too), every other key is a GPU's.
    """
    device = EXP.get("device", "auto")
    if device != "auto":
        return device == "cuda"
    return not HW.startswith("cpu")


# the tree's minimum and bucket width, with `auto` sized for the device
N_MIN_EXP = resolve_n_min(EXP.get("n_min", N_MIN), _decodes_on_gpu())
if N_MIN_EXP > EXP.get("n_max", N_MAX):
    _auto = (
        f" (`auto` on a {'GPU' if _decodes_on_gpu() else 'CPU'})"
        if EXP.get("n_min") == "auto"
        else ""
    )
    _stop(
        f"config keys `experiments.{EXPERIMENT}.n_min`/`n_max`: n_min {N_MIN_EXP}{_auto} > n_max {EXP['n_max']}; "
        "raise n_max or lower n_min"
    )


def _threads_used():
    """The CPU threads every calibration and decode job computes with: `cpu_threads`, as
    Snakemake scales a rule's `threads:` down to `--cores` (and `--max-threads`), so that
    the fingerprint says what ran and calibration and decoding agree.  A dry run without
    `--cores` plans with 1, as Snakemake does."""
    settings = workflow.resource_settings  # None: no bound (--cores on a cluster)
    limits = [config["cpu_threads"], settings.cores, settings.max_threads]
    return min(n for n in limits if n is not None)


CPU_THREADS = config["cpu_threads"]  # each job's `threads:`
THREADS = _threads_used()


def _kernels():
    """The `kernels:` settings with the BASTION_* variables that are set in their place."""
    try:
        return Kernels(**config["kernels"]).overridden(os.environ)
    except ValueError as exc:
        _stop(exc)


KERNELS = _kernels()


def _software_fingerprint():
    """This stack's fingerprint; its compared fields rerun calibration and decoding when they change."""
    fp = None
    if TORCH_BUILD is not None and (CPU_ONLY or EXP.get("device", "auto") == "cpu"):
        # the CPU's fingerprint needs only torch's version string
        fp = planning.cpu_fingerprint(
            TORCH_BUILD,
            EXP.get("dtype", "auto"),
            config["attn_impl"],
            config["engine"],
            KERNELS,
            THREADS,
        )
    elif GPU_NAME:
        fp = planning.gpu_fingerprint(
            TORCH_BUILD,
            GPU_NAME,
            EXP.get("dtype", "auto"),
            config["attn_impl"],
            config["engine"],
            KERNELS,
            THREADS,
        )
    return fp or {**_torch_fingerprint(), "threads": THREADS}


def _torch_fingerprint():
    import torch

    # engine names only: engines.factory would load the models' code and Transformers (seconds)
    from bastion.engines.choice import resolve_engine

    want_cuda = EXP.get("device", "auto") != "cpu" and torch.cuda.is_available()
    device = torch.device("cuda" if want_cuda else "cpu")
    dtype = {"auto": torch.bfloat16 if want_cuda else torch.float32}.get(
        EXP.get("dtype", "auto")
    )
    dtype = dtype or getattr(torch, EXP["dtype"])
    return fingerprint.collect(
        device,
        dtype,
        config["attn_impl"],
        resolve_engine(config["engine"], device),
        KERNELS,
    )


FINGERPRINT = _software_fingerprint()
SOFTWARE = ";".join(f"{k}={FINGERPRINT[k]}" for k in fingerprint.compared(FINGERPRINT))
# the kernel settings the jobs get: those that do not act on this device and engine at their
# defaults, so that a change of a GPU-only choice reruns no CPU job (the fingerprint says n/a)
KERNEL_KNOBS = asdict(
    KERNELS.effective(
        FINGERPRINT["device_type"], FINGERPRINT["engine"], FINGERPRINT["dtype"]
    )
)


def code_hash(folders, exclude=()):
    """Hash of every file under the given source folders (skipping ``exclude``): editing
    them reruns the jobs that run them.

    Whole subpackage folders, never lists of module names, so a module that moves or
    appears inside a folder is covered without touching this file.  (Snakemake's own
    code trigger only watches the rule's script, not the libraries.)
    """
    skip = [REPO / e for e in exclude]
    h = hashlib.sha256()
    for folder in folders:
        root = REPO / folder
        for path in sorted(root.rglob("*") if root.is_dir() else [root]):
            if (
                not path.is_file()
                or "__pycache__" in path.parts
                or any(path.is_relative_to(e) for e in skip)
            ):
                continue
            h.update(path.relative_to(REPO).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


# Which code each stage runs, by layer (docs/architecture.md): the dataset jobs run the
# data layer, the aggregation and figure jobs the results and report layers, and the
# calibration and decode jobs everything else (a new subpackage lands there by default).
SHARED = ["bastion/__init__.py", "bastion/defaults.py"]
CODE_DATA = code_hash(["bastion/data", *SHARED])
CODE_REPORT = code_hash(
    ["bastion/report", "bastion/results", "bastion/pipeline", *SHARED]
)
CODE_DECODE = code_hash(
    ["bastion", "dflash"], exclude=["bastion/data", "bastion/report"]
)


TEMPS = [temperature_dir(t) for t in EXP["temperatures"]]
DATASETS = list(EXP["datasets"])
MODELS = list(EXP["models"])
ABLATION = list(EXP.get("budget_ablation", []))
# The paper's comparison (AR first) and the fixed-budget runs of the budget ablation.  They
# are decoded and aggregated apart, so that the speedup table never waits for the ablation.
MAIN_METHODS = [BASELINE] + [m for m in EXP["methods"] if m != BASELINE]
ABLATION_METHODS = [ablation_method(b) for b in ABLATION]
METHODS = MAIN_METHODS + ABLATION_METHODS
# The release's lossy acceptance (bastion_lossy) differs from its lossless twin only at
# T > 0, so it is decoded at T > 0 only.
LOSSY_METHODS = [m for m in MAIN_METHODS if "lossy" in m]
# EAGLE-3's tree: `auto` is chosen once per (hardware, model, head) by choose_eagle3_tree,
# whose file the jobs that decode (or load the head for) EAGLE-3 read
EAGLE3_TREE = str(EXP.get("eagle3_tree", "auto"))
EAGLE3_AUTO = "eagle3" in MAIN_METHODS and EAGLE3_TREE == "auto"
EAGLE3_TREE_FILE = "results/{hardware}/{model}/eagle3_tree.json"
# The budget rules among the experiment's methods: every method named bastion* sizes its
# trees by a rule (the fixed budgets are bastion-b<N>, which are no experiment method); the
# ablation compares trees, not acceptance, so it leaves the lossy acceptance out.
ADAPTIVE_METHODS = [
    m for m in MAIN_METHODS if m.startswith("bastion") and m not in LOSSY_METHODS
]


def methods_at(temperature):
    """The main comparison's methods at one temperature (a result path's or the config's)."""
    greedy = float(temperature) == 0
    return [m for m in MAIN_METHODS if not (greedy and m in LOSSY_METHODS)]


# The temperature classes whose decode jobs hold different methods: a regular expression
# of the {temperature} wildcard each, and the suffix of its rules' names.  One class (no
# suffix) unless the lossy acceptance splits greedy from sampled temperatures.
GREEDY_TEMPERATURE = r"0"
SAMPLED_TEMPERATURE = r"[0-9]+\.[0-9]+|[1-9][0-9]*"
TEMPERATURE_CLASSES = (
    [("", GREEDY_TEMPERATURE, "0"), ("_sampled", SAMPLED_TEMPERATURE, "1")]
    if LOSSY_METHODS and "0" in TEMPS and any(t != "0" for t in TEMPS)
    else [("", r"[0-9]+(\.[0-9]+)?", TEMPS[0])]
)
# The ablation job's own runs: AR (the speedup baseline, and the history of multi-turn
# sets), the budget rules and the fixed budgets, decoded in turn prompt by prompt in one
# process into files of their own, so that a drift of the machine's speed touches every
# point of figures/budget_ablation.pdf alike.
ABLATION_RUNS = [BASELINE, *ADAPTIVE_METHODS, *ABLATION_METHODS] if ABLATION else []


wildcard_constraints:
    hardware=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    model="|".join(map(re.escape, config["models"])),
    dataset=r"[A-Za-z0-9_][A-Za-z0-9._-]*",
    temperature=r"[0-9]+(\.[0-9]+)?",
    method="|".join(ALL_METHODS) + rf"|{ABLATION_PREFIX}[0-9]+",
    shard=r"[0-9]+",
    tclass=r"(_sampled)?",
    experiment=re.escape(config["experiment"]),


def decode_output(hardware, model, dataset, temperature, method):
    return f"results/{hardware}/{model}/{dataset}/t{temperature}/{method}.jsonl"


def ablation_output(hardware, model, dataset, temperature, method):
    """A run of the budget ablation's job: its own folder beside the main comparison's files."""
    return (
        f"results/{hardware}/{model}/{dataset}/t{temperature}/ablation/{method}.jsonl"
    )


def all_decode_outputs(hardware=HW, methods=None, files=decode_output):
    """Every decode output of ``methods`` (default: the main comparison) on ``hardware``."""
    return [
        files(hardware, m, d, t, meth)
        for m in MODELS
        for d in DATASETS
        for t in TEMPS
        for meth in (methods_at(t) if methods is None else methods)
    ]


def get_ablation_aggregate_inputs(wildcards):
    """The ablation job's files only: its AR, budget rules and fixed budgets, decoded together."""
    return all_decode_outputs(wildcards.hardware, ABLATION_RUNS, ablation_output)


def aggregate_dir(hardware=HW):
    return f"results/{hardware}/aggregate/{EXPERIMENT}"


def other_hardware_cells():
    """Cells of this experiment already aggregated for other hardware keys."""
    found = glob.glob(f"results/*/aggregate/{EXPERIMENT}/cells.csv")
    return sorted(set(found) | {f"{aggregate_dir()}/cells.csv"})


FIGURES = [
    "figures/speedup_table.pdf",
    "figures/speedup_bars.pdf",
    "figures/acceptance_length.pdf",
    "figures/acceptance_by_position.pdf",
    "figures/tree_budget.pdf",
    "figures/cost_model_fit.pdf",
]


def get_final_targets():
    targets = list(FIGURES)
    if ABLATION:
        targets.append("figures/budget_ablation.pdf")
    if len(other_hardware_cells()) > 1:
        targets.append("figures/hardware_comparison.pdf")
    return targets


def get_model_spec(wildcards):
    return config["models"][wildcards.model]


def gpu_resources():
    """SLURM resources of GPU rules: one GPU, of the configured type when the key names one."""
    res = {"gpu": 1}
    if GPU_MODEL:
        res["gpu_model"] = GPU_MODEL
    return res


# Calibration per temperature class: greedy (T = 0) files as they were, and `_sampled`
# files measured with per-node sampling (softmax + multinomial over the vocabulary) at
# SAMPLED_CALIBRATION_T, for every T > 0 (the sampling cost does not depend on T's value).
SAMPLED_CALIBRATION_T = 1.0


def calibration_class(temperature):
    return "_sampled" if float(temperature) > 0 else ""


# the temperature classes this experiment decodes ("" first): what `calibration_jobs: one` writes
TCLASSES = sorted({calibration_class(t) for t in EXP["temperatures"]})


def get_pair_inputs(wildcards):
    return {
        "model": f"results/models/{wildcards.model}.json",
        # every decode job waits for its pair's calibration (of its temperature class), which also checked the device
        "calibration": f"results/{wildcards.hardware}/{wildcards.model}/calibration{calibration_class(wildcards.temperature)}.json",
    }


def get_eagle3_tree_input(wildcards, eagle3=True):
    """The `auto` EAGLE-3 tree choice of the pair, for a job that decodes EAGLE-3 (else nothing)."""
    if not (eagle3 and EAGLE3_AUTO):
        return {}
    return {"eagle3_tree": EAGLE3_TREE_FILE.format(**wildcards)}


def get_cell_inputs(wildcards, eagle3=True):
    return {
        "data": f"results/datasets/{wildcards.dataset}.jsonl",
        **get_pair_inputs(wildcards),
        **get_eagle3_tree_input(wildcards, eagle3),
    }


def get_model_inputs(wildcards, eagle3=True):
    """A `decode_model` job's inputs: every dataset of the experiment, the model, its calibration
    (and EAGLE-3's tree choice unless ``eagle3`` is False: the ablation decodes no EAGLE-3).
    """
    return {
        "data": [f"results/datasets/{d}.jsonl" for d in DATASETS],
        **get_pair_inputs(wildcards),
        **get_eagle3_tree_input(wildcards, eagle3),
    }


def get_decode_inputs(wildcards):
    inputs = get_cell_inputs(wildcards, eagle3=wildcards.method == "eagle3")
    if wildcards.dataset in MULTI_TURN_DATASETS and wildcards.method != BASELINE:
        # one history for all methods: turn k of every method carries AR's answers to turns 1..k-1
        inputs["history"] = decode_output(
            wildcards.hardware,
            wildcards.model,
            wildcards.dataset,
            wildcards.temperature,
            BASELINE,
        )
    return inputs


def max_samples(dataset, temperature):
    """How many of ``dataset``'s prompts a job at ``temperature`` decodes: the set's `max_samples`,
    capped at T > 0 by the experiment's `sampled_max_samples` (null: no cap)."""
    n = EXP["datasets"][dataset].get("max_samples")
    cap = EXP.get("sampled_max_samples")
    if float(temperature) == 0 or cap is None:
        return n
    return cap if n is None else min(n, cap)


def method_knobs(dataset, temperature, method):
    """All knobs of one method's decoding, in one place so the sharded, plain and cell rules agree."""
    name, _, budget = method.partition("-b")
    knobs = {
        "method": name,
        "budget": int(budget) if budget else None,
        "temperature": float(temperature),
        "max_samples": max_samples(dataset, temperature),
        "max_new_tokens": EXP["max_new_tokens"],
        "n_min": N_MIN_EXP,
        "n_max": EXP.get("n_max", N_MAX),
        "topk": EXP.get("topk", TOPK),
        "block_size": EXP.get("block_size"),
        "device": EXP.get("device", "auto"),
        "dtype": EXP.get("dtype", "auto"),
        "attn_impl": config["attn_impl"],
        "engine": config["engine"],
        "kernels": KERNEL_KNOBS,
        "seed": config["seed"],
        "pattern": HW_PATTERN,
    }
    if name == "eagle3":  # only EAGLE-3's jobs rerun when its tree setting changes
        knobs["eagle3_tree"] = EAGLE3_TREE
    return knobs


def get_decode_params(wildcards):
    return method_knobs(wildcards.dataset, wildcards.temperature, wildcards.method)


def cell_runs(hardware, model, dataset, temperature, methods, files=decode_output):
    """Method -> its knobs, dataset, data, output and history file (AR's output, on multi-turn sets), in order.

    ``files`` places the outputs: the main comparison's or the ablation job's own.  AR runs
    first in a cell or model job and writes the histories of the others' later turns, so
    neither that job nor the ablation's reads another job's records.
    """
    cell = (hardware, model, dataset, temperature)
    multi_turn = dataset in MULTI_TURN_DATASETS
    return {
        m: {
            **method_knobs(dataset, temperature, m),
            "dataset": dataset,
            "data": f"results/datasets/{dataset}.jsonl",
            "output": files(*cell, m),
            "history": (
                files(*cell, BASELINE) if multi_turn and m != BASELINE else None
            ),
        }
        for m in methods
    }


def get_decode_cell_params(wildcards, methods=None, files=decode_output):
    methods = methods_at(wildcards.temperature) if methods is None else methods
    return cell_runs(
        wildcards.hardware,
        wildcards.model,
        wildcards.dataset,
        wildcards.temperature,
        methods,
        files,
    )


def get_decode_model_params(wildcards, methods=None, files=decode_output):
    """ "dataset/method" -> the runs of every cell of this (hardware, model, temperature), dataset by dataset."""
    methods = methods_at(wildcards.temperature) if methods is None else methods
    return {
        f"{d}/{m}": knobs
        for d in DATASETS
        for m, knobs in cell_runs(
            wildcards.hardware,
            wildcards.model,
            d,
            wildcards.temperature,
            methods,
            files,
        ).items()
    }


def ablation_repeats(temperature):
    """Decodes of each prompt in the ablation's job at ``temperature``, the fastest kept: the
    experiment's `ablation_repeats` at T = 0 (at T > 0 a second decode is another decode).
    """
    return EXP.get("ablation_repeats", 1) if float(temperature) == 0 else 1


def repeated(params, temperature):
    """The ablation job's knobs with its repeats: a change of them reruns the ablation alone."""
    return {
        run: {**knobs, "repeats": ablation_repeats(temperature)}
        for run, knobs in params.items()
    }


def get_ablation_cell_params(wildcards):
    return repeated(
        get_decode_cell_params(wildcards, ABLATION_RUNS, ablation_output),
        wildcards.temperature,
    )


def get_ablation_model_params(wildcards):
    return repeated(
        get_decode_model_params(wildcards, ABLATION_RUNS, ablation_output),
        wildcards.temperature,
    )


# The decode rules, one dict each: decode.smk makes them all with one rule block, so
# they differ only in what these give.  What one job covers is the wildcards of its
# log and benchmark paths.
MODEL_SCOPE = "{hardware}/{model}/t{temperature}"
CELL_SCOPE = "{hardware}/{model}/{dataset}/t{temperature}"
METHOD_SCOPE = "{hardware}/{model}/{dataset}/t{temperature}/{method}"
SHARD_SCOPE = "{hardware}/{model}/{dataset}/t{temperature}/{method}.{shard}"
CELL_OUTPUT = (
    "results/{{hardware}}/{{model}}/{{dataset}}/t{{temperature}}/{method}.jsonl"
)
MODEL_OUTPUT = (
    "results/{{hardware}}/{{model}}/{dataset}/t{{temperature}}/{method}.jsonl"
)
CELL_ABLATION_OUTPUT = "results/{{hardware}}/{{model}}/{{dataset}}/t{{temperature}}/ablation/{method}.jsonl"
MODEL_ABLATION_OUTPUT = (
    "results/{{hardware}}/{{model}}/{dataset}/t{{temperature}}/ablation/{method}.jsonl"
)


def decode_rule(
    name, scope, inputs, outputs, logs=None, temperature=r"[0-9]+(\.[0-9]+)?", **params
):
    """One decode rule: its name, what one job covers, inputs, outputs and params.

    ``logs`` names the folder of the job's log and benchmark (default: the rule's name);
    ``temperature`` is the regular expression of the temperatures its jobs decode;
    ``params`` are the job's own, before the software fingerprint and the code hash that
    every decode job carries.
    """
    folder = logs or name
    return {
        "name": name,
        "inputs": inputs,
        "outputs": outputs,
        "temperature": temperature,
        "params": {**params, "software": SOFTWARE, "code": CODE_DECODE},
        "log": f"logs/{folder}/{scope}.log",
        "benchmark": f"logs/benchmarks/{folder}/{scope}.tsv",
    }


def get_cell_rules():
    """The decode rules whose jobs decode several runs in one process (decode_cell.py):
    the main comparison's with `decode_jobs: model` or `cell`, and the ablation's."""
    rules = []
    for suffix, temps, example in TEMPERATURE_CLASSES:
        if DECODE_JOBS == "model":
            outputs = expand(MODEL_OUTPUT, dataset=DATASETS, method=methods_at(example))
            rules.append(
                decode_rule(
                    f"decode_model{suffix}",
                    MODEL_SCOPE,
                    get_model_inputs,
                    outputs,
                    temperature=temps,
                    knobs=get_decode_model_params,
                )
            )
        elif DECODE_JOBS == "cell":
            outputs = expand(CELL_OUTPUT, method=methods_at(example))
            rules.append(
                decode_rule(
                    f"decode_cell{suffix}",
                    CELL_SCOPE,
                    get_cell_inputs,
                    outputs,
                    temperature=temps,
                    knobs=get_decode_cell_params,
                )
            )
    if ABLATION_RUNS:
        rules.append(ablation_rule())
    return rules


def get_method_rules():
    """`decode_jobs: method`: one job per method, or per shard of it (decode.py)."""
    if DECODE_JOBS != "method":
        return []
    if SHARDS == 1:
        output = "results/{hardware}/{model}/{dataset}/t{temperature}/{method}.jsonl"
        return [
            decode_rule(
                "decode",
                METHOD_SCOPE,
                get_decode_inputs,
                output,
                knobs=get_decode_params,
                shard=None,
            )
        ]
    output = "results/{hardware}/{model}/{dataset}/t{temperature}/shards/{method}.{shard}.jsonl"
    return [
        decode_rule(
            "decode_shard",
            SHARD_SCOPE,
            get_decode_inputs,
            output,
            logs="decode",
            knobs=get_decode_params,
            shard=lambda wildcards: f"{wildcards.shard}/{SHARDS}",
        )
    ]


def ablation_rule():
    """The budget ablation's job: per (hardware, model, temperature) with `decode_jobs: model`,
    else per cell (never sharded: its runs advance together, prompt by prompt)."""
    if DECODE_JOBS == "model":
        outputs = expand(MODEL_ABLATION_OUTPUT, dataset=DATASETS, method=ABLATION_RUNS)
        knobs = get_ablation_model_params
        return decode_rule(
            "decode_model_ablation",
            MODEL_SCOPE,
            lambda wildcards: get_model_inputs(wildcards, eagle3=False),
            outputs,
            knobs=knobs,
        )
    outputs = expand(CELL_ABLATION_OUTPUT, method=ABLATION_RUNS)
    knobs = get_ablation_cell_params
    return decode_rule(
        "decode_cell_ablation",
        CELL_SCOPE,
        lambda wildcards: get_cell_inputs(wildcards, eagle3=False),
        outputs,
        knobs=knobs,
    )
