# From training logs to the study's tables, plots and report. All cheap: local rules.


rule tabulate_run:
    input:
        run=f"{C.RUNS}/{{point}}/{C.RUN_JSON}",
        epochs=f"{C.RUNS}/{{point}}/{C.EPOCHS}",
        log=f"{C.RUNS}/{{point}}/{C.TRAIN_LOG}",
    output:
        f"{C.RUNS}/{{point}}/{C.RUN_TABLE}",
    log:
        "logs/tabulate_run/{point}.log",
    wildcard_constraints:
        point=POINT,
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("tabulate_run.py"),
        meta=of_point(STUDY.point_meta),
        folder=folder_of_input("run"),
    shell:
        "python {params.script:q} {params.folder:q} {params.meta} -o {output:q} > {log:q} 2>&1"


rule parse_external_log:
    input:
        by_wildcards(lambda key: EXTERNAL[key][0]["log"], "ext"),
    output:
        f"{C.EXTERNAL}/{{ext}}/{C.RUN_TABLE}",
    log:
        "logs/parse_external_log/{ext}.log",
    wildcard_constraints:
        ext=one_of(EXTERNAL),
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("parse_logs.py"),
        meta=by_wildcards(ANALYSIS.external_flags, "ext"),
    shell:
        "python {params.script:q} {input:q} {params.meta} -o {output:q} > {log:q} 2>&1"


rule aggregate_runs:
    input:
        ANALYSIS.run_tables(),
    output:
        epochs=C.table("epochs"),
        runs=report(
            C.table("runs"),
            caption="../report/runs.rst",
            category="Tables",
            labels={"table": "runs"},
        ),
        scaling=report(
            C.table("scaling"),
            caption="../report/scaling.rst",
            category="Tables",
            labels={"table": "scaling"},
        ),
        failed=report(
            C.table("failed"),
            caption="../report/failed.rst",
            category="Tables",
            labels={"table": "failed points"},
        ),
        amdahl=report(
            C.table("amdahl"),
            caption="../report/amdahl.rst",
            category="Tables",
            labels={"table": "serial fraction (Amdahl fit)"},
        ),
        references=report(
            C.table("references"),
            caption="../report/references.rst",
            category="Tables",
            labels={"table": "verdicts against references"},
        ),
        systems=report(
            C.table("systems"),
            caption="../report/systems.rst",
            category="Systems",
            labels={"table": "what the runs ran on"},
        ),
    log:
        "logs/aggregate_runs.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("aggregate.py"),
        tables=folder_of("scaling"),
        flags=ANALYSIS.analysis_flags(),
    shell:
        "python {params.script:q} {input:q} --out-dir {params.tables:q} {params.flags} "
        "> {log:q} 2>&1"


# The other studies of `compare:` beside this one, in one table for the report.
rule compare_studies:
    input:
        scaling=C.table("scaling"),
        # read beside scaling.csv, as each compared study's are
        why=[C.table("breakdown"), C.table("prediction")],
        others=[path for _, path in ANALYSIS.compare],
    output:
        report(
            C.table("compared"),
            caption="../report/compared.rst",
            category="Tables",
            labels={"table": "compared studies"},
        ),
    log:
        "logs/compare_studies.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("compare_studies.py"),
        compare=ANALYSIS.compare_flags(),
    shell:
        "python {params.script:q} {input.scaling:q} {params.compare} -o {output:q} > {log:q} 2>&1"


# With `history.path`: the study's points go into the results history (a database that
# outlives results/), and are compared with the last history.compare earlier studies.
rule history:
    input:
        scaling=C.table("scaling"),
        runs=C.table("runs"),
    output:
        verdicts=report(
            C.table("history"),
            caption="../report/history.rst",
            category="Tables",
            labels={"table": "against the history"},
        ),
        studies=C.table("history_studies"),
    log:
        "logs/history.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("record_history.py"),
        runs=C.RUNS,
        # a function: the config's text (gres: "gpu:{gpus}") is not a wildcard pattern
        flags=lambda wildcards: ANALYSIS.history_flags(),
    shell:
        "python {params.script:q} {input.scaling:q} --runs {input.runs:q} "
        "--runs-dir {params.runs:q} {params.flags} --verdicts {output.verdicts:q} "
        "--studies {output.studies:q} 2>&1 | tee {log:q}"


