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
        amdahl=report(
            "results/tables/amdahl.csv",
            caption="../report/amdahl.rst",
            category="Tables",
            labels={"table": "serial fraction (Amdahl fit)"},
        ),
        references=report(
            "results/tables/references.csv",
            caption="../report/references.rst",
            category="Tables",
            labels={"table": "verdicts against references"},
        ),
        systems=report(
            "results/tables/systems.csv",
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
        flags=STUDY.analysis_flags(),
    shell:
        "python {params.script:q} {input:q} --out-dir results/tables {params.flags} "
        "> {log:q} 2>&1"


# The other studies of `compare:` beside this one, in one table for the report.
rule compare_studies:
    input:
        scaling="results/tables/scaling.csv",
        others=[path for _, path in STUDY.compare],
    output:
        report(
            "results/tables/compared.csv",
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
        compare=STUDY.compare_flags(),
    shell:
        "python {params.script:q} {input.scaling:q} {params.compare} -o {output:q} > {log:q} 2>&1"


rule plot_scaling:
    input:
        scaling="results/tables/scaling.csv",
        runs="results/tables/runs.csv",
        amdahl="results/tables/amdahl.csv",
        others=[path for _, path in STUDY.compare],
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
        compare=STUDY.compare_flags(),
    shell:
        "python {params.script:q} {input.scaling:q} --runs {input.runs:q} "
        "--amdahl {input.amdahl:q} {params.compare} "
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


# With `references:`: a target of its own (a site runs it after maintenance), written only
# when no point is outside its reference's tolerances; else the rule fails, naming them.
rule verdicts:
    input:
        references="results/tables/references.csv",
        plots=[f"results/plots/{name}.png" for name in PLOT_NAMES],
    output:
        "results/tables/verdicts.csv",
    log:
        "logs/verdicts.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("check_verdicts.py"),
    shell:
        "python {params.script:q} {input.references:q} -o {output:q} 2>&1 | tee {log:q}"
