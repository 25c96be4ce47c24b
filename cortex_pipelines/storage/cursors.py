"""Named cursors: the session id (or, for observations, a key) each pipeline has read up to, so a
run reads only what is new, and what waits past them."""

from __future__ import annotations

from cortex_pipelines.storage.db import utcnow


def read(con, name: str) -> int:
    """The cursor's position; 0 for one never written."""
    rows = con.execute("SELECT value FROM cursors WHERE name = ?", [name]).fetchall()
    return int(rows[0][0]) if rows else 0


def write(con, name: str, value: int) -> None:
    con.execute(
        "INSERT OR REPLACE INTO cursors (name, value, updated_at) VALUES (?, ?, ?)",
        [name, value, utcnow()],
    )


def user_turns_after(con, name: str) -> tuple[int, int]:
    """How many user turns were said after the cursor, and the newest one's id (0 when none)."""
    return con.execute(
        "SELECT count(*), coalesce(max(id), 0) FROM session WHERE role = 'user' "
        "AND id > coalesce((SELECT value FROM cursors WHERE name = ?), 0)",
        [name],
    ).fetchone()
