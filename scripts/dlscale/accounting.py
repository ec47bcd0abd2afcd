"""What SLURM accounted for a point's job (sacct), for its row in runs.csv.

Read after the job ended, by the rule that tabulates the run (on the login node): the
job's state and elapsed time, its CPU time, the largest resident memory of any of its
steps (MaxRSS is per step: the steps' maximum, never a sum), the energy the site measured
for the allocation (ConsumedEnergyRaw of the job's own line, never summed over steps; 0
or empty means the site does not measure it: left empty) and the allocation's TRES.
Where sacct is missing or accounting is off, the columns are empty and `note` says why.
"""

from __future__ import annotations

import re
import subprocess

COLUMNS = ("sacct_state", "sacct_elapsed_s", "sacct_cpu_s", "sacct_max_rss_mb",
           "sacct_energy_j", "sacct_alloc_tres")
FIELDS = "JobID,State,ElapsedRaw,TotalCPU,MaxRSS,ConsumedEnergyRaw,AllocTRES"
MEMORY = {"": 1 / 1024 ** 2, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2}


def cpu_seconds(text: str) -> float | None:
    """sacct's TotalCPU ([DD-][HH:]MM:SS[.sss]) in seconds."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)", text.strip())
    if m is None:
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def megabytes(text: str) -> float | None:
    """sacct's MaxRSS (1234K, 56M, 1.5G; bytes without a unit) in MiB."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip())
    return None if m is None else float(m.group(1)) * MEMORY[m.group(2)]


def parse(job: str, text: str) -> dict:
    """The columns from `sacct -j JOB -n -P -o FIELDS`' output."""
    found = dict.fromkeys(COLUMNS)
    rss = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 7:
            continue
        job_id, state, elapsed, total_cpu, max_rss, energy, tres = parts
        if max_rss and (value := megabytes(max_rss)) is not None:
            rss.append(value)
        if job_id != job:
            continue  # a step's line: only its memory counts
        found["sacct_state"] = state.split()[0] if state else None  # "CANCELLED by 0"
        found["sacct_elapsed_s"] = float(elapsed) if elapsed.isdigit() else None
        found["sacct_cpu_s"] = cpu_seconds(total_cpu) if total_cpu else None
        joules = float(energy) if re.fullmatch(r"\d+(?:\.\d+)?", energy or "") else 0.0
        found["sacct_energy_j"] = joules or None  # 0: not measured by the site
        found["sacct_alloc_tres"] = tres or None
    found["sacct_max_rss_mb"] = max(rss) if rss else None
    return found


def job_accounting(job: str | None) -> tuple[dict, str | None]:
    """(the columns, a note when they are empty) for SLURM job `job`."""
    empty = dict.fromkeys(COLUMNS)
    if not job:
        return empty, None  # not a SLURM job: nothing to say
    try:
        proc = subprocess.run(["sacct", "-j", str(job), "-n", "-P", "-o", FIELDS],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return empty, f"no job accounting: sacct could not be run ({exc})"
    if proc.returncode != 0 or not proc.stdout.strip():
        why = (proc.stderr.strip().splitlines() or ["it knows no such job"])[-1]
        return empty, f"no job accounting for job {job}: sacct says: {why}"
    return parse(str(job), proc.stdout), None
