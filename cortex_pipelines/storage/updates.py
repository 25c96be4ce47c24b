"""Knowledge updates (migration v6): which owner statement superseded which, and the facts that
stopped being true because of it. Links are between session turns, so they exist from the moment
the newer turn is recorded, before any fact is extracted from either."""

from __future__ import annotations

import json
from datetime import datetime

from cortex_pipelines.storage import facts
from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows
from cortex_pipelines.storage.session import NOT_FORGOTTEN


def record(con, old_session_id: int, new_session_id: int, cosine: float | None) -> bool:
    """Link an earlier statement to the one that updated it; False when another statement updated
    it first. The first link of a statement holds: a later change to the same subject links the
    newer statement, and chains resolve to the newest. Linked to this one already (its message
    processed again: a retry, a refused key), it is True, as the first time."""
    con.execute(
        "INSERT INTO statement_updates (old_session_id, new_session_id, cosine, detected_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (old_session_id) DO NOTHING",
        [old_session_id, new_session_id, cosine, utcnow()],
    )
    linked = con.execute(
        "SELECT new_session_id FROM statement_updates WHERE old_session_id = ?", [old_session_id]
    ).fetchone()
    return linked is not None and linked[0] == new_session_id


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


# Of each fact ever closed, its newest closing: the statements that closed it (`closers`) and
# whether they named the fact itself (`direct`, close_facts_by) rather than its statements' update.
_NEWEST_CLOSING = """
    SELECT fact_id,
           arg_max(CAST(json_extract(detail, '$.by_messages') AS BIGINT[]), id) AS closers,
           arg_max(coalesce(CAST(json_extract(detail, '$.direct') AS BOOLEAN), false), id) AS direct
    FROM fact_events WHERE action = 'outdated' GROUP BY fact_id
"""


def fact_closers(con) -> list[tuple[int, int, str, str, str | None, datetime]]:
    """For each closed fact, the newest statement that closed it, as it stands: (fact id, its
    session id, text, channel, sender, said at). The statements' own successor is not enough: a
    change can close one fact of a statement an earlier change updated ("I work at the Beta Clinic
    now" after "I moved to Porto"). A closer no longer there (erased) is not returned."""
    return con.execute(
        f"""
        SELECT c.fact_id, s.id, s.content, s.channel, s.sender, s.ts
        FROM ({_NEWEST_CLOSING}) c
        JOIN facts f ON f.id = c.fact_id AND f.status = 'active' AND f.valid_to IS NOT NULL
        JOIN session s ON s.id = list_max(c.closers)
        ORDER BY c.fact_id
        """
    ).fetchall()


def outdated_candidates(con) -> list[dict]:
    """Active facts whose every source statement has been updated, with the text of the newer
    statements (`newer`), when the first was said (`until`), by which messages, and the texts of
    every active fact drawn from the same statements (`drawn_with`, itself included, closed ones
    too). A fact kept current since its latest update (`keep_current`: the update was about another
    fact drawn from the same statements) is not one until a later update."""
    return dict_rows(
        con.execute(
            """
            WITH linked AS (
                SELECT f.id, f.text, f.sources, min(s.ts) AS until,
                       list_sort(list_distinct(list(u.new_session_id))) AS by_messages,
                       list_distinct(list(s.content)) AS newer, max(u.detected_at) AS latest,
                       count(*) = count(s.id) AS every_source_updated
                FROM facts f, unnest(f.sources) AS src(session_id)
                LEFT JOIN statement_updates u ON u.old_session_id = src.session_id
                LEFT JOIN session s ON s.id = u.new_session_id
                WHERE f.status = 'active' AND f.valid_to IS NULL
                GROUP BY f.id, f.text, f.sources
            )
            SELECT id, text, sources, until, by_messages, newer, (
                SELECT list(g.text ORDER BY g.id) FROM facts g
                WHERE g.status = 'active' AND list_sort(g.sources) = list_sort(linked.sources)
            ) AS drawn_with
            FROM linked
            WHERE every_source_updated AND NOT EXISTS (
                SELECT 1 FROM fact_events e
                WHERE e.fact_id = linked.id AND e.action = 'kept_current' AND e.happened_at >= linked.latest
            )
            ORDER BY id
            """
        )
    )


