# One job per sweep point. Resources come from the config (rules/common.smk expands
# them per point), so the SLURM profile only holds site settings.


rule find_batch_size:
    input:
        manifest=f"{DATA_DIR}/{C.MANIFEST}",
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


# One rule trains every point: dlscale's (train.py, through launch.py: one process, or
# several workers started with srun or horovodrun) and your own commands (run_command.py
# runs the command once in the job, which holds the point's GPUs and `tasks` SLURM tasks:
# the command starts per-task processes itself, e.g. with srun). A point of several tasks
# gets the `tasks` and `mpi` resources (rules/common.smk): `mpi` tells the SLURM plugin not
# to wrap the job in an srun of its own.
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
        point=POINT,
    conda:
        "../envs/dlscale.yaml"
    container:
        SOFTWARE_CONTAINER
    envmodules:
        *SOFTWARE_MODULES,
    threads: point_resource("cores")
    resources:
        **point_resources(),
    params:
        launcher=script("launch.py"),
        launch=of_point(STUDY.launch_plan),
        out=folder_of("run"),
        worker=of_point(STUDY.worker_command),
    # launch.py --record: whatever becomes of the point, run.json says so and the job
    # succeeds, so the tables are built with it; check_points fails the workflow after.
    # --time-limit-min: the watchdog's limit where no SLURM job gives one (profiles/local);
    # --threads: the cores Snakemake granted, shared by the workers where SLURM says nothing.
    shell:
        "python {params.launcher:q} {params.launch} --record {params.out:q} --log {log:q} "
        "--time-limit-min {resources.runtime} --threads {threads} -- {params.worker} "
        "> {log:q} 2>&1"


# The link between nodes, timed once per strategy and node count over one node, on the
# allocation of the study's largest point there (dlscale.plan.probes): the prediction's
# figures between nodes (prediction.csv's link_source: measured).
PROBES = probes.plan(POINTS, config)


rule probe_network:
    output:
        f"{C.NETWORK}/{{probe}}.json",
    log:
        "logs/probe_network/{probe}.log",
    wildcard_constraints:
        probe=one_of(PROBES),
    retries: 1
    conda:
        "../envs/dlscale.yaml"
    container:
        SOFTWARE_CONTAINER
    envmodules:
        *SOFTWARE_MODULES,
    threads: point_resource("cores")
    resources:
        **retry_records_only(probes.job_resources(point_resources())),
    params:
        launcher=script("launch.py"),
        launch=of_point(STUDY.launch_plan),
        worker=signature_once(probes.worker_of(STUDY, PROBES)),
        script=script("probe_network.py"),
        job=lambda wildcards: f"logs/probe_network/{wildcards.probe}.job",
    # a probe that fails says so in its JSON (the prediction goes without it), never
    # stopping the tables: its workers' error where they fail in the job; where SLURM ends
    # the job (scancel, the time limit, a node's failure) the retry writes that job's state
    shell:
        "if [ {resources.probe_attempt} -gt 1 ]; then "
        "python {params.script:q} --probe-out {output:q} --ended {params.job:q} "
        "--failed {log:q} >> {log:q} 2>&1; else "
        'echo "${{SLURM_JOB_ID:-}}" > {params.job:q}; '
        "python {params.launcher:q} {params.launch} --threads {threads} -- {params.worker} "
        "> {log:q} 2>&1 || "
        "python {params.script:q} --probe-out {output:q} --failed {log:q} >> {log:q} 2>&1; "
        "fi"
