# Dataset: download (on the login node, which has internet) and preparation of the
# resized, sharded TFRecords with their manifest.


rule download_dataset:
    output:
        f"{C.DOWNLOADS}/{{dataset}}/{{filename}}",
    log:
        "logs/download_dataset/{dataset}/{filename}.log",
    localrule: True
    conda:
        "../envs/dlscale.yaml"
    params:
        script=script("download.py"),
        url=by_wildcards(STUDY.download_url, "dataset", "filename"),
        md5=by_wildcards(STUDY.download_md5_flag, "dataset", "filename"),
    shell:
        "python {params.script:q} {params.url:q} -o {output:q} {params.md5} > {log:q} 2>&1"


rule prepare_dataset:
    input:
        by_wildcards(STUDY.prepare_inputs, "dataset", "size"),
    output:
        f"{C.DATA}/{{dataset}}-{{size}}px/{C.MANIFEST}",
    log:
        "logs/prepare_dataset/{dataset}-{size}px.log",
    benchmark:
        "benchmarks/prepare_dataset/{dataset}-{size}px.tsv"
    conda:
        "../envs/dlscale.yaml"
    container:
        SOFTWARE_CONTAINER
    envmodules:
        *SOFTWARE_MODULES,
    threads: 2
    resources:
        mem_mb=12000,
        runtime=60,
    params:
        script=script("prepare_data.py"),
        flags=by_wildcards(STUDY.prepare_flags_of, "dataset", "size"),
        out=lambda wildcards, output: str(Path(output[0]).parent),
    shell:
        "python {params.script:q} {params.flags} --out {params.out:q} > {log:q} 2>&1"
