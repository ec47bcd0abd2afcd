#!/usr/bin/env python3
"""nccl-tests reading on long lines: planning reads every analysis.network output at each
Snakemake start, so one long line must not hang it.

  python bench/nccltests_lines.py [--mb 1 5 100] [--old-kb 10 20 40]

Puts one long line of rank-like words (`Rank 1 ` again and again, then `device`) before
and inside the table of the stored A3 Mega all_reduce_perf output and times
dlscale.logparse.nccltests.parse on it, for each size in --mb; then times the rank regex
the reader used before (`\\bRank\\s+(\\d+)\\b.*?\\bon\\s+(\\S+)\\s+device\\b`, searched over
the line) on --old-kb kilobytes, to show its time growing with the square of the length.
Prints one line per measurement: what, size, seconds, seconds per MB.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from dlscale.logparse import nccltests  # noqa: E402

OUTPUT = ROOT / "tests" / "data" / "nccl-tests" / "a3mega-2x8-h100-all_reduce_perf.markdown"
OLD_RANK = re.compile(r"\bRank\s+(\d+)\b.*?\bon\s+(\S+)\s+device\b")
JUNK = "Rank 1 "


def long_line(size: int) -> str:
    return JUNK * (size // len(JUNK)) + "device"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[1, 5, 100])
    parser.add_argument("--old-kb", type=float, nargs="+", default=[10, 20, 40])
    args = parser.parse_args(argv)
    text = OUTPUT.read_text()
    for mb in args.mb:
        line = long_line(int(mb * 1e6))
        doc = text.replace("#       size", line + "\n#       size").replace("#        (B)",
                                                                             line)
        start = time.perf_counter()
        result = nccltests.parse(doc, "bench")
        took = time.perf_counter() - start
        assert result.ranks == 16
        print(f"parse, two lines of {mb:g} MB: {took:.2f} s ({took / (2 * mb):.2f} s/MB)")
    for kb in args.old_kb:
        line = long_line(int(kb * 1e3))
        start = time.perf_counter()
        OLD_RANK.search(line)
        took = time.perf_counter() - start
        print(f"the old rank regex, one line of {kb:g} kB: {took:.2f} s "
              f"({took / (kb / 1e3):.1f} s/MB)")


if __name__ == "__main__":
    main()
