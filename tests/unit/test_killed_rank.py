"""A point of several local workers (launch.py --plan '{"tasks": 2}') one of whose ranks is
killed by a signal: the point is `killed`, naming the rank and the signal, not `failed`
with the error rank 0 then recorded (gloo's "Connection reset by peer" when its peer
went away)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from conftest import SCRIPTS

from dlscale.launch.workers import first_failure

# Two workers as DDP's ranks behave: rank 1 connects to rank 0's port (TF_CONFIG, as the
# rendezvous), rank 0 waits on the connection; when rank 1 dies rank 0's read fails and it
# records that error as train.py does (driver.record_failure: status failed) and exits 1.
WORKER = r'''
import json, os, socket, sys, time
from datetime import UTC, datetime
from pathlib import Path

from dlscale.core.contract import RunRecord, Status
from dlscale.jobs import phases

out = Path(sys.argv[1])
config = json.loads(os.environ["TF_CONFIG"])
host, port = config["cluster"]["worker"][0].rsplit(":", 1)
if config["task"]["index"] == 0:
    server = socket.create_server((host, int(port)))
    peer, _ = server.accept()
    peer.sendall(b"go")
    try:
        got = peer.recv(1)
        error = "Connection closed by peer" if not got else "unexpected"
    except ConnectionResetError as exc:
        error = str(exc)
    phases.finish(RunRecord.ending(
        Status.FAILED, f"RuntimeError: [gloo] Read error: {error}", {"gpus_asked": 2},
        started=datetime.now(UTC).isoformat(timespec="seconds")), out)
    sys.exit(1)
for _ in range(200):
    try:
        peer = socket.create_connection((host, int(port)))
        break
    except OSError:
        time.sleep(0.05)
peer.recv(2)
(out / "rank1.pid").write_text(str(os.getpid()))
time.sleep(120)
'''


def test_one_rank_killed_by_sigkill_is_a_killed_point_naming_the_rank(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    out = tmp_path / "run"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=str(SCRIPTS))
    launch = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "launch.py"), "--plan", '{"tasks": 2}', "--record",
         str(out), "--", sys.executable, str(worker), str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "rank1.pid").exists() and launch.poll() is None:
            assert time.monotonic() < deadline, "rank 1 never started"
            time.sleep(0.05)
        assert launch.poll() is None, launch.stdout.read()
        os.kill(int((out / "rank1.pid").read_text()), signal.SIGKILL)
        said = launch.communicate(timeout=60)[0]
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "killed", (run, said)
    assert run["failure"].startswith(
        "rank 1 of the training's 2 processes was killed by SIGKILL"), run["failure"]
    assert any(n.startswith("rank 0 then recorded failed: RuntimeError: [gloo]")
               for n in run["notes"]), run["notes"]
    # one attempt, killed: rank 0's failed line was taken back with its record
    attempts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert [a["status"] for a in attempts] == ["killed"]


class Ended:
    def __init__(self, returncode):
        self.returncode = returncode


def test_the_rank_blamed_is_the_one_killed_from_outside_not_the_error_it_caused():
    """Seen in the same poll: rank 0's error exit (1) and rank 1's SIGKILL blame rank 1;
    NCCL's watchdog abort (SIGABRT) counts as an error; a running rank (None) is none."""
    assert first_failure([Ended(1), Ended(-signal.SIGKILL)]) == 1
    assert first_failure([Ended(-signal.SIGABRT), Ended(4)]) == 0
    assert first_failure([Ended(1), Ended(-signal.SIGABRT), Ended(-signal.SIGTERM)]) == 2
    assert first_failure([Ended(None), Ended(0)]) is None
