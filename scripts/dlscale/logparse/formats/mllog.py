"""MLPerf's logging (mlcommons/logging: `:::MLLOG {json}` lines) read as runs.

An MLPerf training result (`result_N.txt`) is one run: `run_start` ... `run_stop` (with its
`status`), epochs as `epoch_start`/`epoch_stop` (`metadata.epoch_num`) or only as blocks
(`block_start`/`block_stop` with `first_epoch_num` and `epoch_count`: each epoch of a
block takes its share of the block's time less the evaluations timed inside it, the
epochs numbered on from 1), `eval_accuracy` given to the epoch it follows, each
evaluation's time (`eval_start` to `eval_stop`) to the epoch it follows as `eval_seconds`,
never in an epoch's `seconds`, and the submission's keys, before or after the run:
`global_batch_size`, `d_batch_size` (a micro-batch where `gradient_accumulation_steps`
is more than 1), `train_samples`, `submission_platform`
("2xDSS8440x8A100-PCIE-40GB": 2 nodes of 8 accelerators). Times are `time_ms`. A run
stopped at its quality target is complete at its last epoch.

Where every rank prints the same event it counts once: a start at its earliest time, a
stop at its latest (the slowest rank). A framework's own epoch lines in the same file
(MXNet's `Epoch[2] Time cost=62.070`, zero-based, or Keras lines) are a cross-check: a
warning where they differ; the rows are the MLLOG's.
"""

from __future__ import annotations

import bisect
import json
import re

from dlscale.logparse.runs import LogFormat, ParsedLog

NAME = "mllog"
MARK = ":::MLLOG"
MXNET_TIME = re.compile(r"\bEpoch\[(\d+)\] Time cost=([0-9.]+)")
STARTS = {"epoch_start", "block_start", "run_start", "eval_start"}
STOPS = {"epoch_stop", "block_stop", "run_stop", "eval_stop"}
WHERE = ("file", "lineno")  # metadata that names the printing code, not the event
# epoch seconds the cross-check lets pass: a log's rounding and a moment between lines
TOLERANCE_S, TOLERANCE = 0.25, 0.05


def platform_counts(platform: str) -> tuple[int | None, int | None]:
    """(nodes, accelerators in all) a submission_platform names: "2xXE8545x4A100-SXM-80GB"
    is (2, 8); "1xNVIDIA DGX A100" (1, None), its accelerators not written; "tpu-v4-128"
    (None, None)."""
    found = re.match(r"^(\d+)x(.+)$", platform)
    if not found:
        return None, None
    nodes = int(found[1])
    per_node = re.search(r"x(\d+)(?=[A-Za-z])", found[2])
    return nodes, nodes * int(per_node[1]) if per_node else None


