# dlscale: how deep-learning training scales with GPUs, as one workflow.
# Table of contents only; the logic lives in rules/*.smk and scripts/.

from snakemake.utils import min_version

min_version("9.0")


configfile: f"{workflow.basedir}/config/config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/analysis.smk"


# `snakemake --report` opens on the study's answer (rules/analysis.smk: report_page)
report: ANALYSIS.report_first_page(C.REPORT_PAGE, "report/workflow.rst")


rule all:
    default_target: True
    input:
        ANALYSIS.targets(PLOT_NAMES + WHY_PLOTS),
