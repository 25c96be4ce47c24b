"""Fact queries added since memory/store.py was written (its older ones move here with issue 18):
the soft states a fact can leave and come back from."""

from __future__ import annotations

import json

from cortex_pipelines.storage.db import utcnow


def _audit(con, fact_id: int, action: str, reason: str) -> None:
    con.execute(
        "INSERT INTO fact_events (fact_id, happened_at, action, detail) VALUES (?, ?, ?, ?)",
        [fact_id, utcnow(), action, json.dumps({"reason": reason})],
    )


def unforget(con, fact_id: int, reason: str) -> bool:
    """Undo a forget: the fact is active again, and so are the turns it came from."""
    row = con.execute(
        "UPDATE facts SET status = 'active', updated_at = ? WHERE id = ? AND status = 'forgotten' "
        "RETURNING id",
        [utcnow(), fact_id],
    ).fetchone()
    if row:
        _audit(con, fact_id, "unforgotten", reason)
    return row is not None


def prune(con, fact_id: int, reason: str) -> None:
    """Maintenance drops a decayed fact. Unlike a forget, nobody asked: the turns it came from stay
    recallable."""
    con.execute("UPDATE facts SET status = 'pruned', updated_at = ? WHERE id = ?", [utcnow(), fact_id])
    _audit(con, fact_id, "pruned", reason)


def forgotten_sources(con) -> list[int]:
    """The turns behind facts the user asked to forget: recall leaves them out as well, or the fact
    would come back as the episode it was drawn from."""
    return [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT unnest(sources) FROM facts WHERE status = 'forgotten'"
        ).fetchall()
    ]
