"""Fusing ranked result lists into one score per memory, and the lifts recall gives a turn from
its neighbours, its conversation and the words its best matches share."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from cortex_pipelines.memory.recall_config import RecallConfig
from cortex_pipelines.memory.snapshot import STOP_WORDS, Snapshot

_WORD = re.compile(r"[\w']+", re.UNICODE)


@dataclass
class Candidate:
    row: dict
    rrf: float = 0.0


def keywords(text: str) -> list[str]:
    words = [w.lower().strip("'") for w in _WORD.findall(text)]
    return list(dict.fromkeys(w for w in words if len(w) > 2 and w not in STOP_WORDS))


def fuse(vector_hits: list[dict], text_hits: list[dict], config: RecallConfig) -> dict[int, Candidate]:
    """Weighted reciprocal rank fusion of a vector and a full-text result list."""
    fused: dict[int, Candidate] = {}
    for weight, results in ((config.vector_weight, vector_hits), (config.fts_weight, text_hits)):
        add_ranked(fused, results, weight, config)
    return fused


def add_ranked(fused: dict[int, Candidate], results: list[dict], weight: float, config: RecallConfig) -> None:
    for rank, row in enumerate(results):
        cand = fused.setdefault(int(row["id"]), Candidate(row))
        cand.rrf += weight / (config.rrf_k + rank + 1)


def with_neighbours(episodes: dict[int, Candidate], config: RecallConfig) -> dict[int, float]:
    """Fused scores lifted by the best adjacent user turn of the same channel among the candidates
    (with `neighbours_in_dialogue`, only a turn by another speaker: an exchange, not a monologue)."""
    best: dict[int, float] = defaultdict(float)
    for turn_id, cand in episodes.items():
        prev = cand.row.get("prev_id")
        if prev is None or prev not in episodes:
            continue
        if config.neighbours_in_dialogue and episodes[prev].row.get("sender") == cand.row.get("sender"):
            continue
        best[turn_id] = max(best[turn_id], episodes[prev].rrf)
        best[prev] = max(best[prev], cand.rrf)
    return {i: c.rrf + config.neighbour_share * best[i] for i, c in episodes.items()}


def with_session(
    episodes: dict[int, Candidate], scores: dict[int, float], config: RecallConfig
) -> dict[int, float]:
    """Scores lifted by how well the turn's conversation (same channel, same day) matched as a whole."""

    def key(i):
        at = episodes[i].row.get("stated_at")
        return episodes[i].row.get("channel"), at.date() if at else None

    by_session: dict = defaultdict(list)
    for i, s in scores.items():
        by_session[key(i)].append(s)
    strength = {k: sum(sorted(v, reverse=True)[: config.session_top]) for k, v in by_session.items()}
    return {i: s + config.session_share * strength[key(i)] for i, s in scores.items()}


def feedback_terms(
    query: str, episodes: dict[int, Candidate], table: Snapshot, config: RecallConfig
) -> list[str]:
    """Words that recur in the best-matching turns but not in the query: most common first, and of
    those the rarest in the whole table first (the most telling)."""
    top = sorted(episodes.values(), key=lambda c: c.rrf, reverse=True)[: config.feedback_docs]
    asked = set(keywords(query))
    counts: dict[str, int] = defaultdict(int)
    for cand in top:
        for word in set(keywords(cand.row["text"])) - asked:
            counts[word] += 1
    recurring = sorted(word for word, n in counts.items() if n >= 2)
    rows = dict(zip(recurring, table.document_frequency(recurring), strict=True))
    return sorted(recurring, key=lambda w: (-counts[w], rows[w], w))[: config.feedback_terms]


def weighted(
    rrf: float,
    at: datetime | None,
    importance: float,
    hits: int,
    decay: float,
    half_life_h: float,
    now: datetime,
) -> float:
    """A fused score weighted by recency, importance, use and decay."""
    age_h = max(0.0, (now - at).total_seconds() / 3600) if at else 1e6
    recency = math.exp(-age_h * math.log(2) / half_life_h)
    signal = 1.0 + 0.15 * recency + 0.25 * (importance - 1) / 2 + 0.1 * math.log1p(hits)
    return rrf * signal * decay
