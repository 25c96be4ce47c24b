"""The unindexed tail: user turns said since the last episodic indexing run, read from DuckDB with
the vectors the brain stored when it recorded them, matched by keywords and by meaning."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import pyarrow as pa

from cortex_pipelines.memory.fusion import Candidate, fuse, stemmed, stemmed_terms
from cortex_pipelines.memory.recall_config import RecallConfig
from cortex_pipelines.storage import turn_vectors

TurnVectors = dict[int, tuple[np.ndarray, np.ndarray]]  # session id: (vector, sentence vectors)

# A stored turn's vectors never change, so each process keeps those it has read (about 4.6 kB a
# turn): right after the brain records a turn, recall reads the vectors of that one turn, not of
# the whole tail again (the tail holds up to RecallConfig.tail_turns). With the session read from
# the cursor on and only the found facts' signals, recall right after a write on a file of 100,000
# turns and 20,000 facts went from 31.5 / 39.9 to 17.1 / 23.1 ms p50 / p95. Kept by file, model and
# turn, with the turn's text: a file restored from a backup may give an id to another turn.
VECTORS_KEPT = 4096
_kept: OrderedDict[tuple[str, str, int], tuple[str, np.ndarray, np.ndarray]] = OrderedDict()
_kept_lock = threading.Lock()


def stored_vectors(con, file: str, model: str, turns: pa.Table) -> TurnVectors:
    """The vectors `model` gave these turns (a table with their id and text) when they were
    recorded, read from DuckDB only for the turns this process has not read before. A turn with
    none (not embedded then) is left out."""
    said = dict(zip(turns.column("id").to_pylist(), turns.column("text").to_pylist(), strict=True))
    known = {}
    with _kept_lock:
        for sid, text in said.items():
            kept = _kept.get((file, model, sid))
            if kept is not None and kept[0] == text:
                known[sid] = kept[1:]
    read = turn_vectors.stored(con, [sid for sid in said if sid not in known], model)
    for sid, (vector, sentences) in (known | read).items():
        keep_recorded(file, model, sid, said[sid], vector, sentences)
    return known | read


def keep_recorded(
    file: str, model: str, session_id: int, text: str, vector: np.ndarray, sentences: np.ndarray
) -> None:
    """The vectors this process has just stored with a turn, kept as if read back: the brain
    recalls right after it records the turn, and reading that turn's vectors from DuckDB again was
    about 1.3 ms of recall's 15 at 100,000 turns. Call it once the write has committed."""
    with _kept_lock:
        _kept[(file, model, session_id)] = (text, vector, sentences)
        _kept.move_to_end((file, model, session_id))
        while len(_kept) > VECTORS_KEPT:
            _kept.popitem(last=False)


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


def _cosines(tail: pa.Table, vectors: TurnVectors, qvec: np.ndarray | None) -> np.ndarray:
    """Each tail turn's best cosine to the query (its own vector or one of its sentences'), from the
    vectors the brain stored when it recorded the turn; -1 for a turn that has none."""
    cosine = np.full(tail.num_rows, -1.0, dtype=np.float32)
    ids = tail.column("id").to_pylist()
    rows = [i for i, sid in enumerate(ids) if sid in vectors]
    if qvec is None or not rows:
        return cosine
    turns = [vectors[ids[i]] for i in rows]
    cosine[rows] = np.stack([vector for vector, _ in turns]) @ qvec
    lengths = np.array([len(sentences) for _, sentences in turns])
    if lengths.sum():
        by_sentence = np.concatenate([sentences for _, sentences in turns]) @ qvec
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        split = lengths > 0
        best = np.maximum.reduceat(by_sentence, starts[split])
        with_sentences = np.asarray(rows)[split]
        cosine[with_sentences] = np.maximum(cosine[with_sentences], best)
    return cosine


def candidates(
    tail: pa.Table,
    vectors: TurnVectors,
    qvec: np.ndarray | None,
    query: str,
    exclude: set[int],
    k: int,
    config: RecallConfig,
) -> dict[int, Candidate]:
    """Turns said since the last episodic indexing run, as episode candidates: keywords and (for the
    turns the brain embedded when it recorded them) vectors, fused as the snapshot's two legs are."""
    cosine = _cosines(tail, vectors, qvec)
    turns = [{**row, "sources": [row["id"]], "role": "user", "prev_id": None} for row in tail.to_pylist()]
    keep = [i for i, turn in enumerate(turns) if turn["id"] not in exclude]
    texts = [turns[i]["text"] for i in keep]
    matched = by_keywords(query, texts, k, config.rrf_k)
    by_words = [{**turns[keep[j]], "_words": said} for j, _, said in matched]
    by_meaning = sorted((i for i in keep if cosine[i] >= config.min_cosine), key=lambda i: -cosine[i])[:k]
    close = [{**turns[i], "_cosine": float(cosine[i])} for i in by_meaning]
    return fuse(close, by_words, config, stemmed(query))
