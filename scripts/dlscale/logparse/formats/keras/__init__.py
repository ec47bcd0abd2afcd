"""Keras' own output (`Epoch k/N` headers and result lines, grammar in `.grammar`) read
as runs, with the workers a stream may hold.

A log is a sequence of runs (one job's .out often holds several): a new run starts
where the epoch count restarts (`Epoch 1/N` after finished epochs, or another N) or a
run's settings are stated again after finished epochs (formats.stated). A run resumed
after a cut (`Epoch k/N` right after epoch k-1) stays one run; an earlier epoch coming
back inside a run is taken as a resume from an older backup, with a warning naming the
line. A last line without its end (no newline, or stopping inside a `name: value` pair)
leaves that epoch unfinished: the run is cut and the epoch not counted.

A stream can hold several workers' whole output (no launcher prefix, or two workers with
one label): each is followed as a lane by its order and values; a run's workers settled
when it ends, copies that trained alone merged into one run.
"""

from __future__ import annotations

from dlscale.logparse.formats.keras.grammar import HEADER, PROGRESS, parse_result_line
from dlscale.logparse.lines import SPLIT
from dlscale.logparse.runs import ParsedLog, StreamFormat, absorb, same_size, same_values

NAME = "keras"
HEADERS: dict[str, tuple[int, int] | tuple[()]] = {}  # a line -> its (epoch, total), or ()


class Lane:
    """One worker's place in a stream that holds several workers' whole output (no
    launcher prefix, or two workers with one label): the epoch it began and has not
    finished, and the last it finished. The lines name no worker: each goes to the lane
    its order and values fit (`Reader.header`, `lane_of`)."""
    __slots__ = ("open", "last", "began", "since", "behind")

    def __init__(self):
        self.open: int | None = None
        self.last = 0
        self.began = 0       # times the open epoch's header came (more: resumed inside it)
        self.since = 0       # the line where the open epoch began
        self.behind = False  # another worker finished an epoch 2 or more ahead of it


def begin(run: ParsedLog, lane: Lane, epoch: int, total: int, number: int) -> None:
    lane.open, lane.began, lane.since = epoch, 1, number
    run.epochs_total = total


def close(run: ParsedLog, lane: Lane, record: dict, number: int) -> None:
    """`lane`'s open epoch finished with `record`."""
    epoch, lanes = lane.open, run.lanes
    if lane.began > 1:
        run.warnings.append(f"{run.path}:{number}: epoch {epoch} began {lane.began} times "
                            "and ended once: taken as a run resumed inside that epoch")
    if len(lanes) > 1 and lane.last < epoch and epoch in run.epochs:
        # another worker finished this epoch first: its values stay, the slowest time counts
        run.epochs.keep_slower(epoch, record["seconds"], number)
    else:
        run.result(record, number, epoch)
    lane.open, lane.last, lane.began = None, epoch, 0
    if len(lanes) > 1:
        run.apart = run.apart or lane.behind
        for other in lanes:
            if other.last <= epoch - 2:
                other.behind = True


def lane_of(run: ParsedLog, began: list[Lane], record: dict) -> Lane:
    """The worker whose line `record` is, among those inside an epoch: one whose epoch
    another worker finished with the same values (global metrics, or copies with one
    seed), else one inside an epoch no one finished, else the one that began first."""
    if len(began) == 1:
        return began[0]
    fresh = []
    for lane in sorted(began, key=lambda lane: lane.since):
        kept = run.epochs.get(lane.open)
        if kept is None:
            fresh.append(lane)
        elif same_values(kept, record):
            return lane
    return fresh[0] if fresh else min(began, key=lambda lane: lane.since)


def test_of(record: dict) -> dict[str, float]:
    """evaluate()'s loss and accuracy from its result line."""
    return {f"test_{k}": v for k, v in record.items() if k in ("loss", "accuracy")}


def open_epoch(run: ParsedLog) -> int | None:
    """The lowest epoch a worker of `run` began and has not finished, or None."""
    return min((lane.open for lane in run.lanes if lane.open is not None), default=None)


def settle(run: ParsedLog) -> None:
    """At a run's end: a worker that never finished an epoch while others did was a run
    cut inside epoch 1 and begun again; the others are the run's workers."""
    finished = [lane for lane in run.lanes if lane.last]
    if finished and len(finished) < len(run.lanes):
        again = [lane for lane in run.lanes if not lane.last]
        run.warnings.append(f"{run.path}:{again[0].since}: epoch 1 began {len(again) + 1} "
                            "times and ended once: taken as a run resumed inside that epoch")
        run.lanes = finished
    run.streams = max(run.streams, len(run.lanes))
    run.lanes = [lane for lane in run.lanes if lane.open is not None] or ()  # (a cut)
    run.epochs.compact()


def merge_copies(runs: list[ParsedLog]) -> list[ParsedLog]:
    """Runs of one stream whose workers were not in step (each trained alone: `srun` of a
    script that is not distributed) and the runs after them with the same epochs and
    batches: one run, copies of one training; one warning says so."""
    merged: list[ParsedLog] = []
    for run in runs:
        before = merged[-1] if merged else None
        if (before is not None and (before.apart or run.apart) and run.epochs and before.epochs
                and before.epochs_total == run.epochs_total
                and same_size(before.epochs.get(before.last), run.epochs.get(run.last))):
            absorb(before, run)
            before.streams += run.streams
            before.apart = True
        else:
            merged.append(run)
    for run in merged:
        if run.apart:
            run.warnings.append(
                f"{run.path}:{run.line}: {run.streams} copies of one training print their "
                "lines without a prefix, not in step (one finished epochs while another "
                "was still in an earlier one): each trained alone, not as one "
                "data-parallel job; counted once, each epoch timed by the slowest copy")
    return merged