class Run:
    """One run's events as they came, each once."""

    def __init__(self, line: int, points: dict | None = None):
        self.line = line
        self.points: dict[str, object] = dict(points or {})  # first value of other keys
        self.times: dict[tuple, float] = {}   # (key, number) -> time_ms
        self.blocks: dict[float, int] = {}    # first_epoch_num -> epoch_count
        self.evals: list[tuple[float, float]] = []  # (time_ms, eval_accuracy)
        self.throughput: list[tuple[float, float]] = []
        self.status: str | None = None
        self.ranks = 1                         # the most copies seen of one interval event
        self.after: dict[str, object] = {}     # what was said after its stop

    def add(self, event: dict, copies: dict) -> None:
        key, meta = event.get("key"), event.get("metadata") or {}
        at, value = event.get("time_ms"), event.get("value")
        if key in STARTS or key in STOPS:
            number = meta.get("epoch_num", meta.get("first_epoch_num"))
            seen = (key, number)
            copies[seen] = copies.get(seen, 0) + 1
            self.ranks = max(self.ranks, copies[seen])
            if key == "block_start":
                self.blocks[number] = meta.get("epoch_count") or 1
            kept = self.times.get(seen)
            if isinstance(at, (int, float)) and (
                    kept is None or (at > kept if key in STOPS else at < kept)):
                self.times[seen] = at
            if key == "run_stop" and self.status is None:
                self.status = meta.get("status")
        elif key in ("eval_accuracy", "throughput") and isinstance(value, (int, float)):
            kept = self.evals if key == "eval_accuracy" else self.throughput
            if not kept or kept[-1][1] != value:  # another rank's copy adds nothing
                kept.append((at, value))
        elif key not in self.points:
            self.points[key] = value

    def intervals(self) -> tuple[list[tuple[float, float]], str | None]:
        """Each finished epoch's (start, stop) in ms, in order, and a note on how they
        were paired where the log's numbers do not."""
        pairs = [(start, self.times["epoch_stop", n]) for (key, n), start in self.times.items()
                 if key == "epoch_start" and ("epoch_stop", n) in self.times]
        if pairs:
            return sorted(pairs), None
        starts = sorted(t for (key, _), t in self.times.items() if key == "epoch_start")
        stops = sorted(t for (key, _), t in self.times.items() if key == "epoch_stop")
        if starts and len(starts) == len(stops):
            return list(zip(starts, stops)), "epoch_stop's numbers differ from epoch_start's: "\
                "paired in order"
        found = []
        for first, count in self.blocks.items():
            start, stop = self.times.get(("block_start", first)), self.times.get(
                ("block_stop", first))
            if start is not None and stop is not None:  # its evaluations are not training
                share = (stop - start - sum(b - a for a, b in self.evaluations()
                                            if start <= a and b <= stop)) / count
                found += [(start + k * share, start + (k + 1) * share) for k in range(count)]
        return sorted(found), ("epochs logged in blocks: each its block's share (less its "
                               "evaluations)" if found else None)

    def evaluations(self) -> list[tuple[float, float]]:
        """Each timed evaluation's (start, stop) in ms (eval_start and eval_stop)."""
        return sorted((start, self.times["eval_stop", n]) for (key, n), start
                      in self.times.items() if key == "eval_start" and ("eval_stop", n)
                      in self.times and self.times["eval_stop", n] >= start)


