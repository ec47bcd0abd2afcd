"""The errors of planning and of a run: PlanError, one line naming the key or file and
what was expected (rules/common.smk shows it as Snakemake's WorkflowError, once);
RunError, with train.py's exit status; a full disk told apart from full memory."""


def one_line(reason: str) -> str:
    """A reason as status, the first page and failed.csv show it: its first non-blank line,
    and, where it had more, a pointer to the whole text (the point's run.json keeps it)."""
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[0] + (" [...; the whole reason is in the point's run.json]"
                       if len(lines) > 1 else "")


class PlanError(ValueError):
    """The config asks for something that cannot run; the message says what and why."""


class RunError(Exception):
    """A training run cannot go on; `code` is the exit status train.py ends with."""

    def __init__(self, message: str, code: int = 3):
        super().__init__(message)
        self.code = code


def disk_full(exc: BaseException) -> str | None:
    """'no space left on DEVICE (path)' for a full disk or quota, which TensorFlow raises
    as ResourceExhaustedError like device memory; None for anything else."""
    import errno

    text = str(exc)
    number = getattr(exc, "errno", None)
    if number == errno.ENOSPC or "No space left on device" in text:
        what = "no space left on device"
    elif number == errno.EDQUOT or "Disk quota exceeded" in text:
        what = "disk quota exceeded"
    else:
        return None
    where = getattr(exc, "filename", None) or next(
        (word.strip("'\",;:") for word in text.split() if word.startswith(("/", "results/"))),
        None)
    return f"{what}{f' ({where})' if where else ''}: free space there and run again " \
        f"({text.strip().splitlines()[0][:200]})"
