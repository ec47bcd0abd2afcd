"""nccl-tests' all_reduce_perf output: the all-reduce's time per size, and its ranks' hosts.

Read without a pattern, as users paste it (a job's log, a Markdown note, mpirun's prefixes):
the column header names the columns (`size count type redop [root] time algbw busbw ...`,
out-of-place first), the rows are the lines whose fields fit it, and each rank line
(`Rank 3 Group 0 Pid 17 on HOST device 3`) names the rank's host. An output of another
collective is refused by name: its `Collective test starting:` line, its columns (an
all-reduce has a reduction, `redop` sum, and no root), and the bus bandwidth of every row,
which for an all-reduce is its algorithm bandwidth times 2(n-1)/n (nccl-tests'
doc/PERFORMANCE.md; (n-1)/n for all_gather, reduce_scatter and alltoall, 1 for broadcast,
reduce and sendrecv). So are two outputs in one file, and an output cut before its
closing `# Avg bus bandwidth` line. Every line is read in time linear in its length.
"""

from __future__ import annotations

from dataclasses import dataclass

import re2

# a rank line's fields, in RE2: its time is linear in the line's length (Python's re took
# 108 s on a 0.5 MB line with `.*?` between the rank and its host)
RANK = re2.compile(r"\bRank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+"
                   r"device\b")
STARTING = "Collective test starting:"
CLOSING = ("Avg bus bandwidth", "Out of bounds values")  # the lines after a table's rows
PREFIX_WORDS = 8  # words a row may have before it (mpirun's [1,0]<stdout>:, a timestamp)


class NcclTestsError(ValueError):
    """The text is not an all_reduce_perf output; the message says why, in one line."""


@dataclass(frozen=True)
class AllReduce:
    hosts: tuple[str, ...]  # each rank's host, by rank
    bytes: tuple[int, ...]
    seconds: tuple[float, ...]  # out-of-place time per size
    busbw_gbs: tuple[float, ...]

    @property
    def ranks(self) -> int:
        return len(self.hosts)

    @property
    def nodes(self) -> int:
        return len(set(self.hosts))


@dataclass(frozen=True)
class Row:
    bytes: int
    seconds: float
    algbw: float  # GB/s
    busbw: float
    redop: str | None  # None where the table has no such column
    root: str | None


@dataclass
class Table:
    """One output's table: where its header is, the collective its starting line names."""
    line: int
    names: list[str]
    collective: str | None
    rows: list[Row]
    closed: bool = False


def columns(line: str) -> list[str] | None:
    """The column names of nccl-tests' header line, or None for another line."""
    if "busbw" not in line:
        return None
    words = line.replace("#", " ").split(None, 3)
    if words[:3] == ["size", "count", "type"]:
        return line.replace("#", " ").split()
    return None


def rank_of(line: str) -> tuple[int, str] | None:
    """(rank, host) of a rank line, or None."""
    found = RANK.search(line)
    return None if found is None else (int(found.group(1)), found.group(2))


def collective_named(line: str) -> str | None:
    """all_reduce of `# Collective test starting: all_reduce_perf_mpi`, or None."""
    at = line.find(STARTING)
    if at < 0:
        return None
    words = line[at + len(STARTING):].split(None, 1)
    name = words[0] if words else ""
    return name.removesuffix("_mpi").removesuffix("_perf") or None


def tables(text: str) -> tuple[list[Table], dict[int, str]]:
    """The tables of a text and the ranks' hosts its rank lines name."""
    hosts: dict[int, str] = {}
    found: list[Table] = []
    collective = None
    for number, line in enumerate(text.splitlines(), 1):
        if "Rank" in line and "device" in line and (rank := rank_of(line)):
            hosts.setdefault(*rank)
        elif STARTING in line:
            collective = collective_named(line)
        elif names := columns(line):
            found.append(Table(number, names, collective, []))
            collective = None
        elif found and not found[-1].closed:
            if row := data_row(line, found[-1].names):
                found[-1].rows.append(row)
            elif found[-1].rows and any(word in line for word in CLOSING):
                found[-1].closed = True
    return found, hosts


def parse(text: str, where: str = "the output") -> AllReduce:
    """The out-of-place rows and the ranks' hosts of an all_reduce_perf output."""
    found, hosts = tables(text)
    expected = "expected all_reduce_perf's output"
    if not found or not found[0].rows:
        raise NcclTestsError(f"{where} holds no nccl-tests table (a 'size count type ... "
                             f"busbw' header and its rows): {expected}")
    for table in found:
        if (what := not_all_reduce(table)) is not None:
            raise NcclTestsError(f"{where}: {what}, not an all-reduce: {expected}")
    if len(found) > 1:
        raise NcclTestsError(
            f"{where} holds {len(found)} nccl-tests outputs (their tables at lines "
            + ", ".join(str(t.line) for t in found) + f"): {expected}, one a file")
    table = found[0]
    if not table.closed:
        last = table.rows[-1]
        raise NcclTestsError(
            f"{where} ends inside its nccl-tests table, after the {last.bytes}-byte row (no "
            f"'# Avg bus bandwidth' line after it): the output was cut short; {expected} "
            "whole")
    if not hosts or sorted(hosts) != list(range(len(hosts))):
        raise NcclTestsError(f"{where} names no ranks 0 to n-1 with their hosts ('Rank 0 "
                             f"... on HOST device 0'): {expected} whole")
    n = len(hosts)
    if (what := other_factor(table.rows, n)) is not None:
        raise NcclTestsError(f"{where}: {what} over its {n} ranks, not an all-reduce's "
                             f"2(n-1)/n = {2 * (n - 1) / n:.3g}: {expected}")
    rows = table.rows
    return AllReduce(tuple(hosts[r] for r in range(n)), tuple(r.bytes for r in rows),
                     tuple(r.seconds for r in rows), tuple(r.busbw for r in rows))


