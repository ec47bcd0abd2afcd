"""The formats dlscale reads logs in: the registry. Each format is a module of its own
with one face: its `NAME`, and a `Reader` whose `read(number, text)` takes a line that is
the format's (True) or leaves it to the next (False). A format imports only the shared
machinery (dlscale.logparse.lines, .runs, .templates), never another format (a test
says so).

Adding a format: its module here, its line below, its test (docs/development.md).
"""

from dlscale.logparse.formats import (
    custom,
    dllogger,
    epochrate,
    examples,
    hftrainer,
    keras,
    launch,
    llm,
    mined,
    mllog,
    richbar,
    stated,
    totals,
    tqdm,
)

# Formats whose lines are the whole log's (runs.LogFormat): from the first line that
# begins with their MARK; the first of them that finds runs gives the log's runs.
LOG = (mllog, dllogger)
# One stream's formats (runs.StreamFormat): each line is offered to them in this order
# until one reads it. The user's patterns first; Keras' lines, most of a long log, next;
# last the lines no format took, mined for a script's own epoch line at the stream's end.
STREAM = (custom, keras, tqdm, richbar, examples, hftrainer, epochrate, totals, llm, stated,
          mined)
# What the lines say of the launch (the GPU count and nodes where a run states none).
LAUNCH = launch
