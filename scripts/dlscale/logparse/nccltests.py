"""nccl-tests' all_reduce_perf output: the all-reduce's time per size, and its ranks' hosts.

Read without a pattern, as users paste it (a job's log, a Markdown note, mpirun's prefixes):
the column header names the columns (`size count type redop [root] time algbw busbw ...`,
out-of-place first), the rows are the lines whose fields fit it, and each rank line
(`Rank 3 Group 0 Pid 17 on HOST device 3`) names the rank's host. An output of another
collective is refused: an all-reduce's bus bandwidth is its algorithm bandwidth times
2(n-1)/n (nccl-tests' doc/PERFORMANCE.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RANK = re.compile(r"\bRank\s+(\d+)\b.*?\bon\s+(\S+)\s+device\b")


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


def columns(line: str) -> list[str] | None:
    """The column names of nccl-tests' header line, or None for another line."""
    words = line.replace("#", " ").split()
    if words[:3] == ["size", "count", "type"] and "busbw" in words:
        return words
    return None


def parse(text: str, where: str = "the output") -> AllReduce:
    """The out-of-place rows and the ranks' hosts of an all_reduce_perf output."""
    hosts: dict[int, str] = {}
    names, rows = None, []
    for line in text.splitlines():
        if found := RANK.search(line):
            hosts.setdefault(int(found[1]), found[2])
        elif names is None:
            names = columns(line)
        elif row := data_row(line, names):
            rows.append(row)
    if names is None or not rows:
        raise NcclTestsError(f"{where} holds no nccl-tests table (a 'size count type ... "
                             "busbw' header and its rows): expected all_reduce_perf's output")
    if not hosts or sorted(hosts) != list(range(len(hosts))):
        raise NcclTestsError(f"{where} names no ranks 0 to n-1 with their hosts ('Rank 0 "
                             "... on HOST device 0'): expected all_reduce_perf's whole output")
    n = len(hosts)
    big = [(algbw, busbw) for _, _, algbw, busbw in rows if algbw >= 1]
    factor = 2 * (n - 1) / n
    if big and any(abs(busbw / algbw - factor) > 0.05 * factor + 0.02 for algbw, busbw in big):
        raise NcclTestsError(f"{where}: the bus bandwidth is not 2(n-1)/n = {factor:.3g} times "
                             f"the algorithm bandwidth over its {n} ranks: not an all-reduce")
    return AllReduce(tuple(hosts[r] for r in range(n)), tuple(r[0] for r in rows),
                     tuple(r[1] for r in rows), tuple(r[3] for r in rows))


def data_row(line: str, names: list[str]) -> tuple[int, float, float, float] | None:
    """(bytes, seconds, algbw GB/s, busbw GB/s) of a row under `names`, or None."""
    words = line.split()
    # a prefix before the row (mpirun's [1,0]<stdout>:, a timestamp) is left out
    for start in range(len(words) - len(names) + 1):
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
            return size, time_us / 1e6, algbw, busbw
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
    if n < 2 or rest <= 0:
        raise NcclTestsError(f"{n} rank(s), the largest size ({result.bytes[-1]} bytes) in "
                             f"{result.seconds[-1] * 1e6:g} us: no ring's bandwidth can be "
                             "read from it (expected 2 ranks or more, larger sizes slower)")
    return level, alpha, hops / n * result.bytes[-1] / rest
