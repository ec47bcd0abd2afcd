"""Names and defaults that several parts of dlscale share, written once.

Importing this module is cheap (no pandas, no TensorFlow): argparse, the rules, the
analysis and the plots read from here.
"""

from __future__ import annotations

# every per-run table has these columns (parse_logs.py writes them; a run that failed
# before its first epoch has one row with them empty); aggregation needs them
EPOCH_COLUMNS = ("model", "gpus", "epoch", "seconds", "loss", "accuracy", "images_per_epoch")
