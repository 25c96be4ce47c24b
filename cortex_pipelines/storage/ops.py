"""Delegated work (sessions_spawn): pending → completed|failed, unread until the next LLM turn."""

from __future__ import annotations

import uuid
from datetime import timedelta

from cortex_pipelines.storage.db import Database, utcnow
from cortex_pipelines.storage.rows import dict_rows

ORPHANED = "orphaned from prior session (startup cleanup)"


def spawn(db: Database, bus_id: int, description: str, expected_channel: str, deadline_h: float) -> str:
    op_id = "op-" + uuid.uuid4().hex[:12]
    now = utcnow()
    db.run(
        lambda con: con.execute(
            "INSERT INTO pending_ops (id, bus_id, type, description, dispatched_at, deadline_at, "
            "expected_channel, status) VALUES (?, ?, 'sessions_spawn', ?, ?, ?, ?, 'pending')",
            [op_id, bus_id, description, now, now + timedelta(hours=deadline_h), expected_channel],
        )
    )
    return op_id


def visible(con) -> list[dict]:
    """Ops the system floor shows: pending, and finished ones not yet acknowledged."""
    cur = con.execute(
        "SELECT id, description, status, result, expected_channel, dispatched_at FROM pending_ops "
        "WHERE status = 'pending' OR (status IN ('completed', 'failed') AND acknowledged_at IS NULL) "
        "ORDER BY dispatched_at"
    )
    return dict_rows(cur)


def acknowledge(con, op_ids: list[str]) -> None:
    if op_ids:
        con.execute(
            "UPDATE pending_ops SET acknowledged_at = ? WHERE id IN (SELECT unnest(?)) "
            "AND status IN ('completed', 'failed') AND acknowledged_at IS NULL",
            [utcnow(), op_ids],
        )


def complete_from_message(con, text: str, metadata: dict) -> dict | None:
    """A router message names its op (metadata op_id, or op_ref matched against descriptions)."""
    op_id = metadata.get("op_id")
    if not op_id:
        ref = metadata.get("op_ref")
        if not ref:
            return None
        row = con.execute(
            "SELECT id FROM pending_ops WHERE status = 'pending' AND description ILIKE ? "
            "ORDER BY dispatched_at LIMIT 1",
            [f"%{ref}%"],
        ).fetchone()
        if row is None:
            return None
        op_id = row[0]
    row = con.execute(
        "UPDATE pending_ops SET status = 'completed', completed_at = ?, result = ? "
        "WHERE id = ? AND status = 'pending' RETURNING id, description, expected_channel, result",
        [utcnow(), text, str(op_id)],
    ).fetchone()
    if row is None:  # a recovered router message: its op was completed on the earlier attempt
        row = con.execute(
            "SELECT id, description, expected_channel, result FROM pending_ops "
            "WHERE id = ? AND status = 'completed' AND result = ?",
            [str(op_id), text],
        ).fetchone()
    if row is None:
        return None
    return dict(zip(("id", "description", "expected_channel", "result"), row, strict=True))


def harvestable(con) -> list[dict]:
    """Completed ops not yet gardened, with who asked for them and their source turns."""
    cur = con.execute(
        """
        SELECT o.id, o.description, o.result, o.completed_at, o.expected_channel,
               b.channel AS asked_on, b.sender AS asked_by,
               (SELECT list(s.id ORDER BY s.id) FROM session s
                 WHERE s.role = 'user' AND (s.bus_id = o.bus_id
                       OR (s.channel = 'router' AND s.content = o.result))) AS sources
        FROM pending_ops o LEFT JOIN bus b ON b.id = o.bus_id
        WHERE o.status = 'completed' AND o.gardened_at IS NULL
        ORDER BY o.completed_at
        """
    )
    return dict_rows(cur)


def fail_orphans(con, bus_ids: list[int]) -> int:
    """Ops spawned by messages whose processing died are failed and shown to the LLM once."""
    if not bus_ids:
        return 0
    rows = con.execute(
        "UPDATE pending_ops SET status = 'failed', completed_at = ?, result = ? "
        "WHERE status = 'pending' AND bus_id IN (SELECT unnest(?)) RETURNING id",
        [utcnow(), f"Error: {ORPHANED}", bus_ids],
    ).fetchall()
    return len(rows)


def fail_overdue(con) -> list[str]:
    """Ops whose deadline passed without a result: failed, and shown as [FAILED] once."""
    rows = con.execute(
        "UPDATE pending_ops SET status = 'failed', completed_at = ?, "
        "result = 'Error: no result before its deadline' "
        "WHERE status = 'pending' AND deadline_at < ? RETURNING id",
        [utcnow(), utcnow()],
    ).fetchall()
    return [r[0] for r in rows]
