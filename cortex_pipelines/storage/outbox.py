"""Replies waiting for delivery. Rows are written in the same transaction that completes the
message; each file under outbox/<channel>/ is exported right after that commit (or by the next
process, after a crash in between) under a name fixed by the row id, so a connector never sees a
reply twice."""

from __future__ import annotations

import json

from cortex_pipelines.config import Paths
from cortex_pipelines.files import write_atomic
from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows


def add(con, bus_id: int, channel: str, text: str) -> None:
    con.execute(
        "INSERT INTO outbox (bus_id, channel, text, reply_to, created_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (bus_id, channel) DO NOTHING",
        [bus_id, channel, text, bus_id, utcnow()],
    )


def waiting(con, channel: str | None = None) -> list[dict]:
    return dict_rows(
        con.execute(
            "SELECT id, channel, text, reply_to, created_at FROM outbox "
            "WHERE delivered_at IS NULL AND (? IS NULL OR channel = ?) ORDER BY id",
            [channel, channel],
        )
    )


def last_id(con) -> int:
    return con.execute("SELECT coalesce(max(id), 0) FROM outbox").fetchone()[0]


def added_after(con, outbox_id: int) -> list[dict]:
    return dict_rows(
        con.execute("SELECT channel, text, reply_to FROM outbox WHERE id > ? ORDER BY id", [outbox_id])
    )


def export_files(con, paths: Paths) -> int:
    """Write a file for every reply not exported yet and mark it exported; writing a file again after
    a crash or a retried transaction is harmless (its name is fixed by the row id)."""
    rows = dict_rows(
        con.execute(
            "SELECT id, channel, text, reply_to, created_at FROM outbox WHERE exported_at IS NULL ORDER BY id"
        )
    )
    for row in rows:
        body = {**row, "created_at": row["created_at"].isoformat() + "Z"}
        write_atomic(
            paths.outbox / row["channel"] / f"{row['id']:010d}.json",
            json.dumps(body, ensure_ascii=False, indent=2) + "\n",
        )
    if rows:
        con.execute(
            "UPDATE outbox SET exported_at = ? WHERE id IN (SELECT unnest(?))",
            [utcnow(), [r["id"] for r in rows]],
        )
    return len(rows)
