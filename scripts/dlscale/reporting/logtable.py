"""Turn a training's output into a table with one row per epoch (one per run where it
counts steps or prints a run's total).

  dlscale parse-log ResNet50_all.out -o epochs.csv \
      --per-run '[{"gpus": 1, "global_batch": 256}, {"gpus": 2, "global_batch": 512}, ...]'

Reads Keras' lines, progress bars, PyTorch's and Lightning's, a Hugging Face Trainer's
dicts, MLPerf's and DLLogger's, a language model's tokens/s and a script's own epoch
lines (see dlscale/logparse/reader.py); other output is ignored. A file may hold several
runs (a job that ran the script once per GPU count): each gets its `log_run` number (1, 2,
...) and the settings the log states (gpus, global batch), and the script says how many
runs each file held. A run that ends inside an epoch gives its finished epochs and a warning; a
file without any finished epoch is an error.

--meta KEY=VALUE adds a column with a constant value (the workflow passes the external
run's settings), which the aggregation step groups by. dlscale's own run folders are
tabulated from their records by tabulate_run.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from dlscale.core.cli import parse_meta
from dlscale.core.contract import Status
from dlscale.core.files import write_rows
from dlscale.core.vocabulary import EPOCH_METRICS
from dlscale.logparse.reader import compile_patterns, parse_file_runs
from dlscale.logparse.runs import LogError, ParsedLog


def table(parsed: ParsedLog, meta: dict):
    """One row per finished epoch, made as they are asked for; a benchmark's run
    (throughput, no epochs) is one row with logged_images_per_s and empty epoch columns."""
    extra = parsed.rate_columns(meta.get("gpus"))
    if parsed.epochs:
        logged_rows = parsed.iter_rows()
    else:
        logged_rows = [dict.fromkeys(("epoch", "seconds", "loss", "accuracy"))] if extra else []
    head = {**meta, "file": parsed.path, **dict.fromkeys(EPOCH_METRICS)}
    tail = {"cut": parsed.cut, "streams": parsed.streams, **parsed.test, **parsed.facts,
            **extra}
    for logged in logged_rows:
        row = {**head, **logged, **tail}
        row.pop("seconds_resolution", None)
        yield row


def table_names(parsed: ParsedLog, meta: dict) -> set[str]:
    """Every column `table` may give the run's rows."""
    names = {*meta, "file", *EPOCH_METRICS, "epoch", *parsed.epochs.columns, "cut",
             "streams", *parsed.test, *parsed.facts}
    if parsed.rate is not None:
        names |= {*parsed.rate_columns(1), "seconds"}
    return names - {"seconds_resolution"}


def log_runs(path, meta: dict, per_run: list[dict] | None, patterns: dict,
             cache: str | None = None) -> tuple[set[str], Iterable[dict]]:
    """(the columns, the rows) of a log holding one or more runs, each with its `log_run`
    number, the settings the log states and, over them, the values given per run; the
    rows are made as they are written. `cache`: the folder where planning kept its parse
    of the log (reader.parse_file_runs)."""
    if per_run is not None and len(per_run) == 1 and per_run[0].get("failed"):
        # planning found no finished epoch: one row that says so (summarize_runs lists it)
        failed = per_run[0]
        print(f"{path}: no finished epoch: a failed run", file=sys.stderr)
        row = {**meta, **{k: v for k, v in failed.items() if k in ("gpus", "global_batch")},
               "file": str(path), "log_run": 1, "status": Status.FAILED.value,
               "failure": failed["failed"],
               **dict.fromkeys(("epoch", "seconds", "loss", "accuracy"))}
        return set(row), [row]
    runs = parse_file_runs(path, patterns, cache)
    if per_run is not None and len(per_run) != len(runs):
        raise ValueError(f"{path} holds {len(runs)} run(s) but {len(per_run)} were planned: "
                         "the file changed since; run the workflow again")
    print(f"{path}: {len(runs)} run(s)" + "".join(
        f"\n  run {i}: line {r.line}, "
        + (f"{len(r.epochs)} epoch(s)" if r.epochs or r.rate is None
           else f"a benchmark's total of {r.rate} images/s" if r.unit == "images"
           else f"{r.rate:g} tokens/s" + (" per GPU" if r.per_gpu else " in all")
           + (f" over {r.facts['steps_done']} steps" if "steps_done" in r.facts else ""))
        + (f" from {r.streams} workers' lines" if r.streams > 1 else "")
        + (f", states {r.settings}" if r.settings else "") for i, r in enumerate(runs, 1)))
    names, rows, said = set(), [], set()
    for index, run in enumerate(runs):
        for warning in dict.fromkeys(run.warnings):  # each once, however many runs say it
            if warning not in said:
                said.add(warning)
                print(f"warning: {warning}", file=sys.stderr)
        warn_cut(run)
        stated = {k: v for k, v in run.settings.items() if k in ("gpus", "global_batch")}
        if "global_batch" not in stated and {"gpus", "batch_per_gpu"} <= set(run.settings):
            stated["global_batch"] = run.settings["gpus"] * run.settings["batch_per_gpu"]
        given = {k: v for k, v in (per_run[index] if per_run else {}).items() if k != "line"}
        run_meta = {**meta, **stated, **given, "log_run": index + 1}
        if "gpus" in run.settings:
            run_meta["gpus_logged"] = run.settings["gpus"]
        if len(runs) > 1:
            run_meta["run"] = f"{meta.get('run', path)}/run{index + 1}"
        names |= table_names(run, run_meta)
        rows.append(table(run, run_meta))
    return names, itertools.chain.from_iterable(rows)


