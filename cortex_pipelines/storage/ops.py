"""Delegated work (sessions_spawn): pending → completed|failed, unread until the next LLM turn."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows

ORPHANED = "orphaned from prior session (startup cleanup)"
OVERDUE = "no result before its deadline"


def spawn(con, bus_id: int, description: str, expected_channel: str, deadline_h: float) -> str:
    op_id = "op-" + uuid.uuid4().hex[:12]
    now = utcnow()
    con.execute(
        "INSERT INTO pending_ops (id, bus_id, type, description, dispatched_at, deadline_at, "
        "expected_channel, status) VALUES (?, ?, 'sessions_spawn', ?, ?, ?, ?, 'pending')",
        [op_id, bus_id, description, now, now + timedelta(hours=deadline_h), expected_channel],
    )
    return op_id


def pending(con) -> list[dict]:
    """Delegated work still waiting for its result, oldest first."""
    return dict_rows(
        con.execute(
            "SELECT id, description, dispatched_at, deadline_at, expected_channel FROM pending_ops "
            "WHERE status = 'pending' ORDER BY dispatched_at"
        )
    )


def counts(con) -> dict:
    """Delegated work by status, and the nearest deadline of what still waits (None when nothing
    does), for `cortex status`."""
    by_status = dict(con.execute("SELECT status, count(*) FROM pending_ops GROUP BY status").fetchall())
    (deadline,) = con.execute("SELECT min(deadline_at) FROM pending_ops WHERE status = 'pending'").fetchone()
    return {
        **{status: by_status.get(status, 0) for status in ("pending", "completed", "failed", "archived")},
        "next_deadline": deadline.isoformat(timespec="minutes") + "Z" if deadline else None,
    }


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


MIN_REF_CHARS = 4  # an op_ref shorter than this names nothing


def _named(con, text: str, metadata: dict) -> tuple[list[str], str | None]:
    """The ops a router message names: `op_id` exactly, or `op_ref` as a literal id prefix or a
    literal part of a description (no LIKE patterns: `%` is just a character). An op this very
    text already completed still counts, so a recovered message finds its op again."""
    open_or_mine = "(status = 'pending' OR (status = 'completed' AND result = ?))"
    if metadata.get("op_id"):
        op_id = str(metadata["op_id"])
        rows = con.execute(f"SELECT id FROM pending_ops WHERE id = ? AND {open_or_mine}", [op_id, text])
        return [r[0] for r in rows.fetchall()], f"op_id {op_id!r}"
    ref = str(metadata.get("op_ref") or "").strip()
    if not ref:
        return [], None
    if len(ref) < MIN_REF_CHARS:
        return [], f"op_ref {ref!r} (shorter than {MIN_REF_CHARS} characters)"
    rows = con.execute(
        f"SELECT id FROM pending_ops WHERE {open_or_mine} "
        "AND (starts_with(id, ?) OR contains(lower(description), lower(?))) ORDER BY dispatched_at",
        [text, ref, ref],
    )
    return [r[0] for r in rows.fetchall()], f"op_ref {ref!r}"


def _utc(at: datetime) -> str:
    return f"{at:%Y-%m-%d %H:%M} UTC"


def _closed(con, op_id: str) -> str | None:
    """What became of an op that is no longer open, for a result naming it by its exact id (None
    when no op has it): told "no open operation … name the op by its exact op_id", a result that
    came after supervision failed its op read as a typo. A closed op is never reopened."""
    row = con.execute(
        "SELECT status, result, deadline_at, completed_at, archived_at FROM pending_ops WHERE id = ?", [op_id]
    ).fetchone()
    if row is None:
        return None
    status, result, deadline_at, closed_at, archived_at = row
    if status == "failed" and result == f"Error: {OVERDUE}":
        was = f"failed by supervision at {_utc(closed_at)} (overdue since {_utc(deadline_at)})"
    elif status == "failed":
        was = f"failed at {_utc(closed_at)}: {result.removeprefix('Error: ')}"
    elif status == "archived":
        was = f"completed at {_utc(closed_at)} and archived at {_utc(archived_at)}"
    else:  # completed by an earlier result
        was = f"completed at {_utc(closed_at)} by an earlier result"
    return f"op {op_id} was already {was}"


NAMES_NO_OP = "it names no op (metadata op_id, or op_ref): nothing was completed; send it with the op's op_id"


def overdue(con, op_id: str) -> dict | None:
    """The op supervision failed at its deadline, by its exact id: a result for it that comes late
    is still what the owner asked for (they were told it failed), so it is passed on, not kept."""
    rows = dict_rows(
        con.execute(
            "SELECT id, description, expected_channel FROM pending_ops "
            "WHERE id = ? AND status = 'failed' AND result = ?",
            [op_id, f"Error: {OVERDUE}"],
        )
    )
    return rows[0] if rows else None


def complete_from_message(con, text: str, metadata: dict, trusted: bool) -> tuple[dict | None, str | None]:
    """A router message completes the one op it names, and only from a configured router sender.
    Returns (op, note): the note says why a message that names an op completed nothing."""
    named, what = _named(con, text, metadata)
    if what is None:  # a configured router sender's result that says not which op it is for
        return None, NAMES_NO_OP if trusted else None
    if not trusted:
        return None, f"the sender is not a configured router sender: {what} completed nothing"
    if not named and metadata.get("op_id") and (closed := _closed(con, str(metadata["op_id"]))):
        if late := overdue(con, str(metadata["op_id"])):
            to = late["expected_channel"]
            return (
                None,
                f"{closed}; this result came late: tell the owner what it says on {to} ([[send_to:{to}]])",
            )
        return None, f"{closed}; this result completed nothing"
    if len(named) != 1:
        found = f"{len(named)} open operations ({', '.join(named[:5])})" if named else "no open operation"
        return None, f"{what} matches {found}: nothing was completed; name the op by its exact op_id"
    con.execute(
        "UPDATE pending_ops SET status = 'completed', completed_at = ?, result = ? "
        "WHERE id = ? AND status = 'pending'",
        [utcnow(), text, named[0]],
    )
    row = con.execute(
        "SELECT id, description, expected_channel, result FROM pending_ops WHERE id = ?", [named[0]]
    ).fetchone()
    return dict(zip(("id", "description", "expected_channel", "result"), row, strict=True)), None


def recent(con, since: datetime) -> list[dict]:
    """Ops dispatched or finished since a time, with who asked for them (asked_on, asked_by)."""
    cur = con.execute(
        "SELECT o.id, o.description, o.status, o.result, o.dispatched_at, o.completed_at, "
        "b.channel AS asked_on, b.sender AS asked_by "
        "FROM pending_ops o LEFT JOIN bus b ON b.id = o.bus_id "
        "WHERE o.dispatched_at >= ? OR o.completed_at >= ? ORDER BY o.dispatched_at, o.id",
        [since, since],
    )
    return dict_rows(cur)


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


def fail_overdue(con) -> list[dict]:
    """Ops whose deadline passed without a result: failed, and shown as [FAILED] once. Returns them
    (id, bus_id, description, expected_channel, dispatched_at), oldest first."""
    cur = con.execute(
        "UPDATE pending_ops SET status = 'failed', completed_at = ?, result = ? "
        "WHERE status = 'pending' AND deadline_at < ? "
        "RETURNING id, bus_id, description, expected_channel, dispatched_at",
        [utcnow(), f"Error: {OVERDUE}", utcnow()],
    )
    return sorted(dict_rows(cur), key=lambda op: op["dispatched_at"])
