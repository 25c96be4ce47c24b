"""Facts in DuckDB: the source of truth for what the agent knows, with provenance and an audit
trail. Rows are never deleted (only `cortex erase` removes them, in storage/erasure.py): merged and
corrected facts are superseded, removed ones forgotten, decayed ones pruned, and a fact the user
has since updated gets its valid_to."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from cortex_pipelines.storage import session, summaries
from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.erasure import quotes, quoting_replies
from cortex_pipelines.storage.rows import dict_rows
from cortex_pipelines.text import normalize

if TYPE_CHECKING:
    import pyarrow as pa

CATEGORIES = ("fact", "decision", "preference", "insight", "identity", "event", "goal", "observation")
# The origin of a fact op harvesting wrote from a delegated task's result (memory/harvest.py): another
# agent's text, never the user's words. It starts cold and is never promoted, and the system floor's
# known facts and the bulletin (which the floor carries) leave it out whatever its tier, so one
# hostile result is no standing part of every prompt; recall still finds it, marked.
OP_HARVEST = "op_harvest"
# How every output that shows such a fact names it, as a stranger's turn is "(not the owner)".
DELEGATED_RESULT = "delegated result (not the owner)"
# Known facts and the bulletin hold the user's own: never a harvested result.
NOT_HARVESTED = f"origin IS DISTINCT FROM '{OP_HARVEST}'"


def norm_hash(text: str) -> str:
    """What exact dedupe compares (stored with each fact): the hash of the normal form."""
    return hashlib.sha256(normalize(text).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class FactDraft:
    """A fact to write: what `insert` stores, and what `reinforce` adds to a known fact."""

    text: str
    category: str
    importance: float
    sources: tuple[int, ...]
    channels: tuple[str, ...]
    stated_at: datetime
    origin: str = "extraction"
    supersedes: tuple[int, ...] = ()  # ids of known facts this one replaces (the extraction model says)
    categories: tuple[str, ...] = ()  # every category, `category` (the primary) first; empty: just that one


# Readers see every category, the primary one first; a row written without the column has just that one.
CATEGORIES_OF = "coalesce(categories, [category])"
FACT_COLUMNS = (
    "id, text, category, importance, tier, status, sources, channels, origin, stated_at, created_at, "
    f"updated_at, last_accessed_at, hit_count, decay, valid_to, {CATEGORIES_OF} AS categories"
)


def _audit(con, fact_id: int, action: str, **detail) -> None:
    con.execute(
        "INSERT INTO fact_events (fact_id, happened_at, action, detail) VALUES (?, ?, ?, ?)",
        [fact_id, utcnow(), action, json.dumps(detail, default=str)],
    )


# -- writing and changing facts ------------------------------------------------------------------


def insert(con, draft: FactDraft, *, tier: str = "hot") -> int:
    now = utcnow()
    fact_id = con.execute(
        """
        INSERT INTO facts (text, norm_hash, category, categories, importance, tier, sources, channels,
                           origin, stated_at, valid_from, created_at, updated_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id
        """,
        [
            draft.text,
            norm_hash(draft.text),
            draft.category,
            list(draft.categories or (draft.category,)),
            float(draft.importance),
            tier,
            list(draft.sources),
            list(draft.channels),
            draft.origin,
            draft.stated_at,
            draft.stated_at,
            now,
            now,
        ],
    ).fetchone()[0]
    _audit(con, fact_id, "created", origin=draft.origin, sources=list(draft.sources))
    return fact_id


def reinforce(
    con, fact_id: int, sources: tuple[int, ...], channels: tuple[str, ...], importance: float
) -> None:
    """The same fact said again: keep one row, remember every message it came from."""
    con.execute(
        """
        UPDATE facts SET
            sources = list_sort(list_distinct(list_concat(sources, ?))),
            channels = list_sort(list_distinct(list_concat(channels, ?))),
            importance = greatest(importance, ?),
            updated_at = ?
        WHERE id = ?
        """,
        [list(sources), list(channels), float(importance), utcnow(), fact_id],
    )
    _audit(con, fact_id, "reinforced", sources=list(sources))


def supersede(con, old_id: int, new_id: int, reason: str) -> None:
    """Absorb old into new: the old row stays, linked, and its sources move to the survivor."""
    con.execute(
        """
        UPDATE facts SET
            sources = list_sort(list_distinct(list_concat(sources,
                (SELECT sources FROM facts WHERE id = ?)))),
            channels = list_sort(list_distinct(list_concat(channels,
                (SELECT channels FROM facts WHERE id = ?)))),
            hit_count = hit_count + (SELECT hit_count FROM facts WHERE id = ?),
            updated_at = ?
        WHERE id = ?
        """,
        [old_id, old_id, old_id, utcnow(), new_id],
    )
    con.execute(
        "UPDATE facts SET status = 'superseded', superseded_by = ?, updated_at = ? WHERE id = ?",
        [new_id, utcnow(), old_id],
    )
    _audit(con, old_id, "superseded", by=new_id, reason=reason)


def drop_duplicate(con, old_id: int, kept_id: int, reason: str) -> None:
    """An older duplicate leaves memory for the newer one without lending it its sources (a merge
    does that): superseded, so its turns stay recallable, never deleted."""
    con.execute(
        "UPDATE facts SET status = 'superseded', superseded_by = ?, updated_at = ? WHERE id = ?",
        [kept_id, utcnow(), old_id],
    )
    _audit(con, old_id, "superseded", reason=reason, by=kept_id, absorbed=False)


def edit(con, fact_id: int, text: str) -> int | None:
    """A correction: a new fact that keeps the old one's sources, categories and importance, and
    supersedes it."""
    old = get(con, fact_id)
    if old is None or old["status"] != "active":
        return None
    new_id = insert(con, _restated(old, text, origin="edit"), tier="hot")
    supersede(con, fact_id, new_id, reason="edited")
    return new_id


def split_off(con, fact_id: int, texts: list[str]) -> list[int]:
    """Statements of a fact that stay true while a change closes the rest of it: facts of their own,
    with its sources, categories, importance, origin and tier."""
    old = get(con, fact_id)
    if old is None or old["status"] != "active":
        return []
    made = []
    for text in texts:
        made.append(insert(con, _restated(old, text, origin=old["origin"]), tier=old["tier"]))
        _audit(con, made[-1], "split_from", fact=fact_id)
    return made


def _restated(old: dict, text: str, origin: str) -> FactDraft:
    """A new text for a fact: its sources, channels, time, categories and importance."""
    return FactDraft(
        text,
        old["category"],
        old["importance"],
        tuple(old["sources"]),
        tuple(old["channels"]),
        old["stated_at"],
        origin=origin,
        categories=tuple(old["categories"]),
    )


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
        _audit(con, fact_id, "updated", reason=reason, importance=importance, categories=categories)
    return row is not None


def forget(con, fact_id: int, reason: str) -> list[int] | None:
    """The fact stops being used, and so do the turns it came from and the exchanges elsewhere whose
    reply quoted them or it: recall, the conversation the model reads (session.NOT_FORGOTTEN) and
    the summaries written from them. Returns the messages of those exchanges; None: no active fact."""
    row = con.execute(
        "SELECT text, sources, origin FROM facts WHERE id = ? AND status = 'active'", [fact_id]
    ).fetchone()
    if row is None:
        return None
    text, sources, origin = row[0], list(row[1] or []), row[2]
    messages, turns = _quoting_exchanges(con, text, [] if origin == "observation" else sources)
    con.execute(
        "UPDATE facts SET status = 'forgotten', quoted_in = ?, updated_at = ? WHERE id = ?",
        [turns, utcnow(), fact_id],
    )
    _audit(con, fact_id, "forgotten", reason=reason, quoting_messages=messages)
    summaries.drop_for_turns(con, sources + turns)
    return messages


def _quoting_exchanges(con, text: str, sources: list[int]) -> tuple[list[int], list[int]]:
    """The exchanges elsewhere whose reply cites (`msg N`) or quotes the fact, its source turns or
    an exchange so found, by erasure's rule (a reply that repeated the fact tells it again): their
    messages and their turns. Decided once, here, so that no read scans every reply."""
    hidden = session.exchanges_of(con, sources, [])
    said = [text] + [t["content"] for t in hidden if t["role"] == "user"]
    messages: set[int] = set()
    while more := quoting_replies(con, [t["id"] for t in hidden], quotes(said)):
        messages |= more
        found = session.exchanges_of(con, [], sorted(more))
        hidden += found
        said += [t["content"] for t in found if t["role"] == "user"]
    turns = {t["id"] for t in hidden if t["bus_id"] in messages}
    return sorted(messages), sorted(turns)


def active_drawn_from(con, session_id: int) -> list[int]:
    """The active facts drawn from a turn. Not an observation that counts it ("usually active
    between 09:00 and 11:00"): a pattern, not what it said, and pointing the user at forgetting
    one left the message answerable."""
    rows = con.execute(
        "SELECT id FROM facts WHERE status = 'active' AND list_contains(sources, ?) "
        "AND origin IS DISTINCT FROM 'observation' ORDER BY id",
        [session_id],
    ).fetchall()
    return [r[0] for r in rows]


def forget_turn(con, session_id: int, reason: str) -> list[int] | None:
    """A message of the owner's that produced no fact is forgotten as a fact is: its exchange and
    the exchanges elsewhere that quoted it stop being used. Returns the messages of those; None:
    no such message of the user's, or it is forgotten already."""
    row = con.execute(
        "SELECT content FROM session WHERE id = ? AND role = 'user' "
        "AND id NOT IN (SELECT session_id FROM forgotten_turns)",
        [session_id],
    ).fetchone()
    if row is None:
        return None
    messages, turns = _quoting_exchanges(con, row[0], [session_id])
    con.execute(
        "INSERT INTO forgotten_turns (session_id, quoted_in, reason, forgotten_at) VALUES (?, ?, ?, ?)",
        [session_id, turns, reason, utcnow()],
    )
    summaries.drop_for_turns(con, [session_id, *turns])
    return messages


def unforget_turn(con, session_id: int) -> bool:
    """Undo forget_turn: the message and the exchanges that quoted it are used again."""
    return (
        con.execute(
            "DELETE FROM forgotten_turns WHERE session_id = ? RETURNING session_id", [session_id]
        ).fetchone()
        is not None
    )


def unforget(con, fact_id: int, reason: str) -> bool:
    """Undo a forget: the fact is active again, and so are the turns it came from and the exchanges
    that quoted it."""
    row = con.execute(
        "UPDATE facts SET status = 'active', quoted_in = NULL, updated_at = ? "
        "WHERE id = ? AND status = 'forgotten' RETURNING id",
        [utcnow(), fact_id],
    ).fetchone()
    if row:
        _audit(con, fact_id, "unforgotten", reason=reason)
    return row is not None


def touch(con, fact_ids: list[int]) -> None:
    if fact_ids:
        con.execute(
            "UPDATE facts SET hit_count = hit_count + 1, last_accessed_at = ? WHERE id IN (SELECT unnest(?))",
            [utcnow(), fact_ids],
        )


def set_tier(con, fact_ids: list[int], tier: str, reason: str) -> None:
    for fact_id in fact_ids:
        con.execute("UPDATE facts SET tier = ?, updated_at = ? WHERE id = ?", [tier, utcnow(), fact_id])
        _audit(con, fact_id, "promoted" if tier == "hot" else "evicted", reason=reason)


# -- the gardener's upkeep -----------------------------------------------------------------------


def evict_stale_hot(con, created_before: datetime, min_hits: int, reason: str) -> list[int]:
    """Hot facts created before a time and used fewer than `min_hits` times go cold (identity
    memories never do), and so does a delegated task's result that a version before this rule wrote
    hot; returns their ids."""
    ids = [
        r[0]
        for r in con.execute(
            "SELECT id FROM facts WHERE status = 'active' AND tier = 'hot' AND ((created_at < ? "
            f"AND hit_count < ? AND category <> 'identity') OR origin = '{OP_HARVEST}') ORDER BY id",
            [created_before, min_hits],
        ).fetchall()
    ]
    set_tier(con, ids, "cold", reason=reason)
    return ids


def decay_idle(con, idle_since: datetime, factor: float, floor: float) -> int:
    """Active facts unused since a time lose a share of their weight, down to a floor (identity
    memories never decay); returns how many decayed."""
    return len(
        con.execute(
            "UPDATE facts SET decay = greatest(decay * ?, ?) "
            "WHERE status = 'active' AND category <> 'identity' "
            "AND coalesce(last_accessed_at, created_at) < ? RETURNING id",
            [factor, floor, idle_since],
        ).fetchall()
    )


def prune(con, fact_id: int, reason: str) -> None:
    """Maintenance drops a decayed fact. Unlike a forget, nobody asked: the turns it came from stay
    recallable."""
    con.execute("UPDATE facts SET status = 'pruned', updated_at = ? WHERE id = ?", [utcnow(), fact_id])
    _audit(con, fact_id, "pruned", reason=reason)


def prune_decayed(con, threshold: float, created_before: datetime, reason: str) -> list[int]:
    """Prune active facts decayed below `threshold` that are older than a time (never identity);
    returns their ids."""
    doomed = [
        r[0]
        for r in con.execute(
            "SELECT id FROM facts WHERE status = 'active' AND category <> 'identity' "
            "AND decay < ? AND created_at < ? ORDER BY id",
            [threshold, created_before],
        ).fetchall()
    ]
    for fact_id in doomed:
        prune(con, fact_id, reason)
    return doomed


# -- keeping LanceDB's semantic table in step ----------------------------------------------------


def unindexed(con) -> list[dict]:
    """Facts whose LanceDB row is missing or older than the DuckDB row."""
    return dict_rows(
        con.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE indexed_at IS NULL OR indexed_at < updated_at "
            "ORDER BY id"
        )
    )


def mark_indexed(con, fact_ids: list[int], at: datetime) -> None:
    if fact_ids:
        con.execute("UPDATE facts SET indexed_at = ? WHERE id IN (SELECT unnest(?))", [at, fact_ids])


def mark_all_unindexed(con) -> None:
    """Every fact is to be embedded again (LanceDB is being rebuilt)."""
    con.execute("UPDATE facts SET indexed_at = NULL")


def mirror_rows(con, fact_ids: list[int]) -> list[dict]:
    """What LanceDB's semantic table copies of each fact, besides its text and vector."""
    return dict_rows(
        con.execute(
            "SELECT id, status, tier, importance, category FROM facts WHERE id IN (SELECT unnest(?))",
            [fact_ids],
        )
    )


def active_ids(con) -> set[int]:
    return {r[0] for r in con.execute("SELECT id FROM facts WHERE status = 'active'").fetchall()}


# -- reading facts -------------------------------------------------------------------------------


def get(con, fact_id: int) -> dict | None:
    rows = dict_rows(con.execute(f"SELECT {FACT_COLUMNS} FROM facts WHERE id = ?", [fact_id]))
    return rows[0] if rows else None


def active(con, tier: str | None = None) -> list[dict]:
    return dict_rows(
        con.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE status = 'active' AND (? IS NULL OR tier = ?) "
            "ORDER BY id",
            [tier, tier],
        )
    )