class Counted:
    """An iterable that counts what it gave."""

    def __init__(self, items: Iterable):
        self.items, self.count = items, 0

    def __iter__(self):
        for item in self.items:
            self.count += 1
            yield item


def warn_cut(parsed: ParsedLog) -> None:
    if parsed.cut:
        print(f"warning: {parsed.path} (run from line {parsed.line}) was cut inside epoch "
              f"{parsed.cut_epoch}: keeping the {len(parsed.epochs)} finished epoch(s)",
              file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", help="training output (train.log, *.out)")
    parser.add_argument("-o", "--out", required=True, type=Path, help="CSV to write")
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                        help="a column with a constant value (repeatable)")
    parser.add_argument("--per-run", metavar="JSON",
                        help="a JSON list with one object of column values per run of the log")
    parser.add_argument("--pattern", action="append", default=[], metavar="KEY=REGEX",
                        help="a setting stated in the log, as a regex with one group "
                             "(repeatable): e.g. gpus='Running on (\\d+) GPUs'")
    parser.add_argument("--cache", metavar="DIR",
                        help="a folder where the parse of each log is kept and read back "
                             "while the log is unchanged (the workflow's planning fills it)")
    args = parser.parse_args(argv)
    if args.per_run and len(args.logs) != 1:
        parser.error("--per-run goes with exactly one log")
    try:
        per_run = json.loads(args.per_run) if args.per_run else None
    except ValueError as exc:
        per_run, problem = None, f"is not JSON ({exc})"
    else:
        problem = None if per_run is None or isinstance(per_run, list) and all(
            isinstance(item, dict) for item in per_run) else "is not a list of objects"
    if problem:
        parser.error(f"--per-run {args.per_run!r} {problem}: expected a JSON list with one "
                     'object per run, e.g. \'[{"gpus": 1}, {"gpus": 2}]\'')
    if args.out.is_dir():
        parser.error(f"-o {args.out} is a folder: expected the CSV file to write")
    for log in args.logs:
        if args.out.exists() and Path(log).exists() and args.out.samefile(log):
            parser.error(f"-o {args.out} is the log {log}: writing the table there would "
                         "replace the log; name another file")
    try:
        meta = parse_meta(args.meta)
        patterns = compile_patterns(parse_meta(args.pattern, "--pattern"), "--pattern")
        names, rows = set(), []
        for path in args.logs:
            found, made = log_runs(path, meta, per_run, patterns, args.cache)
            names |= found
            rows.append(made)
    except (LogError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    counted = Counted(itertools.chain.from_iterable(rows))
    write_rows(counted, args.out, names)
    print(f"wrote {args.out}: {counted.count} row(s) from {len(args.logs)} log(s)")
    return 0

