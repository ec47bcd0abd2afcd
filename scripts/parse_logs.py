#!/usr/bin/env python3
"""Turn Keras training output into a table with one row per epoch.

  parse_logs.py ResNet50_all.out -o epochs.csv \
      --per-run '[{"gpus": 1, "global_batch": 256}, {"gpus": 2, "global_batch": 512}, ...]'

Reads any Keras version's verbose=2 lines and verbose=1 progress bars (see
dlscale/keraslog.py); other output is ignored. A file may hold several runs (a job that
ran the script once per GPU count): each gets its `log_run` number (1, 2, ...) and the
settings the log states (gpus, global batch), and the script says how many runs each
file held. A run that ends inside an epoch gives its finished epochs and a warning; a
file without any finished epoch is an error.

For a dlscale run folder, --records cross-checks the log against epochs.jsonl (same
epochs, seconds within the log's rounding) and takes the precise seconds from it;
--run-json and --meta KEY=VALUE add the run's settings as columns, which the
aggregation step groups by.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from dlscale.files import atomic
from dlscale.keraslog import (LogError, ParsedLog, compile_patterns, parse_file,
                              parse_file_runs)
from dlscale.training import read_records
from dlscale.vocabulary import EPOCH_COLUMNS, SYSTEM_FIELDS, TELEMETRY_FIELDS

FIRST_COLUMNS = ["run", "source", "series", "model", "gpus", "nodes", "strategy", "precision",
                 "repeat", "global_batch", "images_per_epoch", "status", "file", "log_run",
                 "epoch",
                 "epochs_total", "steps", "samples", "seconds", "seconds_log", "loss",
                 "accuracy", "lr", "cut"]


class CrossCheckError(ValueError):
    pass


def cross_check(parsed: ParsedLog, records: list[dict]) -> None:
    """Raise CrossCheckError unless the log and the records tell the same story."""
    log_epochs, rec_epochs = set(parsed.epochs), {r["epoch"] for r in records}
    if log_epochs != rec_epochs:
        raise CrossCheckError(
            f"{parsed.path}: the log has epochs {sorted(log_epochs)} but the records have "
            f"{sorted(rec_epochs)}")
    for record in records:
        logged = parsed.epochs[record["epoch"]]
        tolerance = logged["seconds_resolution"] + 0.25 + 0.05 * record["seconds"]
        if abs(logged["seconds"] - record["seconds"]) > tolerance:
            raise CrossCheckError(
                f"{parsed.path}: epoch {record['epoch']} took {logged['seconds']:g} s in the "
                f"log but {record['seconds']:g} s in the records (tolerance {tolerance:.2f} s)")


# column <- run.json key; a record of a run that failed early may lack most of them, and
# then the planned values given with --meta stand
RUN_COLUMNS = {"model": "model", "gpus": "replicas", "gpus_asked": "gpus_asked",
               "nodes": "nodes", "strategy": "strategy", "precision": "precision",
               "global_batch": "global_batch", "images_per_epoch": "images_per_epoch",
               "epochs_expected": "epochs", "status": "status", "failure": "failure",
               "test_accuracy": "test_accuracy", "host": "host", "image_size": "image_size",
               "resize": "resize"}


def run_metadata(run: dict, path) -> dict:
    if "status" not in run:
        raise ValueError(f"{path} lacks the key status: expected a run.json written by "
                         "train.py or launch.py")
    meta = {column: run[key] for column, key in RUN_COLUMNS.items()
            if run.get(key) is not None}
    meta["slurm_job_id"] = (run.get("env") or {}).get("SLURM_JOB_ID")
    system = run.get("system") or {}
    for name in SYSTEM_FIELDS:
        value = system.get(name)
        if value not in (None, [], ""):
            meta[f"system_{name}"] = ":".join(value) if isinstance(value, list) else value
    if run.get("synthetic_images_per_s"):
        meta["synthetic_images_per_s"] = run["synthetic_images_per_s"]
    return meta


def check_records(records: list[dict], path) -> list[dict]:
    for number, record in enumerate(records, 1):
        missing = [k for k in ("epoch", "seconds") if k not in record]
        if missing:
            raise ValueError(f"{path}: record {number} lacks {', '.join(missing)}: expected "
                             "epochs.jsonl written by train.py")
    return records


def table(parsed: ParsedLog, meta: dict, records: list[dict] | None = None) -> list[dict]:
    by_epoch = {r["epoch"]: r for r in records or []}
    rows = []
    for logged in parsed.rows():
        row = {**meta, "file": parsed.path, **logged, "cut": parsed.cut}
        row.pop("seconds_resolution", None)
        row["seconds_log"] = logged["seconds"]
        if logged["epoch"] in by_epoch:
            precise = by_epoch[logged["epoch"]]
            row["seconds"] = precise["seconds"]
            row["lr"] = precise.get("lr")
            row.update({k: precise[k] for k in TELEMETRY_FIELDS if k in precise})
        rows.append(row)
    return rows


def write_csv(rows: list[dict], out: Path) -> None:
    columns = [c for c in FIRST_COLUMNS if any(c in r for r in rows)]
    columns += sorted({k for r in rows for k in r} - set(columns))
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic(out) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)


def parse_meta(items: list[str]) -> dict:
    meta = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--meta takes KEY=VALUE, got '{item}'")
        meta[key] = value
    return meta


def dlscale_run(path, meta: dict, records_path: Path | None) -> list[dict]:
    """The rows of a dlscale run folder's train.log: one run, cross-checked with its
    records; a failed run before any epoch is one row with empty epoch columns."""
    failed = meta.get("status", "completed") != "completed"
    try:
        parsed = parse_file(path)
    except LogError:
        if not failed:
            raise
        return [{**dict.fromkeys(EPOCH_COLUMNS), **meta, "file": path}]
    warn_cut(parsed)
    records = None
    if records_path:
        records = check_records(read_records(records_path), records_path)
        try:
            cross_check(parsed, records)
        except CrossCheckError as exc:
            if not failed:
                raise
            # a run that failed anyway: list it, with the epochs both agree on
            print(f"warning: {exc}; keeping the epochs both have", file=sys.stderr)
            both = set(parsed.epochs) & {r["epoch"] for r in records}
            parsed.epochs = {k: v for k, v in parsed.epochs.items() if k in both}
    return table(parsed, meta, records)


def log_runs(path, meta: dict, per_run: list[dict] | None, patterns: dict) -> list[dict]:
    """The rows of a log holding one or more runs, each with its `log_run` number, the
    settings the log states and, over them, the values given per run."""
    runs = parse_file_runs(path, patterns)
    if per_run is not None and len(per_run) != len(runs):
        raise ValueError(f"{path} holds {len(runs)} run(s) but {len(per_run)} were planned: "
                         "the file changed since; run the workflow again")
    print(f"{path}: {len(runs)} run(s)" + "".join(
        f"\n  run {i}: line {r.line}, {len(r.epochs)} epoch(s)"
        + (f", states {r.settings}" if r.settings else "") for i, r in enumerate(runs, 1)))
    rows = []
    for index, run in enumerate(runs):
        for warning in run.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        warn_cut(run)
        stated = {k: v for k, v in run.settings.items() if k in ("gpus", "global_batch")}
        if "global_batch" not in stated and {"gpus", "batch_per_gpu"} <= set(run.settings):
            stated["global_batch"] = run.settings["gpus"] * run.settings["batch_per_gpu"]
        given = {k: v for k, v in (per_run[index] if per_run else {}).items() if k != "line"}
        run_meta = {**meta, **stated, **given, "log_run": index + 1}
        if len(runs) > 1:
            run_meta["run"] = f"{meta.get('run', path)}/run{index + 1}"
        rows += table(run, run_meta)
    return rows


def warn_cut(parsed: ParsedLog) -> None:
    if parsed.cut:
        print(f"warning: {parsed.path} (run from line {parsed.line}) was cut inside epoch "
              f"{parsed.cut_epoch}: keeping the {len(parsed.epochs)} finished epoch(s)",
              file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", help="Keras training output (train.log, *.out)")
    parser.add_argument("-o", "--out", required=True, type=Path, help="CSV to write")
    parser.add_argument("--records", type=Path, help="epochs.jsonl to cross-check (one log)")
    parser.add_argument("--run-json", type=Path, help="run.json whose settings become columns")
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                        help="a column with a constant value (repeatable)")
    parser.add_argument("--per-run", metavar="JSON",
                        help="a JSON list with one object of column values per run of the log")
    parser.add_argument("--pattern", action="append", default=[], metavar="KEY=REGEX",
                        help="a setting stated in the log, as a regex with one group "
                             "(repeatable): e.g. gpus='Running on (\\d+) GPUs'")
    args = parser.parse_args(argv)
    if (args.records or args.run_json or args.per_run) and len(args.logs) != 1:
        parser.error("--records, --run-json and --per-run go with exactly one log")
    try:
        meta = parse_meta(args.meta)
        patterns = compile_patterns(parse_meta(args.pattern), "--pattern")
        per_run = json.loads(args.per_run) if args.per_run else None
        rows = []
        if args.run_json or args.records:  # a dlscale run folder: one run, checked
            if args.run_json:
                meta = {**meta, **run_metadata(json.loads(args.run_json.read_text()),
                                               args.run_json)}
            rows = dlscale_run(args.logs[0], meta, args.records)
        else:
            for path in args.logs:
                rows += log_runs(path, meta, per_run, patterns)
    except (LogError, CrossCheckError, ValueError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_csv(rows, args.out)
    print(f"wrote {args.out}: {len(rows)} row(s) from {len(args.logs)} log(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
