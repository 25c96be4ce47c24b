"""Fusing ranked result lists into one score per memory, and the lifts recall gives a turn from
its neighbours, its conversation and the words its best matches share."""

from __future__ import annotations

import math
import re
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from datetime import datetime

from cortex_pipelines.memory.recall_config import RecallConfig
from cortex_pipelines.memory.snapshot import STOP_WORDS, Snapshot, tokenize
from cortex_pipelines.text import never_an_answer

_WORD = re.compile(r"[\w']+", re.UNICODE)


@dataclass
class Candidate:
    row: dict
    rrf: float = 0.0


def keywords(text: str) -> list[str]:
    words = [w.lower().strip("'") for w in _WORD.findall(text)]
    return list(dict.fromkeys(w for w in words if len(w) > 2 and w not in STOP_WORDS))


class _TermCache(OrderedDict):
    """Stemmed words of texts already seen, newest kept: the unindexed tail is read on every query
    (every message, with auto-recall) and tokenizing it again each time grows with the backlog."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if len(self) > self.size:
            self.popitem(last=False)


_seen = _TermCache(8000)  # four times the default tail


def stemmed(text: str) -> frozenset[str]:
    """A text's words as full-text search sees them: lower case, no stop words, stemmed."""
    return frozenset(tokenize([text], ids=False)[0])


def stemmed_terms(texts: list[str]) -> list[frozenset[str]]:
    """`stemmed` of each text, tokenizing only those not seen lately (in one batch)."""
    known = {t: _seen[t] for t in dict.fromkeys(texts) if t in _seen}
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    for text, words in zip(missing, tokenize(missing, ids=False) if missing else [], strict=True):
        known[text] = _seen[text] = frozenset(words)
    return [known[t] for t in texts]


def fuse(
    vector_hits: list[dict],
    text_hits: list[dict],
    config: RecallConfig,
    query_terms: frozenset[str] = frozenset(),
) -> dict[int, Candidate]:
    """Weighted reciprocal rank fusion of a vector and a full-text result list."""
    fused: dict[int, Candidate] = {}
    add_ranked(fused, vector_hits, config.vector_weight, config, closeness=config.vector_closeness)
    add_ranked(fused, text_hits, config.fts_weight, config, query_terms)
    return fused


def add_ranked(
    fused: dict[int, Candidate],
    results: list[dict],
    weight: float,
    config: RecallConfig,
    query_terms: frozenset[str] = frozenset(),
    closeness: bool = False,
) -> None:
    """Add a ranked list. With `fts_coverage` and query terms, a full-text hit counts in proportion
    to the share of the query's words it says (its `_words`): one common word in common is weak evidence. With
    `closeness`, a vector hit counts in proportion to how far its cosine rises above the floor,
    against the best hit's: rank alone makes a barely related turn look like a close one."""
    coverage = [1.0] * len(results)
    if config.fts_coverage and query_terms and results:
        coverage = [row["_words"] / len(query_terms) for row in results]
    elif closeness and results:
        # Against the best hit that can be an answer: the user's own question (never returned)
        # sits at ~0.9 to a query repeating it and shrank every statement's share to a fifth.
        answers = [row["_cosine"] for row in results if not never_an_answer(row["text"])]
        floor, best = config.min_cosine, max(answers, default=results[0]["_cosine"])
        coverage = [max(0.0, row["_cosine"] - floor) / max(best - floor, 1e-6) for row in results]
    for rank, (row, share) in enumerate(zip(results, coverage, strict=True)):
        cand = fused.setdefault(int(row["id"]), Candidate(row))
        cand.rrf += weight * share / (config.rrf_k + rank + 1)


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
