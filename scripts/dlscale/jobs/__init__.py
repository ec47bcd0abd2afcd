"""The job around a point: SLURM's commands and answers (the only module that runs them),
processes and their ends, the job's phases, the lock that says who owns a point, how a
point ended."""
