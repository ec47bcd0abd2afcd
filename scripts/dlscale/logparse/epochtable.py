"""A run's epochs as a table (`EpochTable`, `ParsedLog.epochs` of dlscale.logparse.runs):
one column of doubles per field, the log line where each epoch ended beside them.
"""

from __future__ import annotations

from array import array
from math import nan as NAN


class EpochTable:
    """A run's finished epochs by number, stored as a table: one column of doubles per
    field, not a dict per epoch (a 200 MB log can hold millions of epochs; a dict and its
    floats cost about 700 bytes each, a row here about 100). A field that an epoch lacks
    or holds as None is NaN in its column and named in `special`; a NaN that was logged
    is only NaN. Reads give each epoch as a dict of its own: a change goes through `set`."""

    ABSENT, NONE = 0, 1

    def __init__(self):
        self.index: dict[int, int] = {}  # epoch -> row, in the order epochs first came
        self.columns: dict[str, array] = {}
        self.special: dict[tuple[str, int], int] = {}  # (field, row) -> ABSENT or NONE
        # each column's kind: float, int or bool, or None while it has no value (its NaN
        # are None then, unless absent)
        self.kinds: dict[str, type | None] = {}
        self.unset = 0  # how many columns have no value so far
        self.lines = array("q")  # each row's log line (`ended`), 0 where not known

    def __len__(self) -> int:
        return len(self.index)

    def __bool__(self) -> bool:
        return bool(self.index)

    def __contains__(self, epoch) -> bool:
        return epoch in self.index

    def __iter__(self):
        return iter(self.index)

    def keys(self):
        return self.index.keys()

    def items(self):
        return ((epoch, self.row(row, epoch)) for epoch, row in self.index.items())

    def get(self, epoch: int, default=None) -> dict | None:
        row = self.index.get(epoch)
        return default if row is None else self.row(row, epoch)

    def __getitem__(self, epoch: int) -> dict:
        return self.row(self.index[epoch], epoch)

    def row(self, row: int, epoch: int | None = None) -> dict:
        """A row as the epoch's record ({"epoch": epoch, field: value...})."""
        record = {} if epoch is None else {"epoch": epoch}
        kinds = self.kinds
        for name, values in self.columns.items():
            value = values[row]
            kind = kinds.get(name)  # None: a column only ever None so far
            if value != value:  # NaN: logged so (a float's), or a missing field
                if kind is None:
                    if self.special.get((name, row)) != self.ABSENT:
                        record[name] = None
                    continue
                if kind is not float:
                    record[name] = None  # counts, flags: never NaN when logged
                    continue
                special = self.special.get((name, row))
                if special == self.ABSENT:
                    continue
                if special == self.NONE:
                    record[name] = None
                    continue
            record[name] = value if kind is float else kind(value)
        return record

    def __setitem__(self, epoch: int, record: dict) -> None:
        self.add(epoch, record)

    def add(self, epoch: int, record: dict, line: int = 0) -> None:
        """An epoch's record (replacing any before), and the log line where it ended (0:
        not known; an epoch there keeps its line)."""
        row = self.index.get(epoch)
        columns = self.columns
        if row is None and record.keys() == columns.keys():  # the common case: a new
            row = self.index[epoch] = len(self.index)        # epoch with the same fields
            self.lines.append(line)
            kinds = self.kinds
            for name, value in record.items():
                if value is None:
                    value = NAN
                    if kinds[name] is float:  # (a column never set: None implied)
                        self.special[name, row] = self.NONE
                elif self.unset and kinds[name] is None:
                    self.first_value(name, value)
                columns[name].append(value)
            return
        if not self.index:  # the first epoch: its fields are the columns
            self.index[epoch] = 0
            self.lines.append(line)
            for name, value in record.items():
                columns[name] = array("d", [NAN if value is None else value])
                self.kinds[name] = kind = kind_of(value)
                self.unset += kind is None
            return
        if row is None:
            row = self.index[epoch] = len(self.index)
            self.lines.append(line)
            for name, values in columns.items():
                values.append(NAN)
                self.special[name, row] = self.ABSENT
        else:
            if line:
                self.lines[row] = line
            for name, values in columns.items():
                values[row] = NAN
                self.special[name, row] = self.ABSENT
        for name, value in record.items():
            self.set(epoch, name, value, row)

    def set(self, epoch: int, name: str, value, row: int | None = None) -> None:
        """One field of an epoch that is there."""
        if row is None:
            row = self.index[epoch]
        values = self.columns.get(name)
        if values is None:
            values = self.columns[name] = array("d", [NAN]) * len(self.index)
            self.special.update(((name, r), self.ABSENT) for r in range(len(self.index)))
            self.kinds[name] = None
            self.unset += 1
        if value is None:
            values[row] = NAN
            if self.kinds[name] is float:
                self.special[name, row] = self.NONE
            else:
                self.special.pop((name, row), None)
            return
        if self.kinds[name] is None:
            self.first_value(name, value)
        self.special.pop((name, row), None)
        values[row] = value

    def keep_slower(self, epoch: int, seconds: float, line: int) -> None:
        """Another worker's line for an epoch that is there: its time where slower, its
        line where later (the slowest worker's time counts; the epoch ends at its last
        line)."""
        row = self.index[epoch]
        if seconds > self.columns["seconds"][row]:
            self.set(epoch, "seconds", seconds, row)
        if line > self.lines[row]:
            self.lines[row] = line

    def ended(self) -> dict[int, int]:
        """epoch -> the log line where its result (its last worker's) came, where known."""
        lines = self.lines
        return {epoch: lines[row] for epoch, row in self.index.items() if lines[row]}

    def first_value(self, name: str, value) -> None:
        """A column's first value: its kind, and its rows so far None where not absent."""
        self.unset -= 1
        self.kinds[name] = kind = kind_of(value)
        if kind is float:
            for row in range(len(self.columns[name])):
                self.special.setdefault((name, row), self.NONE)

    def compact(self) -> None:
        """Once no epoch will be added: each column's room for more given back."""
        for name, values in self.columns.items():
            self.columns[name] = array("d", values)
        self.lines = array("q", self.lines)


def kind_of(value) -> type | None:
    return None if value is None else bool if isinstance(value, bool) else (
        int if isinstance(value, int) else float)
