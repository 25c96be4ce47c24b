"""The brain lease: at most one process drains the bus at a time, across Dagster runs and the CLI.

A holder is stale when its process is gone (same host) or its heartbeat is older than the lease
timeout; only then may another process take over and recover what it left in 'processing'.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from pathlib import Path

from cortex_pipelines import processes
from cortex_pipelines.files import touch
from cortex_pipelines.storage.db import utcnow

NAME = "brain"


class BrainBusy(RuntimeError):
    """Another live process is draining the bus; it will take the new messages too."""


def _stale(row: tuple, timeout_s: float) -> bool:
    _, host, pid, beat = row
    return utcnow() - beat > timedelta(seconds=timeout_s) or (
        host == socket.gethostname() and not processes.alive(pid)
    )


def holder_alive(con, timeout_s: float) -> bool:
    """Whether some live process is draining the bus right now."""
    row = con.execute(
        "SELECT holder, host, pid, heartbeat_at FROM brain_lease WHERE name = ?", [NAME]
    ).fetchone()
    return row is not None and not _stale(row, timeout_s)


def acquire(con, holder: str, timeout_s: float) -> bool:
    """Take the lease. Returns True when the previous holder died (its work must be recovered).
    Raises BrainBusy while a live process holds it."""
    host, pid = socket.gethostname(), os.getpid()
    row = con.execute(
        "SELECT holder, host, pid, heartbeat_at FROM brain_lease WHERE name = ?", [NAME]
    ).fetchone()
    if row is not None:
        _, old_host, old_pid, _ = row
        same_process = old_host == host and old_pid == pid
        if not same_process and not _stale(row, timeout_s):
            raise BrainBusy(f"the bus is being drained by pid {old_pid} on {old_host}")
    con.execute(
        "INSERT OR REPLACE INTO brain_lease (name, holder, host, pid, heartbeat_at) VALUES (?, ?, ?, ?, ?)",
        [NAME, holder, host, pid, utcnow()],
    )
    return row is not None


class LeaseLost(BrainBusy):
    """This process's lease was taken over (it hung past the lease timeout): the new holder
    recovered what it had claimed and answers the queue now, so this one must stop touching it."""


def held(con) -> bool:
    """Whether this process still holds the lease."""
    row = con.execute(
        "SELECT 1 FROM brain_lease WHERE name = ? AND pid = ? AND host = ?",
        [NAME, os.getpid(), socket.gethostname()],
    ).fetchone()
    return row is not None


def heartbeat(con) -> None:
    """Raises LeaseLost when another process took the lease over."""
    row = con.execute(
        "UPDATE brain_lease SET heartbeat_at = ? WHERE name = ? AND pid = ? AND host = ? RETURNING 1",
        [utcnow(), NAME, os.getpid(), socket.gethostname()],
    ).fetchone()
    if row is None:
        raise LeaseLost("another process took the brain lease over while this one hung; it answers the queue")


def release(con) -> None:
    con.execute(
        "DELETE FROM brain_lease WHERE name = ? AND pid = ? AND host = ?",
        [NAME, os.getpid(), socket.gethostname()],
    )


def lane_wanted(db_path: Path) -> Path:
    """A file touched by a process that waits for the brain lane (`cortex run` beside `cortex dev`):
    a run lingering for messages (brain/linger.py) ends rather than make it wait out the idle window."""
    return db_path.with_name(db_path.name + ".wanted")


def want_lane(db_path: Path) -> None:
    touch(lane_wanted(db_path))
