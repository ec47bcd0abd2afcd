"""The `dlscale` command (pyproject's entry point): a study's status while it runs, the
results history, and the stage tools users call by hand.

  dlscale status [DIR] [--json]        one line per planned point of the study in DIR
  dlscale history [--db PATH] [--model M] [--system S] [--gpus N] [--since D] [--until D]
  dlscale parse-log LOG... -o CSV      Keras output -> a table with one row per epoch
  dlscale compare SCALING --compare LABEL=PATH -o CSV     studies side by side

The study itself runs with Snakemake (`snakemake --profile profiles/slurm all`).
"""

from __future__ import annotations

import argparse
import sys


def history_command(argv: list[str]) -> int:
    from dlscale.core.schema import default
    from dlscale.reporting import history

    parser = argparse.ArgumentParser(prog="dlscale history",
                                     description="List the results history's points, "
                                     "oldest first.")
    parser.add_argument("--db", default=default("history", "path"),
                        help="the history database (default: %(default)s)")
    parser.add_argument("--model", help="a model or series")
    parser.add_argument("--system", help="a part of the system's name")
    parser.add_argument("--gpus", type=int)
    parser.add_argument("--since", metavar="DATE", help="studies from this date (YYYY-MM-DD)")
    parser.add_argument("--until", metavar="DATE", help="studies up to this date")
    parser.add_argument("--csv", action="store_true", help="CSV instead of a text table")
    args = parser.parse_args(argv)
    try:
        rows = history.listing(args.db, args.model, args.system, args.gpus, args.since,
                               args.until)
    except history.HistoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import pandas as pd

    table = pd.DataFrame(rows, columns=["study", "finished", "git_commit", "system", "series",
                                        "nodes", "gpus", "global_batch", "epoch_time_s",
                                        "images_per_s", "efficiency", "test_accuracy"])
    if args.csv:
        table.to_csv(sys.stdout, index=False, float_format="%.6g")
    elif table.empty:
        print("no point matches")
    else:
        table["git_commit"] = table["git_commit"].str[:8]
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


def status_command(argv: list[str]) -> int:
    from dlscale.reporting import status

    parser = argparse.ArgumentParser(prog="dlscale status", description=status.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", default=".",
                        help="the study's working directory (default: .)")
    parser.add_argument("--json", action="store_true", help="JSON instead of text")
    args = parser.parse_args(argv)
    return status.main(args.folder, args.json)


def parse_log_command(argv: list[str]) -> int:
    from dlscale.reporting.logtable import main

    return main(argv)


def compare_command(argv: list[str]) -> int:
    from dlscale.reporting.compare import main

    return main(argv)


COMMANDS = {"status": status_command, "history": history_command,
            "parse-log": parse_log_command, "compare": compare_command}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command '{name}': expected one of {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    return COMMANDS[name](rest)


if __name__ == "__main__":
    sys.exit(main())
