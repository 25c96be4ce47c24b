"""The unindexed tail: user turns said since the last episodic indexing run, read from DuckDB with
the vectors the brain stored when it recorded them, matched by keywords and by meaning."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cortex_pipelines.memory.fusion import Candidate, fuse, stemmed, stemmed_terms
from cortex_pipelines.memory.recall_config import RecallConfig


def by_keywords(query: str, texts: list[str], k: int, rrf_k: int) -> list[tuple[int, float, int]]:
    """(position, score, words said) of the texts that use the query's (stemmed) words, most words
    first, then in the given order; the score is a reciprocal rank scaled by the share of words matched."""
    terms = stemmed(query)
    if not terms or not texts:
        return []
    known = stemmed_terms(texts)
    found = [len(terms.intersection(words)) for words in known]
    ranked = sorted((i for i, n in enumerate(found) if n), key=lambda i: -found[i])[:k]  # stable
    return [(i, 1.0 / (rrf_k + n + 1) * found[i] / len(terms), found[i]) for n, i in enumerate(ranked)]


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
    matched = by_keywords(query, texts, k, config.rrf_k)
    by_words = [{**turns[keep[j]], "_words": said} for j, _, said in matched]
    by_meaning = sorted((i for i in keep if cosine[i] >= config.min_cosine), key=lambda i: -cosine[i])[:k]
    close = [{**turns[i], "_cosine": float(cosine[i])} for i in by_meaning]
    return fuse(close, by_words, config, stemmed(query))
