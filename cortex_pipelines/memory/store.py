"""Facts in DuckDB: the source of truth for what the agent knows, with provenance and an audit
trail. Rows are never deleted; merged and corrected facts are superseded, removed ones forgotten."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime

from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows

CATEGORIES = ("fact", "decision", "preference", "insight", "identity", "event", "goal", "observation")

_CONTRACTIONS = {
    "i'm": "i am",
    "i've": "i have",
    "i'd": "i would",
    "i'll": "i will",
    "don't": "do not",
    "doesn't": "does not",
    "can't": "cannot",
    "won't": "will not",
    "we're": "we are",
    "we've": "we have",
    "it's": "it is",
    "that's": "that is",
    "isn't": "is not",
}
_NON_WORD = re.compile(r"[^\w\s]", re.UNICODE)


def normalize(text: str) -> str:
    """Case-, punctuation- and contraction-insensitive form used for exact dedupe."""
    text = unicodedata.normalize("NFKC", text).lower().replace("’", "'")
    words = [_CONTRACTIONS.get(w, w) for w in text.split()]
    return " ".join(_NON_WORD.sub(" ", " ".join(words)).split())


def norm_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class FactDraft:
    text: str
    category: str
    importance: float
    sources: tuple[int, ...]
    channels: tuple[str, ...]
    stated_at: datetime
    origin: str = "extraction"
    supersedes: tuple[int, ...] = ()  # ids of known facts this one replaces (the extraction model says)
    categories: tuple[str, ...] = ()  # every category, `category` (the primary) first; empty: just that one


FACT_COLUMNS = (
    "id, text, category, importance, tier, status, sources, channels, origin, stated_at, created_at, "
    "updated_at, last_accessed_at, hit_count, decay, valid_to, coalesce(categories, [category]) AS categories"
)


def audit(con, fact_id: int, action: str, **detail) -> None:
    con.execute(
        "INSERT INTO fact_events (fact_id, happened_at, action, detail) VALUES (?, ?, ?, ?)",
        [fact_id, utcnow(), action, json.dumps(detail, default=str)],
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
    audit(con, fact_id, "created", origin=draft.origin, sources=list(draft.sources))
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
    audit(con, fact_id, "reinforced", sources=list(sources))


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
    audit(con, old_id, "superseded", by=new_id, reason=reason)


def forget(con, fact_id: int, reason: str) -> bool:
    row = con.execute(
        "UPDATE facts SET status = 'forgotten', updated_at = ? WHERE id = ? AND status = 'active' "
        "RETURNING id",
        [utcnow(), fact_id],
    ).fetchone()
    if row:
        audit(con, fact_id, "forgotten", reason=reason)
    return row is not None


def edit(con, fact_id: int, text: str) -> int | None:
    """A correction: a new fact that keeps the old one's sources, categories and importance, and
    supersedes it."""
    old = get(con, fact_id)
    if old is None or old["status"] != "active":
        return None
    draft = FactDraft(
        text,
        old["category"],
        old["importance"],
        tuple(old["sources"]),
        tuple(old["channels"]),
        old["stated_at"],
        origin="edit",
        categories=tuple(old["categories"]),
    )
    new_id = insert(con, draft, tier="hot")
    supersede(con, fact_id, new_id, reason="edited")
    return new_id


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


def hot_for_floor(con, limit: int) -> list[dict]:
    """Known facts for the system floor (seed 000): most-used first, then most recent. A fact the
    user has since updated is history, not something to state as true."""
    return dict_rows(
        con.execute(
            "SELECT id, text, category FROM facts WHERE status = 'active' AND tier = 'hot' "
            "AND valid_to IS NULL "
            "ORDER BY hit_count DESC, coalesce(last_accessed_at, created_at) DESC, id DESC LIMIT ?",
            [limit],
        )
    )


def touch(con, fact_ids: list[int]) -> None:
    if fact_ids:
        con.execute(
            "UPDATE facts SET hit_count = hit_count + 1, last_accessed_at = ? WHERE id IN (SELECT unnest(?))",
            [utcnow(), fact_ids],
        )


def set_tier(con, fact_ids: list[int], tier: str, reason: str) -> None:
    for fact_id in fact_ids:
        con.execute("UPDATE facts SET tier = ?, updated_at = ? WHERE id = ?", [tier, utcnow(), fact_id])
        audit(con, fact_id, "promoted" if tier == "hot" else "evicted", reason=reason)


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


def get_cursor(con, name: str) -> int:
    row = con.execute("SELECT value FROM cursors WHERE name = ?", [name]).fetchone()
    return int(row[0]) if row else 0


def set_cursor(con, name: str, value: int) -> None:
    con.execute(
        "INSERT OR REPLACE INTO cursors (name, value, updated_at) VALUES (?, ?, ?)",
        [name, value, utcnow()],
    )


def tier_counts(con) -> dict[str, int]:
    rows = dict(
        con.execute("SELECT tier, count(*) FROM facts WHERE status = 'active' GROUP BY tier").fetchall()
    )
    return {"hot": int(rows.get("hot", 0)), "cold": int(rows.get("cold", 0))}
