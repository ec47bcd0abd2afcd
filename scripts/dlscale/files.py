"""Writing outputs so that a reader never sees half a file."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic(path: str | Path):
    """Yield a temporary path beside `path` to write to; it replaces `path` only when the
    block ends without an error, and is removed otherwise. The temporary name keeps the
    suffix, so tools that choose a format by it (matplotlib, pandas) still do."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: str | Path, data) -> None:
    with atomic(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n")
