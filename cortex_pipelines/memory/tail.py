"""The unindexed tail: user turns said since the last episodic indexing run, read from DuckDB with
the vectors the brain stored when it recorded them, matched by keywords and by meaning."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyarrow as pa

from cortex_pipelines.memory.fusion import Candidate, fuse
from cortex_pipelines.memory.recall_config import RecallConfig
from cortex_pipelines.memory.snapshot import tokenize

# Tokenized texts kept per process; the tail holds at most `tail_turns` (2,000 by default).
_TERM_CACHE_SIZE = 8000


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


_said_terms = _TermCache(_TERM_CACHE_SIZE)


def _terms(text: str) -> frozenset[str]:
    return frozenset(tokenize([text], ids=False)[0])


def by_keywords(query: str, texts: list[str], k: int, rrf_k: int) -> list[tuple[int, float]]:
    """(position, score) of the texts that use the query's (stemmed) words, most words first, then
    in the given order; the score is a reciprocal rank scaled by the share of words matched."""
    terms = _terms(query)
    if not terms or not texts:
        return []
    known = {t: _said_terms[t] for t in dict.fromkeys(texts) if t in _said_terms}
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    for text, words in zip(missing, tokenize(missing, ids=False) if missing else [], strict=True):
        known[text] = _said_terms[text] = frozenset(words)
    found = [len(terms.intersection(known[t])) for t in texts]
    ranked = sorted((i for i, n in enumerate(found) if n), key=lambda i: -found[i])[:k]  # stable
    return [(i, 1.0 / (rrf_k + n + 1) * found[i] / len(terms)) for n, i in enumerate(ranked)]


def _cosines(tail: pa.Table, qvec: np.ndarray | None) -> np.ndarray:
    """Each tail turn's best cosine to the query (its own vector or one of its sentences'), from the
    vectors the brain stored when it recorded the turn; -1 for a turn that has none."""
    cosine = np.full(tail.num_rows, -1.0, dtype=np.float32)
    if qvec is None or not tail.num_rows:
        return cosine
    turn = tail.column("vector").combine_chunks()
    has = turn.is_valid().to_numpy(zero_copy_only=False)
    if not has.any():
        return cosine
    rows = np.flatnonzero(has)
    cosine[rows] = turn.filter(has).flatten().to_numpy().reshape(len(rows), -1) @ qvec
    sentences = tail.column("sentence_vectors").combine_chunks().filter(has)
    lengths = sentences.value_lengths().fill_null(0).to_numpy()
    if lengths.sum():
        by_sentence = sentences.flatten().flatten().to_numpy().reshape(int(lengths.sum()), -1) @ qvec
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        split = lengths > 0
        best = np.maximum.reduceat(by_sentence, starts[split])
        cosine[rows[split]] = np.maximum(cosine[rows[split]], best)
    return cosine


def candidates(
    tail: pa.Table, qvec: np.ndarray | None, query: str, exclude: set[int], k: int, config: RecallConfig
) -> dict[int, Candidate]:
    """Turns said since the last episodic indexing run, as episode candidates: keywords and (for the
    turns the brain embedded when it recorded them) vectors, fused as the snapshot's two legs are."""
    cosine = _cosines(tail, qvec)
    turns = [
        {**row, "sources": [row["id"]], "role": "user", "prev_id": None}
        for row in tail.select(["id", "channel", "sender", "text", "stated_at"]).to_pylist()
    ]
    keep = [i for i, turn in enumerate(turns) if turn["id"] not in exclude]
    texts = [turns[i]["text"] for i in keep]
    by_words = [turns[keep[j]] for j, _ in by_keywords(query, texts, k, config.rrf_k)]
    by_meaning = sorted((i for i in keep if cosine[i] >= config.min_cosine), key=lambda i: -cosine[i])[:k]
    return fuse([turns[i] for i in by_meaning], by_words, config)
