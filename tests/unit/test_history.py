"""dlscale.reporting.history on real SQLite files: concurrent studies, the layout's version."""

from __future__ import annotations

import multiprocessing
import sqlite3

import pytest

from dlscale.reporting import history


def point(series: str, gpus: int, epoch_time: float, run: str) -> dict:
    return {"series": series, "model": series, "strategy": "mirrored", "precision": "float32",
            "nodes": 1, "gpus": gpus, "global_batch": 32 * gpus, "repeats": 1,
            "epoch_time_s": epoch_time, "images_per_s": 1000 / epoch_time,
            "identity": history.point_identity([{"host": "h", "started": run, "folder": run}]),
            "system": "test VM", "system_description": {"cpu_model": "x"}, "started": run}


def add_study(db: str, name: str, start, results) -> None:
    """One study's end in its own process: wait for the others, then add 50 points."""
    points = [point("SimpleCNN", 1 + i % 4, 1.0, f"{name}-{i}") for i in range(50)]
    start.wait()
    results.put((name, history.add_and_compare(db, {"workdir": name}, points, 2, 0.1)[0]))


def test_two_studies_ending_at_the_same_moment_lose_nothing(tmp_path):
    db = str(tmp_path / "history.sqlite")
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(2), context.Queue()
    workers = [context.Process(target=add_study, args=(db, name, start, results))
               for name in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0]
    assert sorted(results.get(timeout=10) for _ in workers) == [("a", 50), ("b", 50)]
    rows = history.listing(db)
    assert len(rows) == 100 and {r["study"] for r in rows} == {1, 2}


def test_a_point_is_added_once_and_compared_with_the_earlier_studies(tmp_path):
    db = tmp_path / "h.sqlite"
    for name, seconds in (("first", 1.0), ("second", 1.2)):
        added, _, verdicts = history.add_and_compare(
            db, {"workdir": name}, [point("SimpleCNN", 1, seconds, name)], 2, 0.1)
        assert added == 1
    again = history.add_and_compare(db, {"workdir": "second"},
                                    [point("SimpleCNN", 1, 1.2, "second")], 2, 0.1)
    assert again[0] == 0  # its tables made again: nothing added twice
    added, earlier, verdicts = history.add_and_compare(
        db, {"workdir": "slow"}, [point("SimpleCNN", 1, 1.5, "slow")], 2, 0.1)
    assert [e["epoch_time_s"] for e in earlier] == [1.0, 1.2]
    [verdict] = verdicts
    assert verdict["history_median_s"] == pytest.approx(1.1)
    assert verdict["verdict"] == "fail" and verdict["change"] == pytest.approx(1.5 / 1.1 - 1)
    # another GPU count, system or batch is another point: no history, no verdict
    other = point("SimpleCNN", 2, 9.0, "other")
    assert history.add_and_compare(db, {"workdir": "o"}, [other], 2, 0.1)[2][0]["verdict"] \
        == "none"


def test_the_layout_has_a_version_an_empty_file_is_upgraded_a_newer_one_refused(tmp_path):
    empty = tmp_path / "old.sqlite"
    sqlite3.connect(empty).close()  # version 0: no tables yet
    history.connect(empty).close()
    with sqlite3.connect(empty) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
        assert {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
                } == {"studies", "points"}
    newer = tmp_path / "newer.sqlite"
    with sqlite3.connect(newer) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(history.HistoryError, match="version 99 was written by a newer"):
        history.connect(newer)
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database\n" * 100)
    with pytest.raises(history.HistoryError, match="junk.sqlite: file is not a database"):
        history.connect(junk)


