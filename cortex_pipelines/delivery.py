"""Delivering replies: the one API over the outbox that the gateway, the CLI, `cortex status` and the
admin chat share. Connectors lease replies of their channel, send them and acknowledge them; a reply
whose leases keep running out is dead-lettered, and so is one a connector cannot deliver.

The file outbox (outbox/<channel>/<id>.json) is one more consumer of the same state: a reply
acknowledged or dead-lettered over HTTP loses its file, and a file taken out of the folder
acknowledges its reply."""

from __future__ import annotations

import contextlib
import logging
import os
from datetime import datetime
from pathlib import Path

from cortex_pipelines.config import Settings
from cortex_pipelines.storage import Database, outbox

log = logging.getLogger(__name__)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() + "Z" if value else None


def _drop_files(settings: Settings, rows: list[dict]) -> None:
    """After the commit: a file left behind by a crash here is only a stale copy of a settled reply."""
    for row in rows:
        with contextlib.suppress(OSError):
            outbox.reply_file(settings.paths, row["id"], row["channel"]).unlink(missing_ok=True)


def message(row: dict) -> dict:
    """A reply as /outbox/poll and `cortex outbox --json` show it."""
    return {
        "id": row["id"],
        "channel": row["channel"],
        "text": row["text"],
        "recipient": row["recipient"],
        "reply_to": row["reply_to"],
        "attempt": row["attempts"],
        "lease_expires_at": _iso(row["lease_expires_at"]),
        "created_at": _iso(row["created_at"]),
    }


def poll(db: Database, settings: Settings, channel: str, limit: int) -> list[dict]:
    """Lease up to `limit` replies of `channel` for CORTEX_OUTBOX_LEASE_SECONDS."""
    db.run(outbox.collect_taken_files, settings.paths, channel)
    leased, dead = db.run(
        outbox.lease, channel, limit, settings.outbox_lease_seconds, settings.outbox_max_attempts
    )
    _drop_files(settings, dead)
    return [message(row) for row in leased]


def ack(db: Database, settings: Settings, ids: list[int]) -> int:
    """Acknowledge delivered replies; returns how many were not acknowledged before."""
    done = db.run(outbox.acknowledge, ids)
    _drop_files(settings, done)
    return len(done)


def release(db: Database, ids: list[int]) -> int:
    """Give leased replies back unsent and uncounted; returns how many were leased."""
    return len(db.run(outbox.release, ids))


def dead_letter(db: Database, settings: Settings, ids: list[int], error: str) -> int:
    """Give up on replies that cannot be delivered; returns how many were still undelivered."""
    dead = db.run(outbox.dead_letter, ids, error)
    _drop_files(settings, dead)
    return len(dead)


def requeue_dead(
    db: Database, settings: Settings, ids: list[int] | None, channel: str | None = None
) -> list[int]:
    """Dead-lettered replies back in the outbox (all when ids is None, of every channel when channel
    is None), their files exported again."""
    requeued = db.run(outbox.requeue_dead, ids, channel)
    if requeued:
        db.run(outbox.export_files, settings.paths)
    return requeued


def dead_letters(db: Database) -> list[dict]:
    """Dead-lettered replies, newest first, each with when and why."""
    return [
        {**message(row), "dead_lettered_at": _iso(row["dead_lettered_at"]), "error": row["error"]}
        for row in db.run(outbox.dead_letters)
    ]


def waiting(db: Database, settings: Settings, channel: str | None = None) -> list[dict]:
    db.run(outbox.collect_taken_files, settings.paths, channel)
    return [message(row) for row in db.run(outbox.waiting, channel)]


def counts(db: Database, settings: Settings) -> dict[str, int]:
    """{"waiting", "leased", "dead_lettered"}; `waiting` includes leased replies."""
    db.run(outbox.collect_taken_files, settings.paths)
    _say_unwritable(settings.paths.outbox)
    return db.run(outbox.counts)


def _say_unwritable(folder: Path) -> None:
    """The brain goes on when it cannot write a reply file (the row waits, and the next export
    writes it) and says so only in the run log: `cortex run` and `cortex status`, which count the
    outbox, say it in one line."""
    try:
        folders = [folder, *sorted(c for c in folder.iterdir() if c.is_dir() and not c.name.startswith("."))]
    except OSError:  # missing (init makes it) or unreadable: the write fails with its own line
        return
    unwritable = next((f for f in folders if not os.access(f, os.W_OK | os.X_OK)), None)
    if unwritable:
        log.warning(
            "%s is not writable by this user: reply files wait unwritten; to repair: chmod u+rwx %s",
            unwritable,
            unwritable,
        )