def close_facts(con, outdated: list[dict], direct: bool = False) -> list[int]:
    """Outdated facts stop being true when the first update was said (valid_to); their rows,
    status and sources stay, so history stays queryable. `direct`: closed by statements that named
    the fact itself (`close_facts_by`), not by the links of the statements it came from."""
    now, closed = utcnow(), []
    for fact in outdated:
        if not con.execute(  # a process beside this one may have closed it meanwhile
            "UPDATE facts SET valid_to = ?, updated_at = ? WHERE id = ? AND valid_to IS NULL RETURNING id",
            [fact["until"], now, fact["id"]],
        ).fetchall():
            continue
        con.execute(
            "INSERT INTO fact_events (fact_id, happened_at, action, detail) "
            "VALUES (?, ?, 'outdated', json_object('by_messages', ?, 'direct', ?))",
            [fact["id"], now, fact["by_messages"], direct],
        )
        closed.append(fact["id"])
    return closed


def current_facts_from(con, session_ids: list[int]) -> list[dict]:
    """The current facts drawn from exactly these statements (id, text)."""
    return dict_rows(
        con.execute(
            "SELECT id, text FROM facts WHERE status = 'active' AND valid_to IS NULL "
            "AND list_sort(sources) = list_sort(?::BIGINT[]) ORDER BY id",
            [session_ids],
        )
    )


def close_facts_by(con, fact_ids: list[int], session_id: int) -> list[int]:
    """Close these facts, those still current, as of the statement `session_id`: the update names
    them itself (the extraction model's `supersedes`, or a fact recall found for a change)."""
    until = con.execute("SELECT ts FROM session WHERE id = ?", [session_id]).fetchone()
    if until is None:
        return []
    rows = con.execute(
        "SELECT id FROM facts WHERE list_contains(?::BIGINT[], id) AND status = 'active' "
        "AND valid_to IS NULL",
        [fact_ids],
    ).fetchall()
    closing = [{"id": r[0], "until": until[0], "by_messages": [session_id]} for r in rows]
    return close_facts(con, closing, direct=True)


def keep_current(con, kept: list[dict]) -> None:
    """Facts an update of their statement was not about stay current (until a later update)."""
    now = utcnow()
    for fact in kept:
        con.execute(
            "INSERT INTO fact_events (fact_id, happened_at, action, detail) "
            "VALUES (?, ?, 'kept_current', json_object('by_messages', ?))",
            [fact["id"], now, fact["by_messages"]],
        )


def reopen_facts(con, erased_turns: list[int]) -> list[int]:
    """Facts closed by an update that no longer stands are current again: a statement they came
    from lost its update link (the newer statement was erased), or, for a fact a statement closed by
    naming it (`close_facts_by`), every statement that closed it is gone, `erased_turns` among
    them. A fact closed by name stays closed when only the update of its statement is erased; turn
    retention, which keeps the links and facts of the turns it expires, reopens nothing."""
    stale = [
        r[0]
        for r in con.execute(
            f"""
            WITH latest AS ({_NEWEST_CLOSING}), unlinked AS (
                SELECT f.id FROM facts f, unnest(f.sources) AS src(session_id)
                LEFT JOIN statement_updates u ON u.old_session_id = src.session_id
                WHERE f.status = 'active' AND f.valid_to IS NOT NULL
                GROUP BY f.id
                HAVING count(*) > count(u.new_session_id)
            )
            SELECT n.id FROM unlinked n LEFT JOIN latest l ON l.fact_id = n.id
            WHERE NOT coalesce(l.direct, false)
            UNION
            SELECT l.fact_id FROM latest l JOIN facts f ON f.id = l.fact_id
            WHERE f.status = 'active' AND f.valid_to IS NOT NULL
              AND list_has_any(l.closers, $erased::BIGINT[])
              AND NOT EXISTS (SELECT 1 FROM session s WHERE list_contains(l.closers, s.id))
            ORDER BY 1
            """,
            {"erased": erased_turns},
        ).fetchall()
    ]
    _current_again(con, stale, {})
    return stale


