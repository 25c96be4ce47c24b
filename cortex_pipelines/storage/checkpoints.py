"""A checkpoint per answered message: where the session stood when the message committed."""

from __future__ import annotations

import json

from cortex_pipelines.storage.db import utcnow


def record_checkpoint(con, bus_id: int, last_session_id: int) -> None:
    """In the message's commit: the conversation states (in the column V1 named channel_states) and
    how many delegated ops are still open."""
    states = con.execute("SELECT conversation, layer, unread_count FROM conversations").fetchall()
    open_ops = con.execute("SELECT count(*) FROM pending_ops WHERE status = 'pending'").fetchone()[0]
    con.execute(
        "INSERT INTO checkpoints (bus_id, created_at, last_session_id, channel_states, open_ops) "
        "VALUES (?, ?, ?, ?, ?)",
        [bus_id, utcnow(), last_session_id, json.dumps([list(s) for s in states]), open_ops],
    )
