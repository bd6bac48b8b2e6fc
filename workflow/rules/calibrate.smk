# Calibration: one chain of jobs per (hardware, model), on the device that will decode, and
# per temperature class: {tclass} is "" (greedy probes and overheads) or "_sampled" (T > 0).
# With `calibration_jobs: one` (small models) a single job runs the whole chain and writes
# the same files.  Every job computes with `cpu_threads` CPU threads (scaled down to
# --cores) and the `kernels:` settings, as the decode jobs do.


if CALIBRATION_JOBS == "one":

    rule calibrate_model:
        input:
            model="results/models/{model}.json",
            datasets=expand("results/datasets/{dataset}.jsonl", dataset=DATASETS),
        output:
            hardware="results/{hardware}/{model}/hardware.json",
            latency=[
                report(
                    path, caption="../report/latency_grid.rst", category="Calibration"
                )
                for path in expand(
                    "results/{{hardware}}/{{model}}/latency_grid{tclass}.json",
                    tclass=TCLASSES,
                )
            ],
            calibration=expand(
                "results/{{hardware}}/{{model}}/calibration{tclass}.json",
                tclass=TCLASSES,
            ),
        log:
            "logs/calibrate_model/{hardware}/{model}.log",
        benchmark:
            "logs/benchmarks/calibrate_model/{hardware}/{model}.tsv"
        conda:
            "../../envs/bastion.yaml"
        threads: CPU_THREADS
        resources:
            **gpu_resources(),
        params:
            pattern=HW_PATTERN,
            grid=EXP.get("calibration_grid", "paper"),
            max_new_tokens=EXP["max_new_tokens"],
            temperatures=[
                SAMPLED_CALIBRATION_T if tclass else 0.0 for tclass in TCLASSES
            ],
            accept_error=config.get("accept_calibration_error", False),
            device=EXP.get("device", "auto"),
            dtype=EXP.get("dtype", "auto"),
            attn_impl=config["attn_impl"],
            engine=config["engine"],
            kernels=KERNEL_KNOBS,
            n_min=N_MIN_EXP,
            n_max=EXP.get("n_max", N_MAX),
            seed=config["seed"],
            software=SOFTWARE,
            code=CODE_DECODE,
        script:
            "../scripts/calibrate_model.py"

else:

    rule measure_hardware:
        input:
            model="results/models/{model}.json",
        output:
            "results/{hardware}/{model}/hardware.json",
        log:
            "logs/measure_hardware/{hardware}/{model}.log",
        benchmark:
            "logs/benchmarks/measure_hardware/{hardware}/{model}.tsv"
        conda:
            "../../envs/bastion.yaml"
        threads: CPU_THREADS
        resources:
            **gpu_resources(),
        params:
            pattern=HW_PATTERN,
            device=EXP.get("device", "auto"),
            dtype=EXP.get("dtype", "auto"),
            attn_impl=config["attn_impl"],
            engine=config["engine"],
            kernels=KERNEL_KNOBS,
            software=SOFTWARE,
            code=CODE_DECODE,
        script:
            "../scripts/measure_hardware.py"

    rule calibrate_latency:
        input:
            model="results/models/{model}.json",
            hardware="results/{hardware}/{model}/hardware.json",
            # the grid's contexts reach the experiment's longest prompt plus max_new_tokens
            datasets=expand("results/datasets/{dataset}.jsonl", dataset=DATASETS),
        output:
            report(
                "results/{hardware}/{model}/latency_grid{tclass}.json",
                caption="../report/latency_grid.rst",
                category="Calibration",
            ),
        log:
            "logs/calibrate_latency/{hardware}/{model}{tclass}.log",
        benchmark:
            "logs/benchmarks/calibrate_latency/{hardware}/{model}{tclass}.tsv"
        conda:
            "../../envs/bastion.yaml"
        threads: CPU_THREADS
        resources:
            **gpu_resources(),
        params:
            grid=EXP.get("calibration_grid", "paper"),
            max_new_tokens=EXP["max_new_tokens"],
            temperature=lambda wildcards: (
                SAMPLED_CALIBRATION_T if wildcards.tclass else 0.0
            ),
            accept_error=config.get("accept_calibration_error", False),
            device=EXP.get("device", "auto"),
            dtype=EXP.get("dtype", "auto"),
            attn_impl=config["attn_impl"],
            engine=config["engine"],
            kernels=KERNEL_KNOBS,
            software=SOFTWARE,
            code=CODE_DECODE,
        script:
            "../scripts/calibrate_latency.py"

    rule profile_constants:
        input:
            model="results/models/{model}.json",
            latency="results/{hardware}/{model}/latency_grid{tclass}.json",
        output:
            "results/{hardware}/{model}/calibration{tclass}.json",
        log:
            "logs/profile_constants/{hardware}/{model}{tclass}.log",
        benchmark:
            "logs/benchmarks/profile_constants/{hardware}/{model}{tclass}.tsv"
        conda:
            "../../envs/bastion.yaml"
        threads: CPU_THREADS
        resources:
            **gpu_resources(),
        params:
            device=EXP.get("device", "auto"),
            dtype=EXP.get("dtype", "auto"),
            attn_impl=config["attn_impl"],
            engine=config["engine"],
            kernels=KERNEL_KNOBS,
            n_min=N_MIN_EXP,
            n_max=EXP.get("n_max", N_MAX),
            seed=config["seed"],
            software=SOFTWARE,
            code=CODE_DECODE,
        script:
            "../scripts/profile_constants.py"


# EAGLE-3's tree with `eagle3_tree: auto`: one short sweep per (hardware, model, head) on
# the first prompts of the experiment's first dataset, greedy, on the device, engine and
# dtype that decode; the jobs that decode EAGLE-3 read the choice instead of sweeping each.
# It runs after the latency calibration (which it does not read), so that the calibration
# times its grid on a device that nothing of this experiment has compiled for yet, as it
# does without EAGLE-3, and a recalibration chooses the tree again.
if EAGLE3_AUTO:

    rule choose_eagle3_tree:
        input:
            model="results/models/{model}.json",
            data=f"results/datasets/{DATASETS[0]}.jsonl",
            after_calibration=f"results/{{hardware}}/{{model}}/calibration{TCLASSES[0]}.json",
        output:
            EAGLE3_TREE_FILE,
        log:
            "logs/choose_eagle3_tree/{hardware}/{model}.log",
        benchmark:
            "logs/benchmarks/choose_eagle3_tree/{hardware}/{model}.tsv"
        conda:
            "../../envs/bastion.yaml"
        threads: CPU_THREADS
        resources:
            **gpu_resources(),
        params:
            knobs=method_knobs(DATASETS[0], 0.0, "eagle3"),
            dataset=DATASETS[0],
            software=SOFTWARE,
            code=CODE_DECODE,
        script:
            "../scripts/choose_eagle3_tree.py"
