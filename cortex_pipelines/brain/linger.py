"""A processing run that lingers: after the bus runs dry it keeps watching for new messages for an
idle window, so a conversation is answered at once instead of waiting for a sensor tick, the run
queue and a new run's process start-up (docs/process-model.md, "Serial answering").

While it waits it holds no DuckDB connection: every POLL_S it looks at the inbox folders and the
bus's doorbell (storage/bus.py) and opens the file only when one of them changed, when a message
held back for a retry comes due, or to renew the brain lease. It ingests inbox files itself, with
the inbox sensor's idempotent ingest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from cortex_pipelines.config import Settings
from cortex_pipelines.files import mtime_ns
from cortex_pipelines.ingest.inbox import IngestReport, ingest_inbox
from cortex_pipelines.storage import Database, bus, lease
from cortex_pipelines.storage.db import utcnow

if TYPE_CHECKING:
    from cortex_pipelines.brain.loop import DrainReport

POLL_S = 0.1
HEARTBEAT_S = 30.0  # while waiting; at most a third of the lease timeout


def arrival_signature(inbox: Path, db_path: Path) -> tuple:
    """What changes when a message may have arrived: the bus's doorbell, the inbox and its channel
    folders (a file renamed into a folder changes the folder's mtime). Opens nothing."""
    folders: list[tuple[str, int | None]] = []
    with suppress(OSError), os.scandir(inbox) as entries:
        folders = sorted((e.name, mtime_ns(e.path)) for e in entries if e.is_dir(follow_symlinks=False))
    return mtime_ns(bus.doorbell(db_path)), mtime_ns(inbox), tuple(folders)


def _look(con) -> tuple[int, object]:
    """Renew the lease; how many messages are due, and when the next retry comes due."""
    lease.heartbeat(con)
    return bus.due_pending(con)[0], bus.next_retry_at(con)


class Linger:
    """Waits for the next message after a drain: `wait_for_messages` returns True when messages are
    due, False once `idle_s` passed without an answer or the run lasted `limit_s`."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        idle_s: float,
        limit_s: float,
        on_batch: Callable[[DrainReport], None] = lambda _: None,
        on_ingest: Callable[[IngestReport], None] = lambda _: None,
        stops: tuple[type[BaseException], ...] = (KeyboardInterrupt,),
    ):
        self.db, self.settings, self.idle_s = db, settings, idle_s
        self.on_batch, self.on_ingest = on_batch, on_ingest
        self.stops = stops  # how SIGINT and SIGTERM arrive: they end the wait, and the run, cleanly
        self._deadline = time.monotonic() + limit_s
        self._quiet_since = time.monotonic()
        self._started_ns = time.time_ns()
        self._heartbeat_s = min(HEARTBEAT_S, settings.lease_timeout_s / 3)

    def _messages_due(self) -> tuple[bool, float]:
        """Ingest what the inbox holds; whether messages are due, and when to look again even if
        nothing changes (a retry coming due, the lease to renew)."""
        report = ingest_inbox(self.settings, self.db)
        if report.accepted or report.rejected:
            self.on_ingest(report)
        due, retry_at = self.db.run(_look)
        look_again = time.monotonic() + self._heartbeat_s
        if retry_at is not None:
            look_again = min(look_again, time.monotonic() + (retry_at - utcnow()) / timedelta(seconds=1))
        return due > 0, look_again

    def wait_for_messages(self, answered: bool) -> bool:
        """Block until messages are due (True), or until the idle window or the run's limit passes or
        another process asks for the brain lane (False). `answered`: the drain just answered
        messages, so the idle window starts again."""
        if answered:
            self._quiet_since = time.monotonic()
        end = min(self._quiet_since + self.idle_s, self._deadline)
        seen, look_again = None, 0.0
        wanted = lease.lane_wanted(self.db.path)
        try:
            while time.monotonic() < end and (mtime_ns(wanted) or 0) < self._started_ns:
                signature = arrival_signature(self.settings.paths.inbox, self.db.path)
                if signature != seen or time.monotonic() >= look_again:
                    seen = signature  # taken before looking: a change during the look is seen next poll
                    due, look_again = self._messages_due()
                    if due:
                        return True
                time.sleep(POLL_S)
        except self.stops:  # nothing is cut short: every answer so far is committed
            return False
        return False
