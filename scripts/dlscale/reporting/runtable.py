"""A dlscale run folder as a per-epoch table, from its structured records.

The rows come from run.json and epochs.jsonl (exact seconds, loss, accuracy, learning
rate, telemetry). train.log, what Keras printed, is parsed only as a cross-check: its
result is the `log_check` column ("ok", or what differs) and a warning, never an error
that drops a point. Keras' printed epoch time includes callback work at the epoch's
edges (the backup, telemetry, the time-limit guard) that the recorder's timer does not,
so on a busy machine the two differ by seconds (docs/analysis.md).
"""

from __future__ import annotations

from pathlib import Path

from dlscale.core.columns import EPOCH_KEYS, RECORD_KEYS
from dlscale.core.contract import (
    EPOCHS,
    NCCL_DEBUG_FILES,
    RUN_JSON,
    TRAIN_LOG,
    RunRecord,
    Status,
    append_attempt,
    read_epochs,
)
from dlscale.core.vocabulary import EPOCH_COLUMNS
from dlscale.jobs import slurm
from dlscale.launch.command import STRATEGY as COMMAND

OK = "ok"


class RunTableError(ValueError):
    """The run's records cannot be read; the message names the file and the problem."""


def record_columns(record: RunRecord) -> dict:
    """The per-run table's columns that run.json holds (columns.RECORD_KEYS: a dotted key
    is a member of one of its objects); a list is joined, the notes by '; '."""
    columns = {}
    for column, key in RECORD_KEYS.items():
        value = record
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None or value == [] or (value == "" and key.startswith("system.")):
            continue
        if isinstance(value, list):
            value = ("; " if column == "notes" else ":").join(map(str, value))
        columns[column] = value
    return columns


def nccl_columns(run_dir: Path) -> dict:
    """nccl_network and nccl_fallback from the NCCL_DEBUG files a GPU point over several
    nodes wrote in its run folder (dlscale.logparse.nccldebug); {} without any."""
    from dlscale.logparse import nccldebug

    texts = [p.read_text(errors="replace") for p in sorted(run_dir.glob(NCCL_DEBUG_FILES))]
    found = nccldebug.transport("\n".join(texts)) if texts else None
    if not found:
        return {}
    return {"nccl_network": found["network"],
            "nccl_fallback": found["infiniband"] if found["fell_back"] else None}


def check_epochs(epochs: list[dict], path) -> list[dict]:
    for number, epoch in enumerate(epochs, 1):
        missing = [k for k in ("epoch", "seconds") if k not in epoch]
        if missing:
            raise RunTableError(f"{path}: record {number} lacks {', '.join(missing)}: "
                                "expected epochs.jsonl written by train.py")
    return epochs


def cross_check(log: Path, epochs: list[dict], expect_epochs: bool) -> str:
    """`ok`, or what train.log says differently from the records."""
    from dlscale.logparse.reader import parse_file_runs
    from dlscale.logparse.runs import LogError

    try:  # a resumed run's log holds each attempt: an epoch's last line is the one kept
        runs = parse_file_runs(str(log))
    except (LogError, OSError) as exc:
        return OK if not epochs and not expect_epochs else f"log not readable: {exc}"
    lines = {number: line for run in runs for number, line in run.epochs.items()}
    logged, recorded = set(lines), {e["epoch"] for e in epochs}
    if logged != recorded:
        return f"the log has epochs {sorted(logged)}, the records {sorted(recorded)}"
    differences = []
    for epoch in epochs:
        line = lines[epoch["epoch"]]
        allowed = line["seconds_resolution"] + 0.25 + 0.05 * epoch["seconds"]
        if abs(line["seconds"] - epoch["seconds"]) > allowed:
            differences.append(f"epoch {epoch['epoch']} {line['seconds']:g} s in the log, "
                               f"{epoch['seconds']:g} s in the records")
    return "; ".join(differences) or OK


def unreadable_record_rows(run_dir: Path, meta: dict, problem: str) -> list[dict]:
    """The one row of a point whose run.json cannot be read: a failed run, so that the
    tables are built and the point is trained again (the attempt is recorded)."""
    failure = f"{problem}; the point is trained again at the next run"
    append_attempt(run_dir, {"status": Status.FAILED, "failure": failure})
    return [{**dict.fromkeys(EPOCH_COLUMNS), **meta, "status": Status.FAILED.value,
             "failure": failure, "file": str(run_dir / RUN_JSON), "log_check": ""}]


def run_rows(run_dir: Path, meta: dict) -> tuple[list[dict], str]:
    """(rows, log_check) of a run folder: one row per recorded epoch, or one row with
    empty epoch columns for a run that ended before its first epoch."""
    record = RunRecord.read(run_dir / RUN_JSON)
    epochs = check_epochs(read_epochs(run_dir / EPOCHS), run_dir / EPOCHS)
    columns = {**dict.fromkeys(EPOCH_COLUMNS), **meta, **record_columns(record),
               "file": str(run_dir / TRAIN_LOG)}
    # what SLURM accounted for the job (read now: the job has ended)
    accounted, note = slurm.accounting(columns.get("slurm_job_id"))
    columns.update(accounted)
    if note:
        columns["notes"] = "; ".join(filter(None, [columns.get("notes"), note]))
    columns.update(nccl_columns(run_dir))
    if columns["images_per_epoch"] is None and epochs:  # a record written after a kill
        columns["images_per_epoch"] = epochs[0].get("images")
    # a command's records were read from its log (dlscale.launch.command): nothing to cross-check
    check = OK if record.get("strategy") == COMMAND else cross_check(
        run_dir / TRAIN_LOG, epochs, expect_epochs=record.status is Status.COMPLETED)
    columns["log_check"] = check
    if not epochs:
        return [columns], check
    rows = []
    for epoch in epochs:
        row = {**columns, "epochs_total": record["epochs"], "cut": False}
        row.update({column: epoch.get(key) for key, column in EPOCH_KEYS.items()})
        if epoch.get("loss_unknown"):  # a command's output without a loss (dlscale.launch.command)
            row["loss_unknown"] = True
        rows.append(row)
    return rows, check