def _current_again(con, fact_ids: list[int], detail: dict) -> None:
    """Reopen these closed facts, each with a `current_again` event; the statements split off them
    as they closed leave memory (`_retire_split_offs`)."""
    now = utcnow()
    for fact_id in fact_ids:
        con.execute("UPDATE facts SET valid_to = NULL, updated_at = ? WHERE id = ?", [now, fact_id])
        con.execute(
            "INSERT INTO fact_events (fact_id, happened_at, action, detail) "
            "VALUES (?, ?, 'current_again', ?)",
            [fact_id, now, json.dumps(detail)],
        )
    _retire_split_offs(con, fact_ids)


def superseded_statements(con, before_id: int) -> list[dict]:
    """The user's statements before `before_id` that a later one updated, each with who said it and
    the statement that updated it (`superseder`). Few rows: one per change the user announced."""
    return dict_rows(
        con.execute(
            """
            SELECT s.id, s.content AS text, s.channel, s.sender, u.new_session_id AS superseder
            FROM statement_updates u JOIN session s ON s.id = u.old_session_id AND s.role = 'user'
            WHERE u.old_session_id < $before AND u.new_session_id < $before
            ORDER BY s.id
            """,
            {"before": before_id},
        )
    )


def current_again_restated(con, restated_ids: list[int], session_id: int, channel: str) -> list[int]:
    """Facts an update closed that were drawn from statements the user has now said again
    (`session_id`, on `channel`): current again, with the restatement among their sources."""
    reopened = [
        r[0]
        for r in con.execute(
            "SELECT id FROM facts WHERE status = 'active' AND valid_to IS NOT NULL "
            "AND list_has_any(sources, ?::BIGINT[]) ORDER BY id",
            [restated_ids],
        ).fetchall()
    ]
    for fact_id in reopened:
        con.execute(
            "UPDATE facts SET sources = list_sort(list_distinct(list_append(sources, ?))), "
            "channels = list_sort(list_distinct(list_append(channels, ?))) WHERE id = ?",
            [session_id, channel, fact_id],
        )
    _current_again(con, reopened, {"restated_by": session_id})
    return reopened


def current_facts_citing(con, turn_ids: list[int]) -> list[int]:
    """The current facts these turns are sources of."""
    rows = con.execute(
        "SELECT id FROM facts WHERE status = 'active' AND valid_to IS NULL "
        "AND list_has_any(sources, ?::BIGINT[]) ORDER BY id",
        [turn_ids],
    ).fetchall()
    return [r[0] for r in rows]


def close_if_every_source_updated(con, fact_ids: list[int]) -> list[int]:
    """Close those of these facts whose every source statement is updated: after an erasure took
    the one source that was not ("I live in Lisbon." said again after the move, then erased)."""
    if not fact_ids:
        return []
    these = set(fact_ids)
    return close_facts(con, [fact for fact in outdated_candidates(con) if fact["id"] in these])


def _retire_split_offs(con, whole_again: list[int]) -> None:
    """A fact current again holds its statements whole: those split off it as it closed
    (facts.split_off) leave memory for it, or "My locker code is 4471" would be there twice."""
    if not whole_again:
        return
    rows = con.execute(
        """
        SELECT e.fact_id, CAST(json_extract(e.detail, '$.fact') AS BIGINT) AS whole
        FROM fact_events e JOIN facts f ON f.id = e.fact_id AND f.status = 'active'
        WHERE e.action = 'split_from' AND list_contains(?::BIGINT[], whole)
        """,
        [whole_again],
    ).fetchall()
    for split_id, whole in rows:
        facts.drop_duplicate(con, split_id, whole, reason="the fact it was split from is current again")


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
