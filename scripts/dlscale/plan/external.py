"""External runs: logs dlscale did not produce, with the values each run needs.

An `external_runs` entry names a log (often a job's .out holding several runs), the
model and the training images; `gpus` and `global_batch` may each be one value for every
run, a list with one value per run in the log's order, or left out where the log states
them (headers, the echoed command line, TensorFlow's device list, user `patterns`, or
the job's .err named as `err_log`). A run's values: the config's, then the log's; a run
that has neither is an error before anything runs, and config and log disagreeing is a
warning naming both.
"""

from __future__ import annotations

from pathlib import Path

from dlscale.logparse.formats.stated import settings_sequence
from dlscale.logparse.lines import read_text
from dlscale.logparse.reader import compile_patterns, parse_file_runs
from dlscale.logparse.runs import LogError

PER_RUN = ("gpus", "global_batch")  # what every run needs, from the config or the log
GIVEN_PER_RUN = ("nodes",)  # from the config (one value, or one per run), else the log


def configured(item: dict, name: str, run: int):
    value = item.get(name)
    return value[run] if isinstance(value, list) else value


def resolve(item: dict, where: str, cache: str | None = None) -> tuple[list[dict], list[str]]:
    """([{gpus, global_batch, line}, ...] one per run of the log, warnings).
    ValueError with a one-line message naming the entry and what is wrong. `cache`: where
    the parse is kept for the rule that tabulates the log (reader.parse_file_runs)."""
    patterns = compile_patterns(item.get("patterns"), f"{where}.patterns")
    log = item["log"]
    try:
        runs = parse_file_runs(log, patterns, cache)
    except LogError as exc:
        # a job that crashed before its first epoch: one failed run in the tables, named
        # with the log's last lines, not an error that stops the study
        values = {"line": 1, "failed": str(exc)}
        for name in PER_RUN:
            value = configured(item, name, 0)
            if value is None:
                value = exc.settings.get(name)
            if value is not None:
                values[name] = value
        return [values], [f"{where}: {exc}: listed as a failed run"]
    except OSError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    warnings = [w for r in runs for w in r.warnings]
    # (a run that logs its own throughput beside its epochs, a Trainer's, needs none)
    if "train_images" not in item and any(r.epochs and r.rate is None for r in runs):
        raise ValueError(f"{where}: {log} holds epochs: give train_images (training images "
                         "per epoch), from which their images/s is computed")
    for name in PER_RUN + GIVEN_PER_RUN:
        value = item.get(name)
        if isinstance(value, list) and len(value) != len(runs):
            raise ValueError(
                f"{where}.{name} lists {len(value)} value(s) but {log} holds {len(runs)} run(s) "
                f"(starting at lines {', '.join(str(r.line) for r in runs)})")
    err = []
    if item.get("err_log"):
        err = settings_sequence(read_text(item["err_log"]), patterns)
        if err and len(err) != len(runs):
            warnings.append(f"{where}: {item['err_log']} states settings for {len(err)} run(s) "
                            f"but {log} holds {len(runs)}: its settings are not used")
            err = []
    resolved = []
    for index, run in enumerate(runs):
        stated = {**(err[index] if err else {}), **run.settings}
        values = {"line": run.line}
        for name in PER_RUN:
            conf, seen = configured(item, name, index), stated.get(name)
            if conf is not None and seen is not None and conf != seen:
                warnings.append(f"{where}: run {index + 1} of {log} (line {run.line}): the config "
                                f"says {name} {conf}, the log says {seen}; using {conf}")
            if conf is not None or seen is not None:
                values[name] = conf if conf is not None else seen
            if name == "gpus" and name in values:  # runs.csv's gpus_from
                values["gpus_from"] = "config" if conf is not None else run.facts.get(
                    "gpus_from", "log")
        for name in GIVEN_PER_RUN:
            if isinstance(item.get(name), list):
                values[name] = item[name][index]
            elif item.get(name) is None and name in stated:  # not given: the log's
                values[name] = stated[name]
        if "global_batch" not in values and "batch_per_gpu" in stated and "gpus" in values:
            values["global_batch"] = stated["batch_per_gpu"] * values["gpus"]
        # a token run's throughput is its own tokens/s: its batch is not needed
        missing = [n for n in PER_RUN if n not in values
                   and not (n == "global_batch" and run.unit == "tokens")]
        if missing:
            raise ValueError(
                f"{where}: run {index + 1} of {log} (line {run.line}) states no "
                f"{' and no '.join(missing)}: give {missing[0]} in the entry (one value, or a "
                "list with one per run) or a pattern that finds it in the log")
        resolved.append(values)
    return resolved, warnings


def entry_key(item: dict) -> str:
    """The entry's folder below results/external/: model and log name (and repeat)."""
    repeat = f"-rep{item['repeat']}" if item.get("repeat", 1) > 1 else ""
    return f"{item['model']}/{Path(item['log']).stem}{repeat}"
