#!/usr/bin/env python3
"""Analysis benchmark: parse and aggregate 500 runs of 20 epochs (issue 4: <= 5 s).

  python bench/bench_analysis.py [--runs 500] [--epochs 20] [--work /tmp/dlscale-bench-analysis]

Writes tf-keras-format train.log and epochs.jsonl files like dlscale's run folders,
then times, in one process: parsing every log with its cross-check against the records
(parse_logs.table + cross_check, what the parse_log rule runs per run) and the
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
            records.append({"epoch": e, "seconds": ms / 1000, "lr": 0.01 * gpus})
        (folder / "train.log").write_text("\n".join(lines) + "\n")
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
    import parse_logs

    from dlscale.analysis import scaling, summarize_runs
    from dlscale.keraslog import parse_file

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = []
    for folder in folders:
        parsed = parse_file(str(folder / "train.log"))
        records = [json.loads(x) for x in (folder / "epochs.jsonl").read_text().splitlines()]
        parse_logs.cross_check(parsed, records)
        model, gpus, rep = folder.relative_to(args.work).parts
        meta = {"run": str(folder), "model": model, "series": model, "gpus": int(gpus[4:]),
                "repeat": int(rep[3:]), "images_per_epoch": 50000, "global_batch": 256}
        rows += parse_logs.table(parsed, meta, records)
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
