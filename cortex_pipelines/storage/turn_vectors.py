"""The vectors of user turns, written with the turn (write-through) and read by recall's tail
search and by episodic indexing, which copies them into LanceDB instead of embedding again."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cortex_pipelines.storage import cursors


def record(con, session_id: int, model: str, vector: np.ndarray, sentence_vectors: np.ndarray) -> None:
    con.execute(
        "INSERT INTO turn_vectors (session_id, model, vector, sentence_vectors) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (session_id) DO NOTHING",
        [session_id, model, vector.tolist(), sentence_vectors.tolist()],
    )


def stored(con, session_ids: list[int], model: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """(vector, sentence vectors as rows) of the given turns that `model` embedded. The id range
    lets DuckDB skip, by its zone maps, the table's older rows, which only grow."""
    if not session_ids:
        return {}
    table = con.sql(
        "SELECT session_id, vector, sentence_vectors FROM turn_vectors "
        "WHERE model = $model AND session_id BETWEEN $low AND $high "
        "AND list_contains($ids, session_id)",
        params={"model": model, "low": min(session_ids), "high": max(session_ids), "ids": session_ids},
    ).to_arrow_table()
    if not table.num_rows:
        return {}
    width = len(table.column("vector")[0])
    vectors = _rows(table.column("vector").combine_chunks(), width)
    sentences = table.column("sentence_vectors").combine_chunks()
    per_turn = sentences.value_lengths().to_numpy(zero_copy_only=False)
    flat = _rows(sentences.flatten(), width)
    starts = np.concatenate([[0], np.cumsum(per_turn)])
    return {
        int(sid): (vectors[i], flat[starts[i] : starts[i + 1]])
        for i, sid in enumerate(table.column("session_id").to_pylist())
    }


def _rows(lists: pa.ListArray, width: int) -> np.ndarray:
    return lists.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, width)


def user_turns_since(con, cursor: str, k: int, everything: bool = False) -> pa.Table:
    """The newest user turns said since the episodic cursor (or at all, when `everything`), at most
    k, newest first. The cursor is read first so the session scan skips older rows by its zone maps."""
    after = -1 if everything else cursors.read(con, cursor)
    return con.sql(
        "SELECT id, channel, sender, content AS text, ts AS stated_at FROM session "
        "WHERE role = 'user' AND id > $after ORDER BY id DESC LIMIT $k",
        params={"after": after, "k": k},
    ).to_arrow_table()