class Reader(LogFormat):
    """The MLLOG lines of a log, fed one at a time (the reader hands them on), and the
    framework's own epoch times beside them: every line after the first MLLOG line."""

    ALL_LINES = True

    def __init__(self):
        self.runs: list[Run] = []
        self.copies: dict = {}
        self.mxnet: dict[int, float] = {}  # epoch (one-based) -> Time cost
        self.bad = 0

    def read(self, number: int, text: str) -> bool:
        if not text.startswith(MARK):
            found = MXNET_TIME.search(text)
            if found:
                self.mxnet.setdefault(int(found[1]) + 1, float(found[2]))
            return False
        try:
            event = json.loads(text[len(MARK):])
        except ValueError:
            event = None
        if not isinstance(event, dict):
            self.bad += 1
            return True
        run = self.runs[-1] if self.runs else None
        if run is None or (event.get("key") == "run_start" and run.status is not None):
            # a second run: it keeps what was said after the last one's stop
            run = Run(number, run.after if run is not None else None)
            self.runs.append(run)
            self.copies = {}
        if run.status is not None and event.get("key") not in STOPS:
            run.after.setdefault(event.get("key"), event.get("value"))
        run.add(event, self.copies)
        return True

    def runs_of(self, path: str, others: list[ParsedLog]) -> list[ParsedLog]:
        """The runs as ParsedLog, checked against the framework's own lines."""
        found = []
        for run in self.runs:
            intervals, note = run.intervals()
            if not intervals:
                continue
            parsed = ParsedLog(path, line=run.line)
            accuracy = self.by_epoch(run.evals, intervals)
            speed = self.by_epoch(run.throughput, intervals)
            evaluated = self.by_epoch([(a, (b - a) / 1000) for a, b in run.evaluations()],
                                      intervals, add=True)
            for epoch, (start, stop) in enumerate(intervals, 1):
                parsed.epochs[epoch] = {"seconds": (stop - start) / 1000,
                                        "val_accuracy": accuracy.get(epoch),
                                        "logged_images_per_s": speed.get(epoch),
                                        "loss_unknown": True,  # MLPerf logs no loss
                                        # a column of its own where the log times them
                                        **({"eval_seconds": evaluated.get(epoch)}
                                           if evaluated else {})}
            parsed.last = len(intervals)
            if note:
                parsed.warnings.append(f"{path} (line {run.line}): {note}")
            self.settle(run, parsed)
            if len(self.runs) == 1:
                parsed.warnings += self.cross_check(parsed, others)
            found.append(parsed)
        return found

    @staticmethod
    def by_epoch(values: list[tuple[float, float]], intervals: list[tuple[float, float]],
                 add: bool = False) -> dict[int, float]:
        """{epoch: value} of timed values (an evaluation, a throughput), each given to the
        epoch whose time holds it, else to the last one stopped before it; `add`: values
        given to one epoch are summed (else the last is kept)."""
        stops = [stop for _, stop in intervals]
        found = {}
        for at, value in values:
            if not isinstance(at, (int, float)):
                continue
            epoch = bisect.bisect_left(stops, at)  # the first epoch stopping at or after
            if epoch < len(intervals) and intervals[epoch][0] < at:
                epoch += 1
            if epoch:
                found[epoch] = found.get(epoch, 0.0) + value if add else value
        return found

    def settle(self, run: Run, parsed: ParsedLog) -> None:
        points, status = run.points, run.status
        total, per_gpu = points.get("global_batch_size"), points.get("d_batch_size")
        if isinstance(total, int):
            parsed.settings["global_batch"] = total
        platform = points.get("submission_platform")
        nodes, gpus = platform_counts(platform) if isinstance(platform, str) else (None, None)
        if nodes:
            parsed.settings["nodes"] = nodes
        steps = points.get("gradient_accumulation_steps")
        if isinstance(per_gpu, int) and isinstance(steps, int) and steps > 1:
            per_gpu *= steps  # d_batch_size is one micro-batch: a step takes `steps` of them
        if isinstance(total, int) and isinstance(per_gpu, int) and per_gpu > 0 \
                and total % per_gpu == 0:  # the batch per device: the devices it takes
            if gpus and gpus != total // per_gpu:
                parsed.warnings.append(
                    f"{parsed.path}: the platform {platform} has {gpus} accelerators, the "
                    f"batch ({total} in all, {per_gpu} per device) {total // per_gpu}: the "
                    "platform's count is kept")
            gpus = gpus or total // per_gpu
        if gpus:
            parsed.settings["gpus"] = gpus
        if run.evals:
            parsed.test["test_accuracy"] = run.evals[-1][1]
        facts = {"log_format": "mllog", "platform": platform, "run_status": status,
                 "train_samples": points.get("train_samples")}
        start, stop = run.times.get(("run_start", None)), run.times.get(("run_stop", None))
        if start is not None and stop is not None:
            facts["time_to_train_s"] = (stop - start) / 1000
        if status is None:  # the log ends inside the run
            parsed.cut, parsed.cut_epoch = True, parsed.last + 1
        else:  # stopped at its target (success) or given up (aborted): complete as it is
            parsed.epochs_total = parsed.last
        parsed.facts = {k: v for k, v in facts.items() if v is not None}
        if run.ranks > 1:
            parsed.streams = run.ranks
            parsed.warnings.append(f"{parsed.path}: each MLLOG epoch event came {run.ranks} "
                                   "times (every rank prints it): counted once, a stop at "
                                   "the slowest rank's time")
        if self.bad:
            parsed.warnings.append(f"{parsed.path}: {self.bad} MLLOG line(s) are not JSON "
                                   "objects: left out")

    def cross_check(self, parsed: ParsedLog, others: list[ParsedLog]) -> list[str]:
        """The framework's own epoch times against the MLLOG's: where they differ."""
        theirs, source = self.mxnet, "MXNet's Time cost"
        if not theirs and others and others[0].epochs:
            theirs = {e: r["seconds"] for e, r in others[0].epochs.items()}
            source = "the Keras lines"
        if not theirs:
            return []
        differ = [f"epoch {e}: {theirs[e]:g} s against {r['seconds']:g} s"
                  for e, r in parsed.epochs.items() if e in theirs
                  and abs(theirs[e] - r["seconds"]) > TOLERANCE_S + TOLERANCE * r["seconds"]]
        listed = ", ".join(differ[:3]) + (", ..." if len(differ) > 3 else "")
        parsed.facts["checked_against"] = source
        parsed.facts["log_check"] = listed or "ok"
        if not differ:
            return []
        return [f"{parsed.path}: {source} differs from the MLLOG epochs ({listed}): the rows "
                "are the MLLOG's"]
