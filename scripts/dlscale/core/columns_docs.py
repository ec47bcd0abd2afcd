"""docs/analysis.md's table of every column (dlscale.core.columns) with its unit, meaning
and source, written between its markers by `make docs`; a test compares them.

  python -m dlscale.core.columns_docs                          # the table, on stdout
  python -m dlscale.core.columns_docs --write docs/analysis.md  # between its markers
"""

from __future__ import annotations

from dlscale.core.columns import (
    ACCOUNTED,
    BREAKDOWN,
    EPOCHS,
    LOG_COLUMNS,
    LOG_FACTS,
    PREDICTION,
    RUNS,
    SCALING,
    Column,
)


def render() -> str:
    """The Markdown table of every column with its unit, meaning and source."""
    lines = ["| column | table | unit | meaning | from |", "|---|---|---|---|---|"]
    for table, columns in (("scaling.csv", SCALING), ("runs.csv", RUNS + ACCOUNTED),
                           ("epochs.csv", EPOCHS),
                           ("epochs.csv (parse-log)", LOG_COLUMNS + LOG_FACTS),
                           ("breakdown.csv", BREAKDOWN),
                           ("prediction.csv", PREDICTION)):
        lines += [f"| `{c.name}` | {table}{', runs.csv' if c.runs and c in SCALING else ''} "
                  f"| {c.unit or '-'} | {c.meaning} | {_origin(c)} |" for c in columns]
    return "\n".join(lines) + "\n"


def _origin(column: Column) -> str:
    if column.source:
        return f"`{column.source}`"
    return "the runs" if column.measured else "computed"


BEGIN, END = "<!-- columns: generated -->\n", "<!-- columns: end -->\n"


def write(path: str) -> None:
    """Replace what stands between BEGIN and END in `path` with render()'s table."""
    from pathlib import Path

    text = Path(path).read_text()
    head, begun, rest = text.partition(BEGIN)
    _, ended, tail = rest.partition(END)
    if not (begun and ended):  # a lost marker would drop everything after the table
        missing = " and ".join(m.strip() for m, found in ((BEGIN, begun), (END, ended))
                               if not found)
        raise SystemExit(f"error: {path} lacks {missing}: expected the generated table "
                         f"between {BEGIN.strip()} and {END.strip()}; nothing written")
    Path(path).write_text(head + BEGIN + render() + END + tail)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"]:
        write(sys.argv[2])
    else:
        print(render(), end="")
