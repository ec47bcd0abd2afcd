"""The results history: every study's points in one SQLite database, across studies,
software upgrades and systems (config `history`).

At the end of a study (the `history` rule) its counted points are added with the study's
date, working directory, the workflow's git commit, the config, and per point the system
it ran on (GPU model, else CPU model, or `history.system`) with its description and
software versions. A point is identified by the runs it was measured from (each run's
host, start and run folder): a study whose tables are made again adds nothing twice.

The database is read and written in one transaction (BEGIN IMMEDIATE: a second study
ending at the same moment waits for the first, up to LOCK_TIMEOUT_S), so two studies
never lose each other's points. The layout has a version (PRAGMA user_version); a
database of an older version is upgraded in place by the steps in MIGRATIONS, one of a
newer dlscale is refused with a message.

`compare` (history.compare: N): the last N earlier studies that measured the same
series on the same system, as one table in the layout of compared.csv (a `study` column)
for the plots, and per point of this study the median epoch time of its history and a
verdict: fail when this study's epoch time exceeds that median by more than
history.tolerance, pass otherwise, none without history.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import statistics
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

LOCK_TIMEOUT_S = 120.0
SCHEMA_VERSION = 1
# what identifies a point across studies (with the system): a change of any is another point
POINT_KEYS = ("series", "model", "strategy", "precision", "nodes", "gpus", "global_batch")
POINT_VALUES = ("repeats", "epoch_time_s", "images_per_s", "speedup", "efficiency",
                "final_accuracy", "test_accuracy")
# step n upgrades a database of version n to n + 1 (version 0: a new, empty file); each
# step is a list of statements, run in the transaction that holds the database
MIGRATIONS = [[
    """CREATE TABLE studies (
        id INTEGER PRIMARY KEY,
        finished TEXT NOT NULL,       -- when the study's points were added (UTC, ISO 8601)
        workdir TEXT NOT NULL,        -- the study's working directory
        host TEXT,                    -- where the workflow ran
        git_commit TEXT,              -- the workflow's commit, when it is a git clone
        dlscale_version TEXT,
        config TEXT NOT NULL          -- the study's config, JSON
    )""",
    """CREATE TABLE points (
        id INTEGER PRIMARY KEY,
        study_id INTEGER NOT NULL REFERENCES studies(id),
        identity TEXT NOT NULL UNIQUE,  -- the runs it was measured from (see point_identity)
        system TEXT NOT NULL,
        series TEXT NOT NULL, model TEXT NOT NULL, strategy TEXT, precision TEXT,
        nodes INTEGER NOT NULL, gpus INTEGER NOT NULL, global_batch INTEGER,
        repeats INTEGER, epoch_time_s REAL, images_per_s REAL, speedup REAL,
        efficiency REAL, final_accuracy REAL, test_accuracy REAL,
        system_description TEXT,       -- JSON: dlscale.train.telemetry.describe_system's fields
        started TEXT                   -- the earliest run's start
    )""",
    "CREATE INDEX points_by_series ON points (series, system)",
]]


class HistoryError(ValueError):
    """The history database cannot be used; the message names the file and why."""


def connect(path: str | Path) -> sqlite3.Connection:
    """The database at `path` (created, or upgraded to SCHEMA_VERSION), in autocommit
    mode: callers open their transaction with BEGIN IMMEDIATE."""
    path = Path(path).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HistoryError(f"{path}: its folder cannot be made ({exc.strerror or exc})"
                           ) from None
    try:
        db = sqlite3.connect(path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("BEGIN IMMEDIATE")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            db.execute("ROLLBACK")
            db.close()
            raise HistoryError(f"{path}: history layout version {version} was written by a "
                               f"newer dlscale (this one reads up to {SCHEMA_VERSION})")
        tables = [row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        if version == 0 and tables:  # another program's database: never write into it
            db.execute("ROLLBACK")
            db.close()
            raise HistoryError(f"{path}: an SQLite database of another program (tables "
                               f"{', '.join(tables[:5])}{', ...' if len(tables) > 5 else ''})"
                               ": expected a dlscale history or a new file; set history.path "
                               "to another file")
        for step in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[step]:
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: {exc} (expected a dlscale history, SQLite)") from None
    return db


def connect_read(path: str | Path) -> sqlite3.Connection:
    """The database at `path` opened read-only (SQLite's mode=ro): no lock is taken for
    writing, nothing is created or upgraded, so a history others share with you read-only
    lists. HistoryError for a file that is not a dlscale history of a version this one
    reads."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise HistoryError(f"{path}: no history yet (it is written at the end of a study "
                           "with `history.path` set)")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                             timeout=LOCK_TIMEOUT_S)
        db.row_factory = sqlite3.Row
        version = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: {exc} (expected a dlscale history, SQLite)") from None
    if version != SCHEMA_VERSION:
        db.close()
        if version > SCHEMA_VERSION:
            raise HistoryError(f"{path}: history layout version {version} was written by a "
                               f"newer dlscale (this one reads up to {SCHEMA_VERSION})")
        raise HistoryError(f"{path}: not a dlscale history (SQLite without its tables, "
                           f"layout version {version}); a study with history.path set to it "
                           "makes it one")
    return db


