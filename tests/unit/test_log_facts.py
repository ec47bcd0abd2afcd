"""A log's table (`dlscale parse-log`, parse_logs.py) holds only declared columns: each
fact a format sets (ParsedLog.facts) and each column the table adds is declared once in
dlscale.core.columns, so docs/analysis.md lists it with its unit and meaning. A metric is
the exception: a log's metric is a column under the name the log printed."""

from __future__ import annotations

import ast

from conftest import ROOT

from dlscale.core import columns
from dlscale.logparse.reader import parse_file_runs
from dlscale.logparse.runs import LogError
from dlscale.reporting.logtable import log_runs

DATA = ROOT / "tests" / "data"
NOT_LOGS = {".py", ".md", ".sh", ".json", ".csv", ".pb", ".rst", ".markdown", ".sbatch"}
TABLES = (columns.SCALING, columns.RUNS, columns.ACCOUNTED, columns.EPOCHS,
          columns.LOG_COLUMNS, columns.LOG_FACTS)
DECLARED = {c.name for table in TABLES for c in table}


def printed_metric(name: str, run, text: str) -> bool:
    """Whether `name` is a metric of the run's epochs or tests as the log printed it
    (`sparse_categorical_accuracy`; `Test top5:` as test_top5)."""
    if name in run.epochs.columns:
        return name in text
    return name in run.test and name.removeprefix("test_") in text.lower()


def test_every_column_of_a_real_logs_table_is_declared(capsys):
    """Every log under tests/data that holds a run: its table's columns (log_runs, as
    parse_logs.py writes them) are declared; its facts are, whatever the log printed."""
    undeclared, facts, runs_read = {}, set(), 0
    for path in sorted(p for p in DATA.rglob("*") if p.is_file() and p.suffix not in NOT_LOGS):
        try:
            runs = parse_file_runs(str(path))
        except (LogError, ValueError):
            continue  # no run in it (a cgroup listing, NCCL's lines alone, sacct's output)
        names, _rows = log_runs(path, {}, None, {})
        text = path.read_text(errors="replace")
        facts |= {name for run in runs for name in run.facts}
        runs_read += len(runs)
        missing = sorted(n for n in names - DECLARED if not any(
            n not in run.facts and printed_metric(n, run, text) for run in runs))
        if missing:
            undeclared[str(path.relative_to(DATA))] = missing
    capsys.readouterr()
    assert undeclared == {}
    assert runs_read >= 50 and len(facts) >= 15  # the logs were read, their facts found


def test_a_failed_runs_row_holds_declared_columns_only(capsys):
    names, _rows = log_runs("gone.out", {}, [{"failed": "no finished epoch", "gpus": 2}], {})
    capsys.readouterr()
    assert names - DECLARED == set()


def fact_keys(source: str) -> set[str]:
    """The fact names a module sets: `facts["k"] = ...`, `.facts.setdefault("k", ...)`,
    and the keys of a dict literal given the name `facts` (or set as a run's facts)."""
    keys = set()

    def is_facts(node) -> bool:
        return (isinstance(node, ast.Name) and node.id == "facts") or (
            isinstance(node, ast.Attribute) and node.attr == "facts")

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                and is_facts(node.value) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("setdefault", "update") and is_facts(node.func.value):
            first = node.args[0] if node.args else None
            if node.func.attr == "setdefault" and isinstance(first, ast.Constant):
                keys.add(first.value)
            elif isinstance(first, ast.Dict):
                keys |= {k.value for k in first.keys if isinstance(k, ast.Constant)}
            keys |= {k.arg for k in node.keywords if k.arg}
        elif isinstance(node, ast.Assign) and any(map(is_facts, node.targets)) \
                and isinstance(node.value, ast.Dict):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return keys


def test_every_fact_a_format_sets_is_declared_in_the_column_registry():
    """Facts no log under tests/data shows (a Trainer's summary from several nodes,
    DLLogger's compute throughput) too: read from the parser's source."""
    package = ROOT / "scripts" / "dlscale" / "logparse"
    found = {key for path in package.rglob("*.py") for key in fact_keys(path.read_text())}
    assert {"summary_hosts", "summary_compute_images_per_s", "gpus_from", "nodes_from",
            "epoch_line", "time_to_train_s"} <= found  # the reading finds them
    assert sorted(found - DECLARED) == []


def test_each_column_of_the_per_run_and_log_tables_is_declared_once():
    declared = [c.name for table in TABLES for c in table]
    assert sorted(n for n in set(declared) if declared.count(n) > 1) == []


def test_a_per_run_that_is_not_a_json_list_of_objects_is_named_in_one_line(tmp_path):
    import subprocess
    import sys

    log = DATA / "hf-trainer" / "trainer.out"
    for given in ("runs.json", '{"gpus": 2}', "[1, 2]"):
        out = tmp_path / "t.csv"
        proc = subprocess.run([sys.executable, "-m", "dlscale.console", "parse-log", str(log),
                               "-o", str(out), "--per-run", given],
                              capture_output=True, text=True)
        [line] = proc.stderr.strip().splitlines()[-1:]
        assert proc.returncode == 2 and f"--per-run {given!r}" in line, line
        assert "expected a JSON list with one object per run" in line
        assert not out.exists()
