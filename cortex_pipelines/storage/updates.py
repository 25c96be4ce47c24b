"""Knowledge updates (migration v6): which owner statement superseded which, and the facts that
stopped being true because of it. Links are between session turns, so they exist from the moment
the newer turn is recorded, before any fact is extracted from either."""

from __future__ import annotations

from datetime import datetime

from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows
from cortex_pipelines.storage.session import NOT_FORGOTTEN


def record(con, old_session_id: int, new_session_id: int, cosine: float | None) -> bool:
    """Link an earlier statement to the one that updated it. The first link of a statement holds:
    a later change to the same subject links the newer statement, and chains resolve to the newest."""
    row = con.execute(
        "INSERT INTO statement_updates (old_session_id, new_session_id, cosine, detected_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (old_session_id) DO NOTHING RETURNING old_session_id",
        [old_session_id, new_session_id, cosine, utcnow()],
    ).fetchone()
    return row is not None


def links(con) -> list[tuple[int, int, str, str, str | None, datetime]]:
    """Every link with the newer turn as it stands: (old id, new id, text, channel, sender, said at).
    Links are few (one per change the user announced), so recall reads them all in its transaction;
    with none (most instances, most of the time) that costs one scan of this small table, not a join
    with the session. A link whose newer turn no longer exists (erased) is not returned."""
    pairs = con.execute("SELECT old_session_id, new_session_id FROM statement_updates").fetchall()
    if not pairs:
        return []
    turns = {
        row[0]: row[1:]
        for row in con.execute(
            "SELECT id, content, channel, sender, ts FROM session WHERE list_contains(?::BIGINT[], id)",
            [sorted({new for _, new in pairs})],
        ).fetchall()
    }
    return [(old, new, *turns[new]) for old, new in sorted(pairs) if new in turns]


def replaced_statements(con, turn_ids: list[int]) -> dict[int, tuple[list[int], str | None, int | None]]:
    """Of the given turns, those that updated earlier statements: {turn: (the earlier turns, the
    category and importance of the most important fact drawn from them, or None when none was)}."""
    rows = con.execute(
        """
        SELECT u.new_session_id, list_sort(list(DISTINCT u.old_session_id)),
               arg_max(f.category, f.importance), max(f.importance)
        FROM statement_updates u
        LEFT JOIN facts f ON list_contains(f.sources, u.old_session_id) AND f.status = 'active'
        WHERE list_contains(?::BIGINT[], u.new_session_id)
        GROUP BY u.new_session_id
        """,
        [turn_ids],
    ).fetchall()
    return {new: (old, category, importance) for new, old, category, importance in rows}


def sources_of(con, fact_ids: list[int]) -> list[int]:
    """The session turns the given facts were drawn from."""
    row = con.execute(
        "SELECT list_sort(list_distinct(flatten(list(sources)))) FROM facts WHERE id IN (SELECT unnest(?))",
        [fact_ids],
    ).fetchone()
    return list(row[0] or []) if row else []


def close_outdated_facts(con) -> list[int]:
    """Facts whose every source statement has been updated stop being true when the first update
    was said (valid_to); their rows, status and sources stay, so history stays queryable."""
    outdated = con.execute(
        """
        SELECT f.id, min(s.ts) AS until, list_sort(list_distinct(list(u.new_session_id)))
        FROM facts f, unnest(f.sources) AS src(session_id)
        LEFT JOIN statement_updates u ON u.old_session_id = src.session_id
        LEFT JOIN session s ON s.id = u.new_session_id
        WHERE f.status = 'active' AND f.valid_to IS NULL
        GROUP BY f.id
        HAVING count(*) = count(s.id)
        """
    ).fetchall()
    now = utcnow()
    for fact_id, until, by_messages in outdated:
        con.execute("UPDATE facts SET valid_to = ?, updated_at = ? WHERE id = ?", [until, now, fact_id])
        con.execute(
            "INSERT INTO fact_events (fact_id, happened_at, action, detail) "
            "VALUES (?, ?, 'outdated', json_object('by_messages', ?))",
            [fact_id, now, by_messages],
        )
    return [fact_id for fact_id, _, _ in outdated]


def reopen_facts(con) -> list[int]:
    """Facts closed by an update that no longer stands (the newer statement was erased) are
    current again."""
    stale = [
        r[0]
        for r in con.execute(
            """
            SELECT f.id FROM facts f, unnest(f.sources) AS src(session_id)
            LEFT JOIN statement_updates u ON u.old_session_id = src.session_id
            LEFT JOIN session s ON s.id = u.new_session_id
            WHERE f.status = 'active' AND f.valid_to IS NOT NULL
            GROUP BY f.id
            HAVING count(*) > count(s.id)
            """
        ).fetchall()
    ]
    now = utcnow()
    for fact_id in stale:
        con.execute("UPDATE facts SET valid_to = NULL, updated_at = ? WHERE id = ?", [now, fact_id])
        con.execute(
            "INSERT INTO fact_events (fact_id, happened_at, action, detail) "
            "VALUES (?, ?, 'current_again', '{}')",
            [fact_id, now],
        )
    return stale


def earlier_statements_matching(con, before_id: int, pattern: str, limit: int) -> list[dict]:
    """The user's most recent turns before `before_id` whose text matches `pattern` (an RE2
    regex, case-insensitive), not yet superseded nor forgotten: where an update finds the statement
    it replaces when the two share what they are about ("our car insurance is with Aviva" for "we
    went with Admiral when the policy renewed") but not the words recall searches by."""
    cur = con.execute(
        f"""
        SELECT id, content AS text, channel, sender, ts AS at FROM session
        WHERE role = 'user' AND id < ? AND regexp_matches(content, ?, 'i')
          AND id NOT IN (SELECT old_session_id FROM statement_updates) AND {NOT_FORGOTTEN}
        ORDER BY id DESC LIMIT ?
        """,
        [before_id, pattern, limit],
    )
    return dict_rows(cur)