def active_by_hash(con, hashes: list[str]) -> dict[str, int]:
    if not hashes:
        return {}
    rows = con.execute(
        "SELECT norm_hash, min(id) FROM facts WHERE status = 'active' AND norm_hash IN (SELECT unnest(?)) "
        "GROUP BY norm_hash",
        [hashes],
    ).fetchall()
    return dict(rows)


def hot_for_floor(con, limit: int) -> list[dict]:
    """Known facts for the system floor (seed 000): most-used first, then most recent. A fact the
    user has since updated is history, not something to state as true; a delegated task's result
    (`OP_HARVEST`) is another agent's text, found only through recall, whatever its tier."""
    return dict_rows(
        con.execute(
            "SELECT id, text, category FROM facts WHERE status = 'active' AND tier = 'hot' "
            f"AND valid_to IS NULL AND {NOT_HARVESTED} "
            "ORDER BY hit_count DESC, coalesce(last_accessed_at, created_at) DESC, id DESC LIMIT ?",
            [limit],
        )
    )


# What recall weighs a hit by, and the origin its outputs mark a delegated result by.
SIGNALS = "id, tier, status, hit_count, decay, importance, stated_at, valid_to, origin"


def recall_signals(con) -> pa.Table:
    """Of every fact, what recall weighs a hit by and whether it still holds: tier, status, hit
    count, decay, importance, when it was stated and until when it was true. All of them, as one
    Arrow table (a few ms at 10,000 facts): recall keeps it while the file is unchanged and looks its
    hits up with `signals_of`."""
    return con.sql(f"SELECT {SIGNALS} FROM facts ORDER BY id").to_arrow_table()


