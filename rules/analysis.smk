# From training logs to the study's tables, plots and report. All cheap: local rules.


rule parse_log:
    input:
        log="results/runs/{point}/train.log",
        records="results/runs/{point}/epochs.jsonl",
        run="results/runs/{point}/run.json",
    output:
        "results/runs/{point}/epochs.csv",
    log:
        "logs/parse_log/{point}.log",
    wildcard_constraints:
        point=one_of(POINTS),
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("parse_logs.py"),
        meta=of_point(STUDY.point_meta),
    shell:
        "python {params.script:q} {input.log:q} --records {input.records:q} "
        "--run-json {input.run:q} {params.meta} -o {output:q} > {log:q} 2>&1"


rule parse_external_log:
    input:
        of_external(lambda key: EXTERNAL[key][0]["log"]),
    output:
        "results/external/{ext}/epochs.csv",
    log:
        "logs/parse_external_log/{ext}.log",
    wildcard_constraints:
        ext=one_of(EXTERNAL),
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("parse_logs.py"),
        meta=of_external(STUDY.external_flags),
    shell:
        "python {params.script:q} {input:q} {params.meta} -o {output:q} > {log:q} 2>&1"


rule aggregate_runs:
    input:
        STUDY.run_tables(),
    output:
        epochs="results/tables/epochs.csv",
        runs=report(
            "results/tables/runs.csv",
            caption="../report/runs.rst",
            category="Tables",
            labels={"table": "runs"},
        ),
        scaling=report(
            "results/tables/scaling.csv",
            caption="../report/scaling.rst",
            category="Tables",
            labels={"table": "scaling"},
        ),
        failed=report(
            "results/tables/failed.csv",
            caption="../report/failed.rst",
            category="Tables",
            labels={"table": "failed points"},
        ),
    log:
        "logs/aggregate_runs.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("aggregate.py"),
        skip=config["analysis"]["skip_epochs"],
        tolerance=config["analysis"]["accuracy_tolerance"],
    shell:
        "python {params.script:q} {input:q} --out-dir results/tables "
        "--skip-epochs {params.skip} --accuracy-tolerance {params.tolerance} > {log:q} 2>&1"


rule plot_scaling:
    input:
        scaling="results/tables/scaling.csv",
        runs="results/tables/runs.csv",
    output:
        [
            report(
                f"results/plots/{name}.png",
                caption=f"../report/{name}.rst",
                category="Scaling",
                labels={"figure": name.replace("_", " ")},
            )
            for name in PLOT_NAMES
        ],
        [f"results/plots/{name}.svg" for name in PLOT_NAMES],
    log:
        "logs/plot_scaling.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("plot_scaling.py"),
        subtitle=STUDY.plot_subtitle(),
    shell:
        "python {params.script:q} {input.scaling:q} --runs {input.runs:q} "
        "--out-dir results/plots --subtitle {params.subtitle:q} > {log:q} 2>&1"


# Last: fails (non-zero exit of the workflow) when a point failed, once the tables and
# plots that list it are written; the next run plans the failed points again.
rule check_points:
    input:
        runs="results/tables/runs.csv",
        plots=[f"results/plots/{name}.png" for name in PLOT_NAMES],
    output:
        "results/checks/points.txt",
    log:
        "logs/check_points.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("check_points.py"),
    shell:
        "python {params.script:q} {input.runs:q} -o {output:q} 2>&1 | tee {log:q}"
