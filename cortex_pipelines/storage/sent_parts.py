"""Which parts of a reply a connector has already sent: its own SQLite file, kept across restarts.

Telegram takes no idempotency key, so a reply whose acknowledgement was lost comes back after its
lease and would be sent again. The connector notes each part as soon as Telegram accepted it; a reply
that comes back resumes after its noted parts, and one whose parts were all noted is only
acknowledged. A part whose request went out but whose answer timed out is noted too (it was most
likely delivered). What remains is a kill during the sendMessage call itself. The file is the connector's
alone (not DuckDB), so it may stay open while the connector runs.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

KEEP_DAYS = 14  # far beyond any lease: a note is only needed until its reply is acknowledged


def connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, isolation_level=None)  # autocommit: a note is durable at once
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute(
        "CREATE TABLE IF NOT EXISTS sent_parts (reply_id INTEGER, part INTEGER, sent_at REAL,"
        " PRIMARY KEY (reply_id, part))"
    )
    con.execute("DELETE FROM sent_parts WHERE sent_at < ?", (time.time() - KEEP_DAYS * 86400,))
    return con


def parts_sent(con: sqlite3.Connection, reply_id: int) -> set[int]:
    return {part for (part,) in con.execute("SELECT part FROM sent_parts WHERE reply_id = ?", (reply_id,))}


def note_part_sent(con: sqlite3.Connection, reply_id: int, part: int) -> None:
    con.execute("INSERT OR IGNORE INTO sent_parts VALUES (?, ?, ?)", (reply_id, part, time.time()))
