"""dlscale.pluginfix: the SLURM plugin reads a cancelled job's sacct state as cancelled."""

import asyncio
import logging
import shlex
from pathlib import Path

import snakemake_executor_plugin_slurm as plugin

from dlscale.pluginfix import first_word_states, mend_cancelled_states

SACCT = Path(__file__).parents[1] / "data" / "sacct" / "job9.txt"  # real: CANCELLED by 0


def test_the_plugins_status_query_reads_cancelled_by_a_uid_as_cancelled(monkeypatch):
    command = shlex.join(["cat", str(SACCT)])  # sacct's answer, as the plugin parses it
    logger = logging.getLogger("test")
    unmended = asyncio.run(plugin.query_job_status(command, logger))[0]
    # the plugin's own reading (2.8.0): the whole string, which it takes for running;
    # once a release reads the first word itself, this workaround can go
    assert unmended["9"] == "CANCELLED by 0"
    monkeypatch.setattr(plugin, "query_job_status", plugin.query_job_status)
    assert mend_cancelled_states() and mend_cancelled_states()  # once, and idempotent
    states = asyncio.run(plugin.query_job_status(command, logger))[0]
    assert states == {**unmended, "9": "CANCELLED"}


def test_states_of_one_word_and_no_answer_are_left_as_they_are():
    assert first_word_states({"5": "RUNNING", "6": "PENDING"}) == {"5": "RUNNING",
                                                                   "6": "PENDING"}
    assert first_word_states(None) is None and first_word_states({}) == {}
