"""Writing outputs so that a reader never sees half a file; stdout copied to a log."""

from __future__ import annotations

import csv
import json
import os
import secrets
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic(path: str | Path):
    """Yield a temporary path beside `path` to write to; it replaces `path` only when the
    block ends without an error, and is removed otherwise. The temporary name keeps the
    suffix, so tools that choose a format by it (matplotlib, pandas) still do. The new
    content is on disk before it takes the old one's name, so a node losing power right
    after cannot leave an empty file where the old one was. The temporary file is this
    writer's own, created exclusively (claim_temporary): two writers of one file (two
    Snakemake starts recording a folder's listing) never publish each other's
    half-written bytes. The folder is synced after the rename, so that the new name
    survives a crash too (a run.json that a rerun reads as the point's outcome)."""
    path = Path(path)
    tmp = claim_temporary(path)
    try:
        yield tmp
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        sync_folder(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def sync_folder(folder: Path) -> None:
    """fsync a folder (its entries: a rename into it); where the file system cannot sync
    a folder (some network file systems refuse), the rename stands as it is."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def claim_temporary(path: Path) -> Path:
    """A new empty file beside `path`, created exclusively (O_EXCL): `.name.tmp.suffix`,
    or, while another writer holds that name (or a killed one left it behind), a name
    with this process's id and a random part. Its writer owns it: it may be rewritten
    in place or replaced (link_or_copy), never shared."""
    name = path.with_name(f".{path.stem}.tmp{path.suffix}")
    while True:
        try:
            os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return name
        except FileExistsError:
            name = path.with_name(f".{path.stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
                                  f"{path.suffix}")


def link_or_copy(source: str | Path, target: str | Path) -> None:
    """`target` as a second name of `source` (a hard link: one copy on disk, however large),
    or a copy where the file system has no hard links. Neither file may then be written
    in place: replaced whole (atomic), removed, or first made its own (`unshare`)."""
    target = Path(target)
    try:
        try:
            os.link(source, target)
        except FileExistsError:  # a temporary file claimed for it: the link takes its place
            spare = target.with_name(f"{target.name}.{secrets.token_hex(4)}.link")
            os.link(source, spare)
            os.replace(spare, target)
    except OSError:
        shutil.copyfile(source, target)


def unshare(path: str | Path) -> None:
    """Make `path` a file of its own before it is appended to, if it has other names
    (link_or_copy): the others keep what they held."""
    path = Path(path)
    try:
        if path.stat().st_nlink < 2:
            return
    except FileNotFoundError:
        return
    with atomic(path) as tmp:
        shutil.copyfile(path, tmp)


def write_json_atomic(path: str | Path, data) -> None:
    with atomic(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n")


def write_jsonl_atomic(path: str | Path, items) -> None:
    """JSON lines replacing `path` whole: a kill while writing leaves the old file."""
    with atomic(path) as tmp:
        tmp.write_text("".join(json.dumps(item) + "\n" for item in items))


def read_jsonl(path: str | Path, after_a_bad_line: str = "stop") -> list:
    """The objects of a JSON-lines file ([] if it is missing). A line that does not
    parse (cut by a kill) ends the reading ("stop": what follows is not trusted) or is
    passed over ("skip": each line stands alone)."""
    path = Path(path)
    if not path.is_file():
        return []
    items = []
    for line in path.read_bytes().splitlines():
        try:
            items.append(json.loads(line))  # bytes: UTF-8, and a bad byte is a bad line
        except ValueError:  # JSONDecodeError and UnicodeDecodeError
            if after_a_bad_line == "stop":
                break
    return items


def jsonl_problem(path: str | Path) -> str | None:
    """What makes a JSON-lines file untrustworthy (a cut or unreadable line, with its
    number), or None; a missing file has none."""
    path = Path(path)
    if not path.is_file():
        return None
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        try:
            json.loads(line)
        except ValueError:
            return f"{path.name} line {number} is not a JSON object (cut or damaged)"
    return None


def append_jsonl(path: str | Path, item) -> None:
    """One JSON line, on disk before this returns (a kill right after keeps it)."""
    with open(path, "a") as handle:
        handle.write(json.dumps(item) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def write_table(table, path: str | Path) -> None:
    """A pandas table as CSV (6 significant digits), whole or not at all."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic(path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.6g")


# the leading columns of a per-run table, in this order; any others follow, sorted
RUN_TABLE_FIRST = ["run", "source", "series", "model", "gpus", "nodes", "strategy", "precision",
                   "repeat", "global_batch", "images_per_epoch", "status", "log_check", "file",
                   "log_run", "epoch", "epochs_total", "steps", "samples", "seconds",
                   "seconds_log", "loss", "accuracy", "lr", "cut"]


def write_rows(rows, path: str | Path, names: set[str] | None = None) -> None:
    """Dicts as a CSV table (a per-run table's columns first), whole or not at all. With
    `names`, every key the rows may hold, `rows` may be any iterable (a generator: the
    rows of a long log are written as they are made, never all in memory)."""
    if names is None:
        rows = list(rows)
        names = {k for r in rows for k in r}
    columns = [c for c in RUN_TABLE_FIRST if c in names]
    columns += sorted(names - set(columns))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)


class Tee:
    """Copies what Keras prints to stdout into train.log as well (see tee_stdout)."""

    def __init__(self, stream, file):
        self.stream, self.file = stream, file

    def write(self, text):
        self.stream.write(text)
        self.file.write(text)
        return len(text)

    def flush(self):
        self.stream.flush()
        self.file.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


@contextmanager
def tee_stdout(path: Path):
    """stdout goes to `path` too while the block runs; then the file is closed and
    sys.stdout is what it was."""
    original = sys.stdout
    with open(path, "a", buffering=1) as file:
        sys.stdout = Tee(original, file)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stdout = original
