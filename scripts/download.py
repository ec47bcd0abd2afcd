#!/usr/bin/env python3
"""Download one file and check its md5 before it is kept.

Example:
  download.py https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz \\
      --md5 c58f30108f718f92721af3b95e74349a -o resources/downloads/cifar10/cifar-10-python.tar.gz

The file is written under a temporary name and renamed only once the checksum
matches, so an interrupted or corrupt download never looks like a finished one.
Local paths and file:// URLs are accepted too (a pre-staged copy on a shared disk).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

from dlscale.core.cli import fail
from dlscale.core.files import atomic
from dlscale.data.datasets import DatasetError
from dlscale.data.sources import md5sum, verify_md5


def download(url: str, out: Path, md5: str | None, timeout: float = 60.0) -> str:
    """Fetch `url` to `out`; return its md5. Nothing is left at `out` on failure."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic(out) as tmp:
        if "://" not in url:
            shutil.copyfile(url, tmp)
        else:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as f:
                    shutil.copyfileobj(response, f, length=1 << 20)
            except (urllib.error.URLError, OSError) as exc:
                raise DatasetError(f"download of {url} failed: {exc}") from exc
        return verify_md5(tmp, md5) if md5 else md5sum(tmp)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="http(s)/file URL or local path")
    parser.add_argument("-o", "--out", required=True, type=Path, help="where to keep the file")
    parser.add_argument("--md5", help="expected md5; without it the sum is only reported")
    args = parser.parse_args(argv)
    try:
        digest = download(args.url, args.out, args.md5)
    except (DatasetError, FileNotFoundError) as exc:
        fail(str(exc))
    note = "verified" if args.md5 else "not verified: no expected md5 given"
    print(f"{args.out}: md5 {digest} ({note})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
