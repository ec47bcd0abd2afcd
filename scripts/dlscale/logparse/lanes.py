"""The workers inside one stream of a log: lines that name no worker (no launcher
prefix, or two workers with one label), each followed as a lane by its order and values;
a run's workers settled when it ends, copies that trained alone merged into one run, and
one worker's runs absorbed into another's (logstream.combine)."""

from __future__ import annotations

from dlscale.logparse.loglines import ParsedLog, same_size, same_values


class Lane:
    """One worker's place in a stream that holds several workers' whole output (no
    launcher prefix, or two workers with one label): the epoch it began and has not
    finished, and the last it finished. The lines name no worker: each goes to the lane
    its order and values fit (`StreamParser.header`, `lane_of`)."""
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


def absorb(run: ParsedLog, other: ParsedLog) -> None:
    """`other`'s epochs and facts into `run`, another worker's of the same run: each
    epoch's time the slower one's, its values `run`'s."""
    mine, theirs = run.epochs, other.epochs
    seconds = theirs.columns["seconds"]
    for epoch, row in theirs.index.items():
        if epoch in mine:
            mine.keep_slower(epoch, seconds[row], theirs.lines[row])
        else:  # (its fields: the key is the epoch)
            mine.add(epoch, theirs.row(row), theirs.lines[row])
    run.settings = {**other.settings, **run.settings}
    run.test = run.test or other.test
    if run.images_per_s is None:
        run.images_per_s = other.images_per_s
    run.warnings += other.warnings
    run.last = max(run.last, other.last)
    if other.cut:
        run.cut = True
        run.cut_epoch = min(filter(None, [run.cut_epoch, other.cut_epoch]))