def point_identity(runs: list[dict]) -> str:
    """A point's identity: the digest of its runs' (host, start, folder). The folder is
    the run folder's absolute path (so two studies started together from two working
    directories are two points); histories written before that hold the folder relative
    to results/runs (`legacy_identity`), which `add` recognises too."""
    keys = sorted(json.dumps([r.get("host"), r.get("started"), r.get("folder")]) for r in runs)
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()


def system_of(description: dict, name: str | None = None) -> str:
    """The system a point ran on: `name` (history.system), else the GPU model, else the
    CPU model with 'CPU: ' before it."""
    if name:
        return name
    if description.get("gpu_model"):
        return str(description["gpu_model"])
    return f"CPU: {description.get('cpu_model') or 'unknown'}"


def add_and_compare(path: str | Path, study: dict, points: list[dict], compare: int,
                    tolerance: float) -> tuple[int, list[dict], list[dict]]:
    """Add the study's new points; return (points added, the earlier studies' points to
    compare with, one verdict row per point of this study). Reading and adding are one
    transaction, so the comparison is with what was there before this study."""
    with closing(connect(path)) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            history = earlier(db, points, compare)
            added = add(db, study, points)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return added, history, verdicts(points, history, tolerance)


def add(db: sqlite3.Connection, study: dict, points: list[dict]) -> int:
    known = recorded(db, points)
    new = [p for p in points if not identities(p) & known]
    if not new:
        return 0
    study_id = db.execute(
        "INSERT INTO studies (finished, workdir, host, git_commit, dlscale_version, config) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (study.get("finished") or datetime.now(UTC).isoformat(timespec="seconds"),
         study["workdir"], study.get("host"), study.get("git_commit"),
         study.get("dlscale_version"), json.dumps(study.get("config", {}), sort_keys=True)),
    ).lastrowid
    columns = ("study_id", "identity", "system", *POINT_KEYS, *POINT_VALUES,
               "system_description", "started")
    db.executemany(
        f"INSERT INTO points ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        [(study_id, p["identity"], p["system"], *(p.get(k) for k in POINT_KEYS),
          *(p.get(k) for k in POINT_VALUES), json.dumps(p.get("system_description") or {}),
          p.get("started")) for p in new])
    return len(new)


def identities(point: dict) -> set[str]:
    return {point["identity"], *([point["legacy_identity"]] if point.get("legacy_identity")
                                 else [])}


def all_identities(points: list[dict]) -> list[str]:
    return sorted(set().union(*(identities(p) for p in points)))


def recorded(db: sqlite3.Connection, points: list[dict]) -> set[str]:
    """The identities of these points that the history holds already."""
    mine = all_identities(points)
    if not mine:
        return set()
    return {row[0] for row in db.execute(
        f"SELECT identity FROM points WHERE identity IN ({','.join('?' * len(mine))})", mine)}


def earlier(db: sqlite3.Connection, points: list[dict], compare: int) -> list[dict]:
    """The points of the last `compare` studies recorded before this one that measured
    one of these series on the same system. A study recorded again (its tables made
    again) is compared with the studies recorded before its first recording, never with
    later ones: its verdicts do not change after the fact."""
    if compare <= 0 or not points:
        return []
    pairs = sorted({(p["series"], p["system"]) for p in points})
    mine = all_identities(points)
    marks = ",".join("?" * len(mine))
    first = db.execute(f"SELECT MIN(study_id) FROM points WHERE identity IN ({marks})",
                       mine).fetchone()[0]
    where = " OR ".join("(p.series = ? AND p.system = ?)" for _ in pairs)
    params = [v for pair in pairs for v in pair]
    before = "" if first is None else "AND s.id < ? "
    studies = [row[0] for row in db.execute(
        f"SELECT DISTINCT s.id FROM studies s JOIN points p ON p.study_id = s.id "
        f"WHERE ({where}) AND p.identity NOT IN ({marks}) {before}"
        f"ORDER BY s.finished DESC, s.id DESC LIMIT ?",
        [*params, *mine, *([first] if first is not None else []), compare])]
    if not studies:
        return []
    rows = db.execute(
        f"SELECT p.*, s.finished AS study_finished FROM points p JOIN studies s "
        f"ON p.study_id = s.id WHERE p.study_id IN ({','.join('?' * len(studies))}) "
        f"AND ({where}) ORDER BY s.finished, s.id", [*studies, *params])
    return [dict(row) for row in rows]


def same_point(a: dict, b: dict) -> bool:
    return a["system"] == b["system"] and all(a.get(k) == b.get(k) for k in POINT_KEYS)


