"""The study as Snakemake sees it: one Study (points, resources, analysis inputs), the
sweep, users' models read without running them, the rules' functions and the guarded
workaround of the SLURM plugin."""
