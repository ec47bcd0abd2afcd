#!/usr/bin/env python3
"""Run one point of your own training command (sweep.commands) and record it.

  run_command.py --command "python my_train.py --gpus {gpus} --epochs {epochs}" \\
      --model MyTrain --gpus 2 --batch-per-gpu 32 --epochs 5 --lr 0.02 \\
      --out results/runs/MyTrain/gpus2/rep1

The command's placeholders are filled (each value quoted), it runs with bash, and its
output goes to the run folder's train.log; epochs.jsonl and run.json are then written
from what the output says (see dlscale/launch/command.py). Exit status: 0 completed, 1 failed
(run.json says why); stopped by a signal, it dies of that signal and launch.py records it.
"""

from __future__ import annotations

import sys

from dlscale.launch.command import main

if __name__ == "__main__":
    sys.exit(main())