rule plot_scaling:
    input:
        scaling=C.table("scaling"),
        runs=C.table("runs"),
        amdahl=C.table("amdahl"),
        others=[path for _, path in ANALYSIS.compare],
        history=ANALYSIS.history_studies(),
    output:
        [
            report(
                f"{C.PLOTS}/{name}.png",
                caption=f"../report/{name}.rst",
                category="Scaling",
                labels={"figure": name.replace("_", " ")},
            )
            for name in PLOT_NAMES
        ],
        [f"{C.PLOTS}/{name}.svg" for name in PLOT_NAMES],
    log:
        "logs/plot_scaling.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("plot_scaling.py"),
        plots=folder_of(0),
        compare=ANALYSIS.compare_flags(),
        history=" ".join(
            f"--history {shlex.quote(p)}" for p in ANALYSIS.history_studies()
        ),
    shell:
        "python {params.script:q} {input.scaling:q} --runs {input.runs:q} "
        "--amdahl {input.amdahl:q} {params.compare} {params.history} "
        "--out-dir {params.plots:q} > {log:q} 2>&1"


# Why each point scales as it does: its profiled window's split of a step and its timed
# all-reduce (breakdown.json beside its records), and a communication model per series.
rule explain_scaling:
    input:
        scaling=C.table("scaling"),
        runs=C.table("runs"),
        network=ANALYSIS.network_files,
        probes=[probes.probe_file(key) for key in PROBES],
    output:
        breakdown=report(
            C.table("breakdown"),
            caption="../report/breakdown.rst",
            category="Tables",
            labels={"table": "where the step time goes"},
        ),
        prediction=report(
            C.table("prediction"),
            caption="../report/prediction_table.rst",
            category="Tables",
            labels={"table": "what more GPUs would give"},
        ),
    log:
        "logs/explain_scaling.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("explain_scaling.py"),
        runs=C.RUNS,
        network=ANALYSIS.network_flags(),
        per_node=ANALYSIS.prediction_flags(),
    shell:
        "python {params.script:q} {input.scaling:q} --runs {input.runs:q} "
        "--runs-dir {params.runs:q} --breakdown {output.breakdown:q} "
        "--prediction {output.prediction:q} {params.network} {params.per_node} "
        "--probes {input.probes:q} 2>&1 | tee {log:q}"


rule plot_breakdown:
    input:
        breakdown=C.table("breakdown"),
        prediction=C.table("prediction"),
    output:
        [
            report(
                f"{C.PLOTS}/{name}.png",
                caption=f"../report/{name}.rst",
                category="Scaling",
                labels={"figure": name.replace("_", " ")},
            )
            for name in WHY_PLOTS
        ],
        [f"{C.PLOTS}/{name}.svg" for name in WHY_PLOTS],
    log:
        "logs/plot_breakdown.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("plot_breakdown.py"),
        plots=folder_of(0),
    shell:
        "python {params.script:q} {input.breakdown:q} --prediction {input.prediction:q} "
        "--out-dir {params.plots:q} > {log:q} 2>&1"


# The report's first page (the Snakefile's `report:`): the answer, flags, failed points.
rule report_page:
    input:
        scaling=C.table("scaling"),
        amdahl=C.table("amdahl"),
        failed=C.table("failed"),
        overview=f"{C.PLOTS}/overview.png",
        verdicts=[C.table("history")] if ANALYSIS.history_db else [],
        breakdown=C.table("breakdown"),
        prediction=C.table("prediction"),
    output:
        C.REPORT_PAGE,
    log:
        "logs/report_page.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("report_page.py"),
        verdicts=lambda wildcards, input: (
            f"--verdicts {shlex.quote(input.verdicts[0])}" if input.verdicts else ""
        ),
        min_efficiency=float(config["analysis"]["min_efficiency"]),
    shell:
        "python {params.script:q} {input.scaling:q} --amdahl {input.amdahl:q} "
        "--failed {input.failed:q} --overview {input.overview:q} {params.verdicts} "
        "--breakdown {input.breakdown:q} --prediction {input.prediction:q} "
        "--min-efficiency {params.min_efficiency} -o {output:q} > {log:q} 2>&1"


# Last: fails (non-zero exit of the workflow) when a point failed, once the tables and
# plots that list it are written; the next run plans the failed points again.
rule check_points:
    input:
        runs=C.table("runs"),
        plots=[f"{C.PLOTS}/{name}.png" for name in PLOT_NAMES],
    output:
        f"{C.CHECKS}/points.txt",
    log:
        "logs/check_points.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("check_points.py"),
    shell:
        "python {params.script:q} {input.runs:q} -o {output:q} 2>&1 | tee {log:q}"


# With `references:`: a target of its own (a site runs it after maintenance), written only
# when no point is outside its reference's tolerances; else the rule fails, naming them.
rule verdicts:
    input:
        references=C.table("references"),
        plots=[f"{C.PLOTS}/{name}.png" for name in PLOT_NAMES],
    output:
        C.table("verdicts"),
    log:
        "logs/verdicts.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("check_verdicts.py"),
    shell:
        "python {params.script:q} {input.references:q} -o {output:q} 2>&1 | tee {log:q}"
