"""The vectors of user turns, written with the turn (write-through) and read by recall's tail
search and by episodic indexing, which copies them into LanceDB instead of embedding again."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def record(con, session_id: int, model: str, vector: np.ndarray, sentence_vectors: np.ndarray) -> None:
    con.execute(
        "INSERT INTO turn_vectors (session_id, model, vector, sentence_vectors) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (session_id) DO NOTHING",
        [session_id, model, vector.tolist(), sentence_vectors.tolist()],
    )


def stored(con, session_ids: list[int], model: str) -> dict[int, tuple[list[float], list[list[float]]]]:
    """(vector, sentence vectors) of the given turns that `model` embedded."""
    if not session_ids:
        return {}
    rows = con.execute(
        "SELECT session_id, vector, sentence_vectors FROM turn_vectors "
        "WHERE model = ? AND session_id IN (SELECT unnest(?))",
        [model, session_ids],
    ).fetchall()
    return {sid: (vec, sents) for sid, vec, sents in rows}


def unindexed_user_turns(con, cursor: str, k: int, model: str, everything: bool = False) -> pa.Table:
    """The newest user turns said since the episodic cursor (or at all, when `everything`), at most
    k, newest first, with the vectors `model` gave each when it was recorded (null when none)."""
    return con.sql(
        """
        SELECT s.id, s.channel, s.sender, s.content AS text, s.ts AS stated_at,
               v.vector, v.sentence_vectors
        FROM session s LEFT JOIN turn_vectors v ON v.session_id = s.id AND v.model = $model
        WHERE s.role = 'user'
          AND ($everything OR s.id > coalesce((SELECT value FROM cursors WHERE name = $cursor), 0))
        ORDER BY s.id DESC LIMIT $k
        """,
        params={"model": model, "everything": everything, "cursor": cursor, "k": k},
    ).to_arrow_table()