class Reader(StreamFormat):
    """Keras' lines of one stream."""

    def read(self, number: int, text: str) -> bool:
        run = self.runs[-1]
        if text.startswith("Epoch ") or text[:1].isspace():
            header = HEADERS.get(text)
            if header is None:  # (a long log repeats its runs' headers: remembered)
                m = HEADER.match(text)
                header = (int(m.group(1)), int(m.group(2))) if m is not None else ()
                if len(HEADERS) > 10_000:
                    HEADERS.clear()
                if len(text) < 64:  # (a long line is no header: not kept)
                    HEADERS[text] = header
            if header:
                self.header(run, number, *header)
                return True
        progress = PROGRESS.match(text)
        if progress is not None and (record := parse_result_line(text, progress)) is not None:
            self.result(run, record, number)
            return True
        return False

    def header(self, run: ParsedLog, number: int, epoch: int, total: int) -> None:
        lanes = run.lanes
        # the common case, one worker's next epoch: `begin` inlined here, and
        # ParsedLog.result in `result`, since a call more a line costs a long log's parse
        # about 2 % (bench_parse.py's runs shape, 50 MB, 7 runs of each side by side)
        if len(lanes) == 1 and total == run.epochs_total:
            lane = lanes[0]
            if lane.open is None and lane.last == epoch - 1:
                lane.open, lane.began, lane.since = epoch, 1, number
                return
        if run.epochs.index and total != run.epochs_total:
            run = self.stream.new_run(number)
        lanes = run.lanes
        for lane in lanes:  # the worker whose next epoch this is
            if lane.open is None and lane.last == epoch - 1:
                return begin(run, lane, epoch, total, number)
        if epoch == 1 and lanes:
            finished = [lane for lane in lanes if lane.last]
            if not finished or (len(finished) > 1 and not all(
                    lane.open is None and lane.last == total for lane in finished)):
                # another worker's first epoch (every worker prints its own), or a run
                # cut inside epoch 1 begun again: `settle` tells which
                lanes.append(Lane())
                return begin(run, lanes[-1], epoch, total, number)
            run = self.stream.new_run(number)  # the epoch count restarts: the next run
            lanes = run.lanes
        if not lanes:
            lanes.append(Lane())
            return begin(run, lanes[0], epoch, total, number)
        for lane in lanes:
            if lane.open == epoch:  # begun again before its result: a resume inside it
                lane.began += 1
                return
        lane = max(lanes, key=lambda lane: lane.last)
        if lane.last >= epoch:
            run.warnings.append(
                f"{run.path}:{number}: epoch {epoch} comes again after epoch {lane.last}: "
                "taken as a resume from an older backup, the later result replaces the "
                "earlier")
        if lane.open is not None:
            run.warnings.append(f"{run.path}:{number}: epoch {lane.open} has no result "
                                "line before the next epoch begins")
        begin(run, lane, epoch, total, number)

    def result(self, run: ParsedLog, record: dict, number: int) -> None:
        lanes = run.lanes
        if len(lanes) == 1 and (lane := lanes[0]).open is not None and lane.began == 1 and (
                run.epochs.index or len(self.runs) == 1):  # the common case: one worker's
            epoch = lane.open                               # epoch ends (see `header`)
            record["epochs_total"] = run.epochs_total
            run.epochs.add(epoch, record, number)
            if epoch > run.last:
                run.last = epoch
            run._seen = 1
            lane.open, lane.last, lane.began = None, epoch, 0
            return
        began = [lane for lane in lanes if lane.open is not None]
        last = run.epochs.get(run.last)
        if began:
            if last is not None and not same_size(last, record) and any(
                    lane.open is None and lane.last == run.epochs_total for lane in lanes):
                # a worker that finished its epochs evaluates while others still train
                run.test = test_of(record)
            elif not run.epochs and (earlier := self.copies_before(run, record)):
                earlier.test = test_of(record)  # the copies before still evaluating
            else:
                close(run, lane_of(run, began, record), record, number)
            return
        if last is not None and same_values(last, record):
            # another worker's line for the same epoch without a header of its own
            # (MultiWorkerMirroredStrategy reports global metrics): the slowest counts
            run._seen += 1
            run.streams = max(run.streams, run._seen)
            run.epochs.keep_slower(run.last, record["seconds"], number)
        elif last is not None and (run.epochs_total is not None
                                   or not same_size(last, record)):
            # after the epochs without a header, or over another number of batches:
            # evaluate()'s line, not an epoch
            run.test = test_of(record)
        else:
            run.result(record, number)

    def copies_before(self, run: ParsedLog, record: dict) -> ParsedLog | None:
        """The run before `run` when it was several workers' and `record` (the first
        result of `run`) is over another number of batches: their evaluate()."""
        runs = self.stream.runs
        if len(runs) < 2 or runs[-1] is not run:
            return None
        earlier = runs[-2]
        kept = earlier.epochs.get(earlier.last)
        if earlier.streams > 1 and kept is not None and not same_size(kept, record):
            return earlier
        return None

    def cut(self, text: str) -> bool:
        """The text after the last newline: a result line there was not finished."""
        last = self.stream.runs[-1]
        if text.strip() and PROGRESS.match(SPLIT.split(text)[-1]):
            last.cut, last.cut_epoch = True, open_epoch(last) or last.last + 1
            return True
        return False

    def ended(self, run: ParsedLog, last: bool) -> None:
        settle(run)
        if last and (epoch := open_epoch(run)) is not None:
            run.cut, run.cut_epoch = True, epoch

    def settle(self, runs: list[ParsedLog]) -> list[ParsedLog]:
        return merge_copies(runs)
