"""The error every planning check raises: one line naming the key or file and what was
expected. rules/common.smk shows it as Snakemake's WorkflowError, once."""


class PlanError(ValueError):
    """The config asks for something that cannot run; the message says what and why."""