def signals_for(con, fact_ids: list[int]) -> dict[int, dict]:
    """`recall_signals` of these facts only, by id: for a file just written, where the whole table
    would be read again for every query (4.5 ms at 20,000 facts)."""
    if not fact_ids:
        return {}
    rows = con.sql(
        f"SELECT {SIGNALS} FROM facts WHERE list_contains($ids, id)", params={"ids": fact_ids}
    ).to_arrow_table()
    return {row["id"]: row for row in rows.to_pylist()}


def signals_of(signals: pa.Table, fact_ids: list[int]) -> dict[int, dict]:
    """By id, the `recall_signals` of these facts (a fact not there is left out)."""
    import pyarrow as pa  # here: the command line names CATEGORIES without loading Arrow
    import pyarrow.compute as pc

    if not fact_ids or not signals.num_rows:
        return {}
    positions = pc.index_in(pa.array(fact_ids, pa.int64()), signals.column("id")).drop_null()
    return {row["id"]: row for row in signals.take(positions).to_pylist()}


def forgotten_sources(con) -> list[int]:
    """The turns behind facts the user asked to forget: recall leaves them out as well, or the fact
    would come back as the episode it was drawn from."""
    return [r[0] for r in con.execute(f"SELECT DISTINCT * FROM ({session.FORGOTTEN_TURNS})").fetchall()]


