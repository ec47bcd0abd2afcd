# One job per sweep point. Resources come from the config (rules/common.smk expands
# them per point), so the SLURM profile only holds site settings.


rule find_batch_size:
    input:
        manifest=f"{DATA_DIR}/{MANIFEST}",
    output:
        f"{C.BATCH}/{{model}}/{{precision}}.json",
    log:
        "logs/find_batch_size/{model}/{precision}.log",
    benchmark:
        "benchmarks/find_batch_size/{model}/{precision}.tsv"
    wildcard_constraints:
        model="|".join(sorted({p.model for p in POINTS.values()})) or "(?!)",
        precision="|".join(vocabulary.PRECISIONS),
    conda:
        "../envs/dlscale.yaml"
    container:
        SOFTWARE_CONTAINER
    envmodules:
        *SOFTWARE_MODULES,
    threads: by_wildcards(partial(STUDY.finder_resource, "cpus_per_task"), "model")
    resources:
        gres=by_wildcards(partial(STUDY.finder_resource, "gres"), "model"),
        cpus_per_task=by_wildcards(
            partial(STUDY.finder_resource, "cpus_per_task"), "model"
        ),
        mem_mb=by_wildcards(partial(STUDY.finder_resource, "mem_mb"), "model"),
        runtime=by_wildcards(partial(STUDY.finder_resource, "runtime"), "model"),
    params:
        script=script("find_batch_size.py"),
        data=data_dir,
        xla="--xla" if config["training"]["xla"] else "--no-xla",
        size=config["data"]["image_size"],
    shell:
        "python {params.script:q} --model {wildcards.model} --data-dir {params.data:q} "
        "--image-size {params.size} "
        "--precision {wildcards.precision} {params.xla} --out {output:q} > {log:q} 2>&1"


rule train:
    input:
        unpack(by_wildcards(STUDY.train_inputs, "point")),
    output:
        run=f"{C.RUNS}/{{point}}/{C.RUN_JSON}",
        epochs=f"{C.RUNS}/{{point}}/{C.EPOCHS}",
        log=f"{C.RUNS}/{{point}}/{C.TRAIN_LOG}",
    log:
        "logs/train/{point}.log",
    benchmark:
        "benchmarks/train/{point}.tsv"
    wildcard_constraints:
        point=one_of(STUDY.points_where(multi_task=False)),
    conda:
        "../envs/dlscale.yaml"
    container:
        SOFTWARE_CONTAINER
    envmodules:
        *SOFTWARE_MODULES,
    threads: point_resource("cpus_per_task")
    resources:
        **point_resources(),
    params:
        launcher=script("launch.py"),
        script=script("train.py"),
        flags=of_point(STUDY.train_flags),
        data=data_dir,
        launch=of_point(STUDY.launch_flags),
        python=of_point(STUDY.python),
        out=folder_of("run"),
        attempt=of_point(STUDY.attempt),
    # launch.py --record: whatever becomes of the point, run.json says so and the job
    # succeeds, so the tables are built with it; check_points fails the workflow after.
    # --time-limit-min: the watchdog's limit where no SLURM job gives one (profiles/local).
    shell:
        "python {params.launcher:q} {params.launch} --record {params.out:q} --log {log:q} "
        "--time-limit-min {resources.runtime} -- "
        "{params.python:q} {params.script:q} {params.flags} --attempt {params.attempt} "
        "--data-dir {params.data:q} --out {params.out:q} > {log:q} 2>&1"


# Points with several worker processes (multiworker, horovod): the job holds one SLURM task
# per worker and launch.py starts them inside it, with srun or horovodrun (the `mpi`
# resource tells the SLURM plugin not to wrap the job in an srun of its own;
# tasks_per_gpu=1 gives one task per GPU).
use rule train as train_workers with:
    wildcard_constraints:
        point=one_of(STUDY.points_where(multi_task=True)),
    resources:
        **point_resources("tasks", "tasks_per_gpu"),


# Points of your own training command (sweep.commands): run_command.py fills in and runs
# the command once in the job, which holds the point's GPUs and `tasks` SLURM tasks (the
# command starts per-task processes itself, e.g. with srun), and records what its output
# says.
rule train_command:
    output:
        run=f"{C.RUNS}/{{point}}/{C.RUN_JSON}",
        epochs=f"{C.RUNS}/{{point}}/{C.EPOCHS}",
        log=f"{C.RUNS}/{{point}}/{C.TRAIN_LOG}",
    log:
        "logs/train/{point}.log",
    benchmark:
        "benchmarks/train/{point}.tsv"
    wildcard_constraints:
        point=one_of(STUDY.points_where(multi_task=False, command=True)),
    conda:
        "../envs/dlscale.yaml"
    container:
        SOFTWARE_CONTAINER
    envmodules:
        *SOFTWARE_MODULES,
    threads: point_resource("cpus_per_task")
    resources:
        **point_resources(),
    params:
        launcher=script("launch.py"),
        script=script("run_command.py"),
        flags=of_point(STUDY.command_flags),
        out=folder_of("run"),
        attempt=of_point(STUDY.attempt),
    shell:
        "python {params.launcher:q} --record {params.out:q} --log {log:q} "
        "--time-limit-min {resources.runtime} -- "
        "python {params.script:q} {params.flags} --attempt {params.attempt} "
        "--out {params.out:q} > {log:q} 2>&1"


# A command of several tasks: the `mpi` resource keeps the SLURM plugin from starting
# the job step once per task (the plugin refuses it for one task, hence two rules).
use rule train_command as train_command_tasks with:
    wildcard_constraints:
        point=one_of(STUDY.points_where(multi_task=True, command=True)),
    resources:
        **point_resources("tasks"),
