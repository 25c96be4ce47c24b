"""LanceDB upkeep over years of use: folding a run's few new rows into a large table must not
rewrite the table, nor keep a copy of it for a week, each time (the home grew by 191 MB per
`cortex run` at 60,000 messages); the fragments are still compacted once enough have gathered."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from cortex_pipelines.memory.vectors import COMPACT_AT_FRAGMENTS, EPISODIC, VectorStore

MODEL = "all-MiniLM-L6-v2"


def _turns(first: int, count: int) -> list[dict]:
    vectors = np.random.default_rng(first).normal(size=(count, 384)).astype(np.float32)
    return [
        {
            "id": first + n,
            "text": f"turn {first + n} about the garden and the tomatoes",
            "search_text": f"turn {first + n} about the garden and the tomatoes",
            "vector": (vectors[n] / np.linalg.norm(vectors[n])).tolist(),
            "channel": "webchat",
            "sources": [first + n],
            "category": "message",
            "importance": 1.0,
            "stated_at": datetime(2026, 1, 1),
            "role": "user",
            "sender": "maya",
            "prev_id": None,
            "sentence_vectors": [],
        }
        for n in range(count)
    ]


def _data_files(folder) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (folder / f"{EPISODIC}.lance" / "data").iterdir()}


def test_upkeep_leaves_a_large_table_alone_until_enough_small_fragments_gather(tmp_path):
    store = VectorStore(tmp_path / "lance")
    store.upsert(EPISODIC, _turns(1, 4000), MODEL)
    (history,) = _data_files(tmp_path / "lance")
    size = sum(_data_files(tmp_path / "lance").values())

    for run in range(COMPACT_AT_FRAGMENTS - 2):  # a run indexes a few turns, then the upkeep
        store.upsert(EPISODIC, _turns(10_000 + 10 * run, 3), MODEL)
        assert store.optimize(EPISODIC) is False
    files = _data_files(tmp_path / "lance")
    assert history in files  # never rewritten
    assert sum(files.values()) < 1.2 * size  # no copy of the table kept beside it

    store.upsert(EPISODIC, _turns(20_000, 3), MODEL)
    assert store.optimize(EPISODIC) is True  # now the small fragments are folded together
    table = store.table(EPISODIC)
    assert table.stats()["fragment_stats"]["num_fragments"] == 1
    assert table.count_rows() == 4000 + 3 * (COMPACT_AT_FRAGMENTS - 1)
