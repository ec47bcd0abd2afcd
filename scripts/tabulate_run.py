#!/usr/bin/env python3
"""One dlscale run folder as a per-epoch table (the workflow's per-run step).

  tabulate_run.py results/runs/ResNet50V2/gpus1/rep1 \
      -o results/runs/ResNet50V2/gpus1/rep1/epochs.csv --meta series=ResNet50V2

The rows come from the run's records, run.json and epochs.jsonl; train.log is parsed
only as a cross-check, whose result is the `log_check` column ("ok", or what differs)
and a warning here. A run.json that cannot be read is one failed row naming it, and an
attempt line, so the next run of the workflow trains the point again. A run that
ended before its first epoch is one row with empty epoch columns. --meta KEY=VALUE adds
the planned values as columns (the record's replace them).
Logs of runs dlscale did not make: parse_logs.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlscale.core.cli import parse_meta
from dlscale.core.contract import RecordError
from dlscale.core.files import write_rows
from dlscale.reporting.runtable import OK, RunTableError, run_rows, unreadable_record_rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="the run folder (run.json, epochs.jsonl)")
    parser.add_argument("-o", "--out", required=True, type=Path, help="CSV to write")
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                        help="a column with a constant value (repeatable)")
    args = parser.parse_args(argv)
    try:
        meta = parse_meta(args.meta)
        try:
            rows, check = run_rows(args.run_dir, meta)
        except (RecordError, RunTableError) as exc:  # a damaged record: a failed row
            print(f"warning: {exc}: listed as failed, trained again at the next run",
                  file=sys.stderr)
            rows, check = unreadable_record_rows(args.run_dir, meta, str(exc)), OK
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if check != OK:
        print(f"warning: {args.run_dir}: train.log does not match the records ({check}); "
              "the tables use the records", file=sys.stderr)
    write_rows(rows, args.out)
    print(f"wrote {args.out}: {len(rows)} row(s), log check: {check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
