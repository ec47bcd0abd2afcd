#!/usr/bin/env python3
"""Turn a training's output into a table with one row per epoch: `dlscale parse-log`,
as the workflow's rule and a clone without the installed command run it.

  parse_logs.py ResNet50_all.out -o epochs.csv

See dlscale/reporting/logtable.py (or `dlscale parse-log --help`).
"""

from __future__ import annotations

import sys

from dlscale.reporting.logtable import main, table  # noqa: F401 (table: the rows of one run)

if __name__ == "__main__":
    sys.exit(main())