def not_all_reduce(table: Table) -> str | None:
    """What a table's starting line or columns say it is where that is not an
    all-reduce (all_reduce_perf's rows have a reduction and root -1), else None."""
    if table.collective is not None and table.collective != "all_reduce":
        return (f"its table (line {table.line}) is {table.collective}_perf's ('{STARTING} "
                f"{table.collective}...')")
    if "redop" not in table.names:
        return f"its table (line {table.line}) has no 'redop' column (another collective's)"
    if any(row.redop == "none" for row in table.rows):
        rooted = next((row.root for row in table.rows if row.root not in (None, "-1")), None)
        kind = (f"and root {rooted}: a broadcast's" if rooted is not None else
                "and root -1: an all_gather's or alltoall's")
        return f"its rows (table at line {table.line}) have redop 'none' {kind}"
    if rooted := next((row.root for row in table.rows if row.root not in (None, "-1")), None):
        return (f"its rows (table at line {table.line}) have root {rooted}: a rooted "
                "collective's (a reduce's)")
    return None


def other_factor(rows: list[Row], n: int) -> str | None:
    """What the bus bandwidth says where some row's is not 2(n-1)/n times its algorithm
    bandwidth, to the precision printed (two decimals), else None."""
    factor = 2 * (n - 1) / n
    # each figure printed to 0.005 GB/s, and 1 % besides
    off = [row for row in rows if abs(row.busbw - factor * row.algbw)
           > 0.006 * (1 + factor) + 0.01 * factor * row.algbw]
    if not off:
        return None
    row = max(off, key=lambda r: r.algbw)
    ratio = row.busbw / row.algbw if row.algbw else float("inf")
    named = {"all_gather, reduce_scatter or alltoall": (n - 1) / n,
             "broadcast, reduce or sendrecv": 1.0}
    kind = next((f" ({name}'s factor)" for name, f in named.items()
                 if abs(ratio - f) <= 0.02 * f + 0.01), "")
    return (f"the {row.bytes}-byte row's bus bandwidth is {ratio:.3g} times its algorithm "
            f"bandwidth ({row.busbw:g} / {row.algbw:g} GB/s){kind}")


def data_row(line: str, names: list[str]) -> Row | None:
    """A row under `names` (bytes, out-of-place seconds, algbw and busbw GB/s, redop,
    root), or None."""
    # at most PREFIX_WORDS words before the row: a long line is not split whole
    words = line.split(None, len(names) + PREFIX_WORDS)
    for start in range(min(PREFIX_WORDS, len(words) - len(names)) + 1):
        fields: dict[str, str] = {}
        for name, word in zip(names, words[start:start + len(names)], strict=False):
            fields.setdefault(name, word)  # the first time, algbw, busbw: out-of-place
        try:
            size, count = int(fields["size"]), int(fields["count"])
            time_us = float(fields["time"])
            algbw, busbw = float(fields["algbw"]), float(fields["busbw"])
        except (KeyError, ValueError):
            continue
        if size > 0 and count > 0 and time_us > 0:
            return Row(size, time_us / 1e6, algbw, busbw, fields.get("redop"),
                       fields.get("root"))
    return None


def ring_level(result: AllReduce) -> tuple[str, float, float]:
    """(level, latency per hop s, bus bandwidth bytes/s) of the ring the output measured
    over its n ranks: within a node where they share one host, else between nodes (a ring
    that crosses nodes goes at the pace of the network). The latency from the smallest
    sizes (their median time over 2(n-1) hops), the bandwidth from the largest, as
    nccl-tests' doc/PERFORMANCE.md reads them: small sizes measure the latency, large
    ones the bandwidth."""
    level = "within_node" if result.nodes == 1 else "between_nodes"
    n = result.ranks
    hops = 2 * (n - 1)
    smallest = sorted(result.seconds[:3])
    alpha = smallest[len(smallest) // 2] / hops if hops else 0.0
    rest = result.seconds[-1] - hops * alpha
    if n < 2:
        raise NcclTestsError(f"{n} rank: an all-reduce over one rank crosses no link "
                             "(expected 2 ranks or more)")
    if rest <= 0:
        raise NcclTestsError(f"the largest size ({result.bytes[-1]} bytes) took "
                             f"{result.seconds[-1] * 1e6:g} us, no longer than the smallest "
                             "sizes: no ring's bandwidth can be read from it (expected sizes "
                             "up to megabytes, larger sizes slower)")
    return level, alpha, hops / n * result.bytes[-1] / rest