def verdicts(points: list[dict], history: list[dict], tolerance: float) -> list[dict]:
    """Per point: its epoch time against the median of the same point in `history`."""
    rows = []
    for p in points:
        before = [h["epoch_time_s"] for h in history
                  if same_point(p, h) and h["epoch_time_s"] is not None]
        median = statistics.median(before) if before else None
        change = (p["epoch_time_s"] / median - 1 if median and p["epoch_time_s"] is not None
                  else None)
        verdict = "none" if change is None else "fail" if change > tolerance else "pass"
        rows.append({**{k: p.get(k) for k in ("series", "nodes", "gpus", "global_batch")},
                     "system": p["system"], "epoch_time_s": p["epoch_time_s"],
                     "history_median_s": median, "history_points": len(before),
                     "change": change, "tolerance": tolerance, "verdict": verdict})
    return rows


def study_label(row: dict) -> str:
    """How an earlier study is named in the plots: its date and number."""
    return f"{row['study_finished'][:16].replace('T', ' ')} (#{row['study_id']})"


def iso_date(text: str | None, name: str) -> str | None:
    """An ISO date (2026-11-25) as given; HistoryError naming anything else."""
    if text is None:
        return None
    from datetime import date

    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise HistoryError(f"{name} '{text}': expected a date as YYYY-MM-DD, e.g. "
                           "2026-11-25") from None


def listing(path: str | Path, model: str | None = None, system: str | None = None,
            gpus: int | None = None, since: str | None = None,
            until: str | None = None) -> list[dict]:
    """The history's points, oldest first, filtered (system: a part of its name; since
    and until: ISO dates, inclusive)."""
    since, until = iso_date(since, "--since"), iso_date(until, "--until")
    clauses, params = [], []
    if model:
        clauses.append("(p.model = ? OR p.series = ?)")
        params += [model, model]
    if system:
        clauses.append("p.system LIKE ?")
        params.append(f"%{system}%")
    if gpus:
        clauses.append("p.gpus = ?")
        params.append(gpus)
    if since:
        clauses.append("s.finished >= ?")
        params.append(since)
    if until:
        clauses.append("substr(s.finished, 1, 10) <= ?")
        params.append(until)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    with closing(connect_read(path)) as db:
        return [dict(row) for row in db.execute(
            f"SELECT s.id AS study, s.finished, s.git_commit, p.system, p.series, p.nodes, "
            f"p.gpus, p.global_batch, p.epoch_time_s, p.images_per_s, p.efficiency, "
            f"p.test_accuracy FROM points p JOIN studies s ON p.study_id = s.id {where} "
            f"ORDER BY s.finished, s.id, p.series, p.nodes, p.gpus", params)]


# --- a study's points, from its tables and run records -----------------------------------
INTEGER_KEYS = ("nodes", "gpus", "global_batch", "repeats")
VERDICT_COLUMNS = ["series", "nodes", "gpus", "global_batch", "system", "epoch_time_s",
                   "history_median_s", "history_points", "change", "tolerance", "verdict"]


def _plain(key: str, value):
    """A table cell as SQLite stores it: None for empty, int or float or str."""
    import pandas as pd

    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if key in INTEGER_KEYS:
        return int(value)
    return value if isinstance(value, str) else float(value)


def study_points(scaling, runs, runs_dir: Path, system_name: str | None = None) -> list[dict]:
    """The points of a study's scaling table measured by dlscale's own runs (external
    logs are other studies'), each with its identity, system and description."""
    from dlscale.core.contract import RUN_JSON, RunRecord

    counted = runs[runs["counted"].astype(str).str.lower().isin(["true", "1"])
                   & (runs["source"] == "dlscale")]
    points = []
    for _, row in scaling.iterrows():
        mine = counted[(counted["series"] == row["series"]) & (counted["nodes"] == row["nodes"])
                       & (counted["gpus"] == row["gpus"])]
        records = [RunRecord.read(runs_dir / run / RUN_JSON) for run in mine["run"]]
        if not records:
            continue
        description = records[0].get("system") or {}
        runs_of = [{"host": r.get("host"), "started": r.get("started"), "folder": run}
                   for r, run in zip(records, mine["run"])]
        absolute = [{**r, "folder": str((runs_dir / r["folder"]).resolve())} for r in runs_of]
        points.append({**{k: _plain(k, row.get(k)) for k in (*POINT_KEYS, *POINT_VALUES)},
                       "identity": point_identity(absolute),
                       "legacy_identity": point_identity(runs_of),
                       "system": system_of(description, system_name),
                       "system_description": description,
                       "started": min(str(r.get("started")) for r in records)})
    return points


def compared_table(history: list[dict]):
    """The earlier studies' points in compared.csv's layout (a `study` column)."""
    import pandas as pd

    from dlscale.core.vocabulary import COMPARED_COLUMNS

    rows = [{"study": study_label(h), **{c: h.get(c) for c in COMPARED_COLUMNS}}
            for h in history]
    return pd.DataFrame(rows, columns=["study", *COMPARED_COLUMNS])
