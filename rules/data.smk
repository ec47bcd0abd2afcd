# Dataset: download (on the login node, which has internet) and preparation of the
# resized, sharded TFRecords with their manifest.


rule download_dataset:
    output:
        "resources/downloads/{dataset}/{filename}",
    params:
        url=lambda wildcards: download_spec(wildcards)[0],
        md5=lambda wildcards: download_spec(wildcards)[1] or "",
    log:
        "logs/download_dataset/{dataset}/{filename}.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    shell:
        "python {SCRIPTS}/download.py {params.url:q} -o {output:q} "
        "$([ -n '{params.md5}' ] && echo --md5 {params.md5}) > {log} 2>&1"


rule prepare_dataset:
    input:
        prepare_input,
    output:
        "results/data/{dataset}-{size}px/manifest.json",
    params:
        flags=prepare_flags,
    log:
        "logs/prepare_dataset/{dataset}-{size}px.log",
    benchmark:
        "benchmarks/prepare_dataset/{dataset}-{size}px.tsv"
    threads: 2
    resources:
        mem_mb=12000,
        runtime=60,
    conda:
        "../envs/dlscale.yaml"
    shell:
        "python {SCRIPTS}/prepare_data.py {params.flags} "
        "--out results/data/{wildcards.dataset}-{wildcards.size}px > {log} 2>&1"