def with_categories(con, fact_ids: list[int]) -> list[dict]:
    """Facts by id, with every category and their sources, in the order asked."""
    rows = dict_rows(
        con.execute(
            f"SELECT id, text, {CATEGORIES_OF} AS categories, importance, status, tier, hit_count, "
            "stated_at, sources, origin FROM facts WHERE id IN (SELECT unnest(?))",
            [fact_ids],
        )
    )
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i in fact_ids if i in by_id]


def active_since(con, since: datetime) -> list[dict]:
    """Active facts still true that were stated since a time: short-term memory's facts. Not the
    observations, patterns over a week of turns that say nothing new: 47 of 50 of `cortex recent`
    were observations on a home with two years of history."""
    return dict_rows(
        con.execute(
            f"SELECT id, text, {CATEGORIES_OF} AS categories, importance, sources, channels[1] AS channel, "
            "stated_at, origin FROM facts WHERE status = 'active' AND valid_to IS NULL AND stated_at >= ? "
            "AND origin IS DISTINCT FROM 'observation' ORDER BY stated_at, id",
            [since],
        )
    )


def current(con, limit: int) -> tuple[list[dict], int]:
    """What the agent holds true now (active, not outdated by a later statement): the `limit` most
    important, most used first, and how many there are in all."""
    where = "WHERE status = 'active' AND valid_to IS NULL"
    rows = dict_rows(
        con.execute(
            f"SELECT id, text, {CATEGORIES_OF} AS categories, importance, tier, sources, origin "
            f"FROM facts {where} ORDER BY importance DESC, hit_count DESC, id DESC LIMIT ?",
            [limit],
        )
    )
    return rows, con.execute(f"SELECT count(*) FROM facts {where}").fetchone()[0]