def study_folder(root, started: str):
    """A study's tables and one completed run record, as a study leaves them."""
    import json

    import pandas as pd

    from dlscale.core.contract import RunRecord

    run = "SimpleCNN/gpus1/rep1"
    folder = root / "results" / "runs" / run
    folder.mkdir(parents=True)
    record = RunRecord.ending("completed", None, host="node1", started=started,
                              system={"cpu_model": "x"})
    (folder / "run.json").write_text(json.dumps(record))
    scaling = pd.DataFrame([{"series": "SimpleCNN", "model": "SimpleCNN",
                             "strategy": "mirrored", "precision": "float32", "nodes": 1,
                             "gpus": 1, "global_batch": 32, "repeats": 1,
                             "epoch_time_s": 1.0}])
    runs = pd.DataFrame([{"run": run, "source": "dlscale", "series": "SimpleCNN",
                          "nodes": 1, "gpus": 1, "counted": True}])
    return scaling, runs, root / "results" / "runs"


def test_two_studies_started_together_from_two_folders_are_two_studies(tmp_path):
    """The same config run from two working directories in the same second: the same
    host, start and run folder name, two measurements."""
    db = tmp_path / "h.sqlite"
    added = []
    for name in ("a", "b"):
        points = history.study_points(*study_folder(tmp_path / name, "2026-11-25T10:00:00"),
                                      "test VM")
        added.append(history.add_and_compare(db, {"workdir": name}, points, 2, 0.1)[0])
    assert added == [1, 1]
    assert len(history.listing(db)) == 2
    # a history written before the folder was absolute knows its points all the same
    points = history.study_points(*study_folder(tmp_path / "c", "2026-11-25T11:00:00"),
                                  "test VM")
    old = {**points[0], "identity": points[0]["legacy_identity"]}
    old.pop("legacy_identity")
    assert history.add_and_compare(db, {"workdir": "c"}, [old], 2, 0.1)[0] == 1
    assert history.add_and_compare(db, {"workdir": "c"}, points, 2, 0.1)[0] == 0


def test_a_study_recorded_again_is_compared_with_the_studies_before_it_only(tmp_path):
    db = tmp_path / "h.sqlite"
    first = [point("SimpleCNN", 1, 1.0, "first")]
    history.add_and_compare(db, {"workdir": "first"}, first, 2, 0.1)
    history.add_and_compare(db, {"workdir": "later"}, [point("SimpleCNN", 1, 9.0, "later")],
                            2, 0.1)
    # the first study's tables made again: nothing before it, so no verdict, as the first
    # time (not a comparison with the later, slower study)
    added, earlier, [verdict] = history.add_and_compare(db, {"workdir": "first"}, first, 2,
                                                        0.1)
    assert added == 0 and earlier == [] and verdict["verdict"] == "none"


def test_listing_never_writes(tmp_path):
    db = tmp_path / "h.sqlite"
    history.add_and_compare(db, {"workdir": "a"}, [point("SimpleCNN", 1, 1.0, "a")], 2, 0.1)
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    db.chmod(0o444)
    assert len(history.listing(db)) == 1
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.sqlite"]  # no journal
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(history.HistoryError, match="not a dlscale history"):
        history.listing(empty)
    assert empty.stat().st_size == 0  # not turned into a database
    for bad in ("25/11/2026", "yesterday"):
        with pytest.raises(history.HistoryError,
                           match=f"--since '{bad}': expected a date as YYYY-MM-DD"):
            history.listing(db, since=bad)


def test_another_programs_sqlite_file_is_refused_and_left_as_it_was(tmp_path):
    """history.path naming another program's SQLite file ended in 'table studies already
    exists', or, without that name, added dlscale's tables to it."""
    import sqlite3

    from dlscale.reporting.history import HistoryError, connect

    for tables in (["studies"], ["jobs", "users"]):
        path = tmp_path / f"{tables[0]}.sqlite"
        other = sqlite3.connect(path)
        for name in tables:
            other.execute(f"CREATE TABLE {name} (id INTEGER)")
        other.commit()
        other.close()
        with pytest.raises(HistoryError) as error:
            connect(path)
        assert str(error.value) == (
            f"{path}: an SQLite database of another program (tables {', '.join(tables)}): "
            "expected a dlscale history or a new file; set history.path to another file")
        other = sqlite3.connect(path)
        assert [r[0] for r in other.execute("SELECT name FROM sqlite_master")] == tables
        other.close()
