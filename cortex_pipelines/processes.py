"""Is the process that claimed something still the same live process?

A SIGKILLed run leaves its pid behind in a lease row or a Dagster event. `os.kill(pid, 0)` is not
enough to tell it is gone: a killed child that its parent has not reaped is a zombie that still
answers, and after a while the pid can belong to a new, unrelated process.
"""

from __future__ import annotations

import psutil

# Process start times and the time a claim was recorded come from different clocks (the kernel's
# boot-relative ticks, the claimant's wall clock); allow this much disagreement.
_CLOCK_SLACK_S = 2.0


def alive(pid: int, claimed_at: float | None = None) -> bool:
    """Whether `pid` runs and is not a zombie; with `claimed_at` (a Unix time), also whether it
    started no later than the claim, so a reused pid reads as dead."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return claimed_at is None or process.create_time() <= claimed_at + _CLOCK_SLACK_S
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
