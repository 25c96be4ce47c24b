"""memory_query: find what the user said before, with the ids of the messages it came from.

Interim implementation: keyword scoring over the user's own session turns in DuckDB. Only user
turns are searched, so the agent's replies (which may quote recalled memory) never feed back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from cortex_pipelines.config import Settings
from cortex_pipelines.storage import Database

_WORD = re.compile(r"[\w']+", re.UNICODE)
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "i'm",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "should",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "about",
        "any",
        "some",
        "please",
        "tell",
        "know",
        "remember",
    ]
)


@dataclass(frozen=True)
class Hit:
    text: str
    score: float
    tier: str
    sources: list[int]
    channel: str | None = None
    at: datetime | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "text": self.text,
            "score": round(self.score, 4),
            "tier": self.tier,
            "sources": self.sources,
            "channel": self.channel,
            "date": self.at.date().isoformat() if self.at else None,
            **self.extra,
        }


def keywords(text: str) -> list[str]:
    words = [w.lower().strip("'") for w in _WORD.findall(text)]
    return list(dict.fromkeys(w for w in words if len(w) > 2 and w not in _STOP))


def recall(
    db: Database, settings: Settings, query: str, k: int = 5, exclude_bus_ids: set[int] = frozenset()
) -> list[Hit]:
    terms = keywords(query)[:16]
    if not terms:
        return []
    # Score: distinct query terms a turn contains (prefix match on word starts), newest first on ties.
    clauses = " + ".join(["(regexp_matches(lower(content), ?))::INT"] * len(terms))
    params: list = [rf"\b{re.escape(t)}" for t in terms]
    rows = db.query(
        f"""
        SELECT id, channel, content, ts, score FROM (
            SELECT id, channel, content, ts, bus_id, ({clauses}) AS score FROM session
            WHERE role = 'user'
        ) WHERE score > 0 AND (bus_id IS NULL OR NOT list_contains(?, bus_id))
        ORDER BY score DESC, ts DESC LIMIT ?
        """,
        [*params, sorted(exclude_bus_ids), k],
    )
    return [
        Hit(text=content, score=score / len(terms), tier="episodic", sources=[sid], channel=ch, at=ts)
        for sid, ch, content, ts, score in rows
    ]
