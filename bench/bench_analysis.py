#!/usr/bin/env python3
"""Analysis benchmark: parse and aggregate 500 runs of 20 epochs (issue 4: <= 5 s).

  python bench/bench_analysis.py [--runs 500] [--epochs 20] [--work /tmp/dlscale-bench-analysis]

Writes run folders as train.py leaves them (run.json, epochs.jsonl, a tf-keras-format
train.log), then times, in one process: each run's table from its records with the log
cross-check (runtable.run_rows, what the tabulate_run rule runs per run) and the
aggregation into runs and scaling tables (what aggregate.py runs once).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from dlscale.core.contract import RunRecord, Status  # noqa: E402


def write_runs(work: Path, runs: int, epochs: int) -> list[Path]:
    folders = []
    for i in range(runs):
        gpus = (1, 2, 4, 8)[i % 4]
        folder = work / f"M{i % 5}" / f"gpus{gpus}" / f"rep{i // 20 + 1}"
        folder.mkdir(parents=True, exist_ok=True)
        lines, records = [], []
        for e in range(1, epochs + 1):
            ms = 40000 // gpus + 37 * e + i
            lines += [f"Epoch {e}/{epochs}",
                      f"{196 // gpus}/{196 // gpus} - {ms // 1000}s - loss: {2.0 / e:.4f} - "
                      f"accuracy: {0.1 + 0.02 * e:.4f} - {ms}ms/epoch - {ms // 196}ms/step"]
            records.append({"epoch": e, "seconds": ms / 1000, "lr": 0.01 * gpus,
                            "loss": 2.0 / e, "accuracy": 0.1 + 0.02 * e, "images": 50000})
        (folder / "train.log").write_text("\n".join(lines) + "\n")
        record = RunRecord.ending(Status.COMPLETED, None, model=f"M{i % 5}", replicas=gpus,
                                  gpus_asked=gpus, nodes=1, global_batch=256 * gpus,
                                  images_per_epoch=50000, epochs=epochs,
                                  epochs_completed=epochs, test_accuracy=0.5)
        (folder / "run.json").write_text(json.dumps(record))
        (folder / "epochs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        folders.append(folder)
    return folders


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-analysis"))
    args = parser.parse_args(argv)
    folders = write_runs(args.work, args.runs, args.epochs)

    t0 = time.perf_counter()
    import pandas as pd

    from dlscale.reporting.analysis import scaling, summarize_runs
    from dlscale.reporting.runtable import OK, run_rows

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = []
    for folder in folders:
        model, gpus, rep = folder.relative_to(args.work).parts
        meta = {"run": str(folder), "series": model, "repeat": int(rep[3:])}
        table_rows, check = run_rows(folder, meta)
        assert check == OK, check
        rows += table_rows
    t_parse = time.perf_counter() - t0
    t0 = time.perf_counter()
    epochs = pd.DataFrame(rows)
    runs = summarize_runs(epochs, 1)
    table = scaling(epochs, runs, 1, 0.05)
    t_aggregate = time.perf_counter() - t0
    assert len(runs) == args.runs and runs["counted"].all()
    assert len(epochs) == args.runs * args.epochs
    total = t_parse + t_aggregate
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{args.runs} runs x {args.epochs} epochs = {len(epochs)} epochs, {len(table)} points")
    print(f"parse + cross-check: {t_parse:.2f} s; aggregate: {t_aggregate:.2f} s; "
          f"total {total:.2f} s (target <= 5 s); imports {t_import:.2f} s")
    return 0 if total <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
