"""Fact queries added since memory/store.py was written (its older ones move here with issue 18):
the soft states a fact can leave and come back from, and the owner's own changes and views."""

from __future__ import annotations

import json
from datetime import datetime

from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows

# Readers see every category, the primary one first; a row written without the column has just that one.
CATEGORIES_OF = "coalesce(categories, [category])"


def _audit(con, fact_id: int, action: str, reason: str, **detail) -> None:
    con.execute(
        "INSERT INTO fact_events (fact_id, happened_at, action, detail) VALUES (?, ?, ?, ?)",
        [fact_id, utcnow(), action, json.dumps({"reason": reason, **detail})],
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


def update(con, fact_id: int, importance: float | None, categories: list[str] | None, reason: str) -> bool:
    """The owner re-rates or re-files an active fact; the first category becomes the primary one."""
    row = con.execute(
        "UPDATE facts SET importance = coalesce(?, importance), "
        "categories = coalesce(?::VARCHAR[], categories, [category]), "
        "category = coalesce((?::VARCHAR[])[1], category), updated_at = ? "
        "WHERE id = ? AND status = 'active' RETURNING id",
        [importance, categories, categories, utcnow(), fact_id],
    ).fetchone()
    if row:
        _audit(con, fact_id, "updated", reason, importance=importance, categories=categories)
    return row is not None


def drop_duplicate(con, old_id: int, kept_id: int, reason: str) -> None:
    """An older duplicate leaves memory for the newer one without lending it its sources (a merge
    does that): superseded, so its turns stay recallable, never deleted."""
    con.execute(
        "UPDATE facts SET status = 'superseded', superseded_by = ?, updated_at = ? WHERE id = ?",
        [kept_id, utcnow(), old_id],
    )
    _audit(con, old_id, "superseded", reason, by=kept_id, absorbed=False)


def mirror_rows(con, fact_ids: list[int]) -> list[dict]:
    """What LanceDB's semantic table copies of each fact, besides its text and vector."""
    return dict_rows(
        con.execute(
            "SELECT id, status, tier, importance, category FROM facts WHERE id IN (SELECT unnest(?))",
            [fact_ids],
        )
    )


def with_categories(con, fact_ids: list[int]) -> list[dict]:
    """Facts by id, with every category, in the order asked."""
    rows = dict_rows(
        con.execute(
            f"SELECT id, text, {CATEGORIES_OF} AS categories, importance, status, tier, hit_count, "
            "stated_at FROM facts WHERE id IN (SELECT unnest(?))",
            [fact_ids],
        )
    )
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i in fact_ids if i in by_id]


def active_since(con, since: datetime) -> list[dict]:
    """Active facts still true that were stated since a time: short-term memory's facts."""
    return dict_rows(
        con.execute(
            f"SELECT id, text, {CATEGORIES_OF} AS categories, importance, sources, channels[1] AS channel, "
            "stated_at FROM facts "
            "WHERE status = 'active' AND valid_to IS NULL AND stated_at >= ? ORDER BY stated_at, id",
            [since],
        )
    )


def counts(con) -> dict:
    """How many facts are in each state, and how active facts spread over tiers, importance and
    categories (a fact counts once under each of its categories)."""

    def grouped(sql: str) -> dict:
        return {str(k): int(n) for k, n in con.execute(sql).fetchall()}

    return {
        "by_status": grouped("SELECT status, count(*) FROM facts GROUP BY ALL ORDER BY 1"),
        "by_tier": grouped(
            "SELECT tier, count(*) FROM facts WHERE status = 'active' GROUP BY ALL ORDER BY 1"
        ),
        "by_importance": grouped(
            "SELECT round(importance)::INTEGER, count(*) FROM facts WHERE status = 'active' "
            "GROUP BY ALL ORDER BY 1"
        ),
        "by_category": grouped(
            f"SELECT c, count(*) FROM (SELECT unnest({CATEGORIES_OF}) AS c FROM facts "
            "WHERE status = 'active') GROUP BY ALL ORDER BY 1"
        ),
    }
