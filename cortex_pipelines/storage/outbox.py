"""Replies waiting for delivery. Rows are written in the same transaction that completes the
message; each file under outbox/<channel>/ is exported right after that commit (or by the next
process, after a crash in between) under a name fixed by the row id, so a connector never sees a
reply twice.

Delivery over HTTP (`cortex serve`) leases replies: a lease that runs out unacknowledged makes the
reply due again with one more attempt, and a reply whose attempts are used up is dead-lettered.
delivered_at is the acknowledgement, whichever consumer gave it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from cortex_pipelines.config import Paths
from cortex_pipelines.files import write_atomic
from cortex_pipelines.storage.conversations import addressed
from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows

# Where a reply goes: the chat of the message it answers (a connector's metadata.chat_id, else the
# sender), its thread, and the message replied to (metadata.message_id, else the external id).
_RECIPIENT = (
    "json_object('chat_id', coalesce(metadata->>'chat_id', sender), 'thread', thread, "
    "'message_id', coalesce(metadata->>'message_id', external_id))"
)
# A new message in the conversation of an owner's message: its chat and thread, replying to nothing.
_NEW_MESSAGE = (
    "json_object('chat_id', coalesce(metadata->>'chat_id', sender), 'thread', thread, 'message_id', NULL)"
)
_NOBODY = "json_object('chat_id', NULL, 'thread', NULL, 'message_id', NULL)"
# Not acknowledged, not dead-lettered.
_UNDELIVERED = "delivered_at IS NULL AND dead_lettered_at IS NULL"


def add(
    con, bus_id: int, channel: str, text: str, owners: list[str] | None = None, run_id: str | None = None
) -> None:
    """A reply on the message's own channel goes to its chat, thread and message. One sent to another
    channel ([[send_to:x]]) starts a new message in the conversation (chat and thread) where one of
    `owners` last wrote there; with none, its chat_id is null and the connector dead-letters it.
    `run_id` names the Dagster run that made it (None outside a run)."""
    to, _ = addressed(con, bus_id, channel, owners or [])
    recipient = _RECIPIENT if to == bus_id else _NEW_MESSAGE
    con.execute(
        f"""
        INSERT INTO outbox (bus_id, channel, text, reply_to, created_at, attempts, recipient, run_id)
        SELECT ?, ?, ?, ?, ?, 0, coalesce((SELECT {recipient} FROM bus WHERE id = ?), {_NOBODY}), ?
        ON CONFLICT (bus_id, channel) DO NOTHING
        """,
        [bus_id, channel, text, bus_id, utcnow(), to, run_id],
    )


_COLUMNS = "id, channel, text, reply_to, created_at, recipient, attempts, lease_expires_at"


def _decoded(rows: list[dict]) -> list[dict]:
    return [{**r, "recipient": json.loads(r["recipient"]) if r["recipient"] else {}} for r in rows]


def waiting(con, channel: str | None = None) -> list[dict]:
    """Replies not acknowledged and not dead-lettered (leased ones included), oldest first."""
    return _decoded(
        dict_rows(
            con.execute(
                f"SELECT {_COLUMNS} FROM outbox WHERE {_UNDELIVERED} AND (? IS NULL OR channel = ?) "
                "ORDER BY id",
                [channel, channel],
            )
        )
    )


def dead_letters(con, limit: int | None = None) -> list[dict]:
    """Dead-lettered replies, newest first, with the reason."""
    return _decoded(
        dict_rows(
            con.execute(
                f"SELECT {_COLUMNS}, dead_lettered_at, error FROM outbox "
                "WHERE dead_lettered_at IS NOT NULL AND delivered_at IS NULL "
                "ORDER BY dead_lettered_at DESC, id DESC LIMIT ?",
                [limit],
            )
        )
    )


def counts(con) -> dict[str, int]:
    """`waiting` counts leased replies too: they are not delivered until acknowledged."""
    waiting_, leased, dead = con.execute(
        f"SELECT count(*) FILTER (WHERE {_UNDELIVERED}), "
        f"count(*) FILTER (WHERE {_UNDELIVERED} AND lease_expires_at > ?), "
        "count(*) FILTER (WHERE dead_lettered_at IS NOT NULL AND delivered_at IS NULL) FROM outbox",
        [utcnow()],
    ).fetchone()
    return {"waiting": int(waiting_), "leased": int(leased), "dead_lettered": int(dead)}


def lease(con, channel: str, limit: int, lease_s: float, max_attempts: int) -> tuple[list[dict], list[dict]]:
    """Lease up to `limit` due replies of `channel` (never leased, or their lease ran out), oldest
    first; a due reply that already had `max_attempts` leases is dead-lettered instead.
    Returns (leased rows, dead-lettered rows)."""
    now = utcnow()
    dead = dict_rows(
        con.execute(
            f"UPDATE outbox SET dead_lettered_at = ?, lease_expires_at = NULL, "
            "error = 'not acknowledged after ' || attempts || ' deliveries' "
            f"WHERE channel = ? AND {_UNDELIVERED} AND attempts >= ? "
            "AND (lease_expires_at IS NULL OR lease_expires_at <= ?) RETURNING id, channel",
            [now, channel, max_attempts, now],
        )
    )
    leased = dict_rows(
        con.execute(
            f"""
            UPDATE outbox SET attempts = attempts + 1, lease_expires_at = ?
            WHERE id IN (
                SELECT id FROM outbox WHERE channel = ? AND {_UNDELIVERED}
                AND (lease_expires_at IS NULL OR lease_expires_at <= ?) ORDER BY id LIMIT ?)
            RETURNING {_COLUMNS}
            """,
            [now + timedelta(seconds=lease_s), channel, now, limit],
        )
    )
    return _decoded(sorted(leased, key=lambda r: r["id"])), dead


def acknowledge(con, ids: list[int]) -> list[dict]:
    """Mark replies delivered; one acknowledged before is left alone, and a late acknowledgement of
    a dead-lettered reply wins (it did arrive). Returns the rows newly acknowledged."""
    return dict_rows(
        con.execute(
            "UPDATE outbox SET delivered_at = ?, lease_expires_at = NULL, dead_lettered_at = NULL "
            "WHERE delivered_at IS NULL AND list_contains(?::BIGINT[], id) RETURNING id, channel",
            [utcnow(), ids],
        )
    )


def release(con, ids: list[int]) -> list[dict]:
    """Give leased replies back unsent, their lease not counted as an attempt: the connector could
    not reach its service, and an outage is no fault of the reply. Due again at once."""
    return dict_rows(
        con.execute(
            "UPDATE outbox SET lease_expires_at = NULL, attempts = attempts - 1 "
            f"WHERE {_UNDELIVERED} AND lease_expires_at IS NOT NULL AND attempts > 0 "
            "AND list_contains(?::BIGINT[], id) RETURNING id, channel",
            [ids],
        )
    )


def dead_letter(con, ids: list[int], error: str) -> list[dict]:
    """Give up on replies a connector cannot deliver (a blocked chat, a deleted thread)."""
    return dict_rows(
        con.execute(
            f"UPDATE outbox SET dead_lettered_at = ?, lease_expires_at = NULL, error = ? "
            f"WHERE {_UNDELIVERED} AND list_contains(?::BIGINT[], id) RETURNING id, channel",
            [utcnow(), error[:500], ids],
        )
    )


def requeue_dead(con, ids: list[int] | None, channel: str | None = None) -> list[int]:
    """Dead-lettered replies back in the outbox with fresh attempts (all when ids is None, of every
    channel when channel is None); their files are exported again."""
    rows = con.execute(
        "UPDATE outbox SET dead_lettered_at = NULL, error = NULL, attempts = 0, exported_at = NULL "
        "WHERE dead_lettered_at IS NOT NULL AND delivered_at IS NULL "
        "AND (? IS NULL OR list_contains(?::BIGINT[], id)) AND (? IS NULL OR channel = ?) RETURNING id",
        [ids, ids, channel, channel],
    ).fetchall()
    return sorted(r[0] for r in rows)


def reply_file(paths: Paths, outbox_id: int, channel: str) -> Path:
    return paths.outbox / channel / f"{outbox_id:010d}.json"


def collect_taken_files(con, paths: Paths, channel: str | None = None) -> int:
    """A file consumer acknowledges a reply by taking its file out of outbox/<channel>/: mark every
    exported, undelivered reply whose file is gone as delivered."""
    rows = con.execute(
        f"SELECT id, channel FROM outbox WHERE exported_at IS NOT NULL AND {_UNDELIVERED} "
        "AND (? IS NULL OR channel = ?)",
        [channel, channel],
    ).fetchall()
    taken = [oid for oid, ch in rows if not reply_file(paths, oid, ch).exists()]
    if taken:
        acknowledge(con, taken)
    return len(taken)


def last_id(con) -> int:
    return con.execute("SELECT coalesce(max(id), 0) FROM outbox").fetchone()[0]


def added_after(con, outbox_id: int) -> list[dict]:
    """Replies newer than `outbox_id`, each with the run that made it (`run_id`)."""
    return dict_rows(
        con.execute(
            "SELECT channel, text, reply_to, run_id FROM outbox WHERE id > ? ORDER BY id", [outbox_id]
        )
    )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() + "Z" if value else None


def export_files(con, paths: Paths) -> int:
    """Write a file for every undelivered reply not exported yet and mark it exported; writing a
    file again after a crash or a retried transaction is harmless (its name is fixed by the row id)."""
    rows = dict_rows(
        con.execute(
            "SELECT id, channel, text, reply_to, created_at, recipient FROM outbox "
            f"WHERE exported_at IS NULL AND {_UNDELIVERED} ORDER BY id"
        )
    )
    for row in _decoded(rows):
        body = {**row, "created_at": _iso(row["created_at"])}
        write_atomic(
            reply_file(paths, row["id"], row["channel"]),
            json.dumps(body, ensure_ascii=False, indent=2) + "\n",
        )
    if rows:
        con.execute(
            "UPDATE outbox SET exported_at = ? WHERE id IN (SELECT unnest(?))",
            [utcnow(), [r["id"] for r in rows]],
        )
    return len(rows)
