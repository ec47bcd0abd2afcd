#!/usr/bin/env python3
"""This study's scaling table beside other studies', in one table: `dlscale compare`,
as the workflow's rule runs it.

  compare_studies.py results/tables/scaling.csv --compare "2025 on V100=old/scaling.csv" \\
      -o results/tables/compared.csv

See dlscale/reporting/compare.py (or `dlscale compare --help`).
"""

from __future__ import annotations

import sys

from dlscale.reporting.compare import main

if __name__ == "__main__":
    sys.exit(main())
