"""The error every planning check raises: one line naming the key or file and what was
expected. rules/common.smk shows it as Snakemake's WorkflowError, once."""


class PlanError(ValueError):
    """The config asks for something that cannot run; the message says what and why."""


class RunError(Exception):
    """A training run cannot go on; `code` is the exit status train.py ends with."""

    def __init__(self, message: str, code: int = 3):
        super().__init__(message)
        self.code = code