def user_turns_without_fact(con, through: int) -> list[tuple[str, str | None, int]]:
    """User turns up to a session id that no fact (in any state) names as a source, counted by
    (channel, sender)."""
    return con.execute(
        """
        SELECT s.channel, s.sender, count(*) FROM session s
        WHERE s.role = 'user' AND s.id <= ?
          AND s.id NOT IN (SELECT DISTINCT unnest(sources) FROM facts)
        GROUP BY ALL ORDER BY ALL
        """,
        [through],
    ).fetchall()


# -- counts --------------------------------------------------------------------------------------


def tier_counts(con) -> dict[str, int]:
    rows = dict(
        con.execute("SELECT tier, count(*) FROM facts WHERE status = 'active' GROUP BY tier").fetchall()
    )
    return {"hot": int(rows.get("hot", 0)), "cold": int(rows.get("cold", 0))}


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


def duplicate_groups(con) -> int:
    """How many normalized texts more than one active fact shares (write-time dedupe prevents it)."""
    return con.execute(
        "SELECT count(*) FROM (SELECT norm_hash FROM facts WHERE status = 'active' "
        "GROUP BY norm_hash HAVING count(*) > 1)"
    ).fetchone()[0]


def active_without_sources(con) -> int:
    """Active facts that name no message they came from (provenance first: there should be none)."""
    sql = "SELECT count(*) FROM facts WHERE status = 'active' AND len(sources) = 0"
    return con.execute(sql).fetchone()[0]
