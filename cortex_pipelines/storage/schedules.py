"""User-created schedules: rows in `schedules`, read as dicts with every column a job needs."""

from __future__ import annotations

from datetime import datetime

from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows

_COLUMNS = (
    "id, description, cron, run_at, timezone, action, target_channel, topic, created_at, next_fire_at, "
    "last_fired_at, fired_count, late_count, state, created_by"
)


def insert_schedule(
    con,
    job_id: str,
    *,
    description: str,
    cron: str | None,
    run_at: datetime | None,
    timezone: str,
    action: str,
    target_channel: str,
    topic: str | None,
    created_at: datetime,
    created_by: int | None,
    next_fire_at: datetime,
) -> None:
    """Times are naive UTC, like every TIMESTAMP column."""
    con.execute(
        "INSERT INTO schedules (id, description, cron, run_at, timezone, action, target_channel, topic, "
        "created_at, created_by, next_fire_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            job_id,
            description,
            cron,
            run_at,
            timezone,
            action,
            target_channel,
            topic,
            created_at,
            created_by,
            next_fire_at,
        ],
    )


def schedule_by_id(con, job_id: str) -> dict | None:
    rows = dict_rows(con.execute(f"SELECT {_COLUMNS} FROM schedules WHERE id = ?", [job_id]))
    return rows[0] if rows else None


def active_schedules(con) -> list[dict]:
    """Active jobs, the next to fire first."""
    return dict_rows(
        con.execute(f"SELECT {_COLUMNS} FROM schedules WHERE state = 'active' ORDER BY next_fire_at, id")
    )


def due_schedules(con, now: datetime) -> list[dict]:
    """Active jobs whose next firing is at or before `now` (naive UTC), the earliest first."""
    return dict_rows(
        con.execute(
            f"SELECT {_COLUMNS} FROM schedules WHERE state = 'active' AND next_fire_at <= ? "
            "ORDER BY next_fire_at, id",
            [now],
        )
    )


def latest_owner_channel(con, owners: dict[str, list[str]]) -> str | None:
    """Of the channels in `owners` (channel → the owner's sender ids there), the one where the
    owner's newest message on the bus came; None when the owner wrote on none of them."""
    pairs = [(channel, sender) for channel, senders in owners.items() for sender in senders]
    if not pairs:
        return None
    row = con.execute(
        """
        SELECT bus.channel FROM bus
        JOIN (SELECT unnest(?::VARCHAR[]) AS channel, unnest(?::VARCHAR[]) AS sender) AS owner
            ON bus.channel = owner.channel AND bus.sender = owner.sender
        ORDER BY bus.id DESC LIMIT 1
        """,
        [[c for c, _ in pairs], [s for _, s in pairs]],
    ).fetchone()
    return row[0] if row else None


def delete_schedule(con, job_id: str) -> bool:
    """End an active job; False when there is none by that id."""
    row = con.execute(
        "UPDATE schedules SET state = 'deleted', ended_at = ?, next_fire_at = NULL "
        "WHERE id = ? AND state = 'active' RETURNING id",
        [utcnow(), job_id],
    ).fetchone()
    return row is not None


def delete_schedules_created_by(con, bus_ids: list[int]) -> list[str]:
    """Schedules created by turns that never committed: their retry will create them again."""
    if not bus_ids:
        return []
    rows = con.execute(
        "UPDATE schedules SET state = 'deleted', ended_at = ?, next_fire_at = NULL "
        "WHERE state = 'active' AND created_by IN (SELECT unnest(?)) RETURNING id",
        [utcnow(), bus_ids],
    ).fetchall()
    return [r[0] for r in rows]


def record_firing(con, job_id: str, fired_at: datetime, late: bool, next_fire_at: datetime | None) -> None:
    """A job fired at `fired_at`: it fires next at `next_fire_at`, or is done when that is None."""
    con.execute(
        "UPDATE schedules SET next_fire_at = ?, last_fired_at = ?, fired_count = fired_count + 1, "
        "late_count = late_count + ?, state = ?, ended_at = ? WHERE id = ?",
        [
            next_fire_at,
            fired_at,
            int(late),
            "active" if next_fire_at else "done",
            None if next_fire_at else fired_at,
            job_id,
        ],
    )
