"""Which parts of a reply a connector has already sent: its own SQLite file, kept across restarts.

Telegram takes no idempotency key, so a reply whose acknowledgement was lost comes back after its
lease and would be sent again. The connector notes each part as soon as Telegram accepted it; a reply
that comes back resumes after its noted parts, and one whose parts were all noted is only
acknowledged. A part whose request went out but whose answer timed out is noted too (it was most
likely delivered). What remains is a kill during the sendMessage call itself. The file is the
connector's alone (not DuckDB), so it may stay open while the connector runs.

A reply is known by its outbox id, creation time and text together (`reply_key`): `cortex doctor
--restore` hands out outbox ids again, and a new reply under a used id is not the one sent.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

KEEP_DAYS = 14  # far beyond any lease: a note is only needed until its reply is acknowledged


def connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, isolation_level=None)  # autocommit: a note is durable at once
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    # The notes before reply_key, by outbox id alone, cannot tell a reused id from its old reply.
    con.execute("DROP TABLE IF EXISTS sent_parts")
    con.execute(
        "CREATE TABLE IF NOT EXISTS parts_sent (reply TEXT, part INTEGER, sent_at REAL,"
        " PRIMARY KEY (reply, part))"
    )
    con.execute("DELETE FROM parts_sent WHERE sent_at < ?", (time.time() - KEEP_DAYS * 86400,))
    return con


def reply_key(reply: dict) -> str:
    """A polled reply's identity: its id with what a reused id cannot repeat."""
    identity = json.dumps([reply["id"], reply["created_at"], reply["text"]], ensure_ascii=False)
    return hashlib.sha256(identity.encode()).hexdigest()


def parts_sent(con: sqlite3.Connection, reply: str) -> set[int]:
    return {part for (part,) in con.execute("SELECT part FROM parts_sent WHERE reply = ?", (reply,))}


def note_part_sent(con: sqlite3.Connection, reply: str, part: int) -> None:
    con.execute("INSERT OR IGNORE INTO parts_sent VALUES (?, ?, ?)", (reply, part, time.time()))
