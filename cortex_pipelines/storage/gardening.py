"""The gardener's marks on delegated work (seed 000): a harvested op is stamped gardened, and a
gardened op is archived once old enough. Failed ops are never touched: they stay for audit."""

from __future__ import annotations

from datetime import datetime


def mark_gardened(con, op_ids: list[str], at: datetime) -> None:
    if op_ids:
        con.execute("UPDATE pending_ops SET gardened_at = ? WHERE id IN (SELECT unnest(?))", [at, op_ids])


def archive_gardened(con, at: datetime, gardened_before: datetime) -> int:
    """Archive completed ops gardened before a time; returns how many."""
    return len(
        con.execute(
            "UPDATE pending_ops SET status = 'archived', archived_at = ? "
            "WHERE status = 'completed' AND gardened_at IS NOT NULL AND gardened_at < ? RETURNING id",
            [at, gardened_before],
        ).fetchall()
    )
