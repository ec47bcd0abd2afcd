#!/usr/bin/env python3
"""Turn Keras training output into a table with one row per epoch.

  parse_logs.py ResNet50_1gpu.out ResNet50_2gpu.out -o epochs.csv

Reads any Keras version's verbose=2 lines and verbose=1 progress bars (see
dlscale/keraslog.py); other output is ignored. A log that ends inside an epoch gives
its finished epochs and a warning; a file without any finished epoch is an error.

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dlscale.files import atomic  # noqa: E402
from dlscale.keraslog import LogError, ParsedLog, parse_file  # noqa: E402
from dlscale.training import read_records  # noqa: E402
from dlscale.vocabulary import EPOCH_COLUMNS  # noqa: E402

FIRST_COLUMNS = ["run", "source", "series", "model", "gpus", "nodes", "strategy", "precision",
                 "repeat", "global_batch", "images_per_epoch", "status", "file", "epoch",
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
               "test_accuracy": "test_accuracy", "host": "host"}


def run_metadata(run: dict, path) -> dict:
    if "status" not in run:
        raise ValueError(f"{path} lacks the key status: expected a run.json written by "
                         "train.py or launch.py")
    meta = {column: run[key] for column, key in RUN_COLUMNS.items()
            if run.get(key) is not None}
    meta["slurm_job_id"] = (run.get("env") or {}).get("SLURM_JOB_ID")
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


def has_epoch(path) -> bool:
    try:
        return bool(parse_file(path).epochs)
    except LogError:
        return False


def parse_meta(items: list[str]) -> dict:
    meta = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--meta takes KEY=VALUE, got '{item}'")
        meta[key] = value
    return meta


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", help="Keras training output (train.log, *.out)")
    parser.add_argument("-o", "--out", required=True, type=Path, help="CSV to write")
    parser.add_argument("--records", type=Path, help="epochs.jsonl to cross-check (one log)")
    parser.add_argument("--run-json", type=Path, help="run.json whose settings become columns")
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                        help="a column with a constant value (repeatable)")
    args = parser.parse_args(argv)
    if (args.records or args.run_json) and len(args.logs) != 1:
        parser.error("--records and --run-json go with exactly one log")
    try:
        meta = parse_meta(args.meta)
        if args.run_json:
            meta = {**meta, **run_metadata(json.loads(args.run_json.read_text()), args.run_json)}
        rows = []
        for path in args.logs:
            if meta.get("status", "completed") != "completed" and not has_epoch(path):
                # a run that failed before any epoch: one row, its epoch columns empty
                rows.append({**dict.fromkeys(EPOCH_COLUMNS), **meta, "file": path})
                continue
            parsed = parse_file(path)
            if parsed.cut:
                print(f"warning: {path} was cut inside epoch {parsed.cut_epoch}: "
                      f"keeping the {len(parsed.epochs)} finished epoch(s)", file=sys.stderr)
            records = None
            if args.records:
                records = check_records(read_records(args.records), args.records)
                try:
                    cross_check(parsed, records)
                except CrossCheckError as exc:
                    if meta.get("status", "completed") == "completed":
                        raise
                    # a run that failed anyway: list it, with the epochs both agree on
                    print(f"warning: {exc}; keeping the epochs both have", file=sys.stderr)
                    both = set(parsed.epochs) & {r["epoch"] for r in records}
                    parsed.epochs = {k: v for k, v in parsed.epochs.items() if k in both}
            rows += table(parsed, meta, records)
    except (LogError, CrossCheckError, ValueError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_csv(rows, args.out)
    print(f"wrote {args.out}: {len(rows)} epoch(s) from {len(args.logs)} log(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
