"""The published table (one row per published file: what it was built from, when it was last
confirmed current, the bulletin's warm-up state, seed 004) and the reads of other tables that only
the published files make."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from cortex_pipelines.storage.facts import NOT_HARVESTED
from cortex_pipelines.storage.rows import dict_rows
from cortex_pipelines.storage.session import NOT_FORGOTTEN

BULLETIN = "memory_bulletin"  # the row whose state is the warm-up state of the whole instance
HOT_SNAPSHOT = "hot_snapshot"  # its input_key: the ids of the turns hot-snapshot.md shows, as JSON
# The turns a published file may quote, or draw a decision or thread from: not the exchange of a
# fact the user asked to forget, by the same rule as the conversation the model reads.
QUOTABLE_TURNS = f"SELECT id FROM session WHERE {NOT_FORGOTTEN}"


def published_row(con, name: str) -> dict | None:
    rows = dict_rows(con.execute("SELECT * FROM published WHERE name = ?", [name]))
    return rows[0] if rows else None


def set_published_state(con, name: str, path: Path, state: str, error: str | None = None) -> None:
    con.execute(
        "INSERT INTO published (name, path, state, error) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET state = excluded.state, error = excluded.error",
        [name, str(path), state, error],
    )


def record_written(
    con, name: str, path: Path, input_key: str | None, sha256: str, chars: int, words: int, at: datetime
) -> None:
    """A new version of the file is on disk: it is warm, and current as of `at`."""
    con.execute(
        """
        INSERT INTO published (name, path, input_key, sha256, chars, words, generated_at, verified_at,
                               state, error)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'warm', NULL)
        ON CONFLICT (name) DO UPDATE SET input_key = excluded.input_key, sha256 = excluded.sha256,
            chars = excluded.chars, words = excluded.words, generated_at = excluded.generated_at,
            verified_at = excluded.verified_at, state = 'warm', error = NULL
        """,
        [name, str(path), input_key, sha256, chars, words, at, at],
    )


def mark_current(con, name: str, at: datetime, input_key: str | None = None) -> None:
    """The file on disk was found to be what its inputs make: warm, and current as of `at`."""
    con.execute(
        "UPDATE published SET verified_at = ?, input_key = coalesce(?, input_key), state = 'warm', "
        "error = NULL WHERE name = ?",
        [at, input_key, name],
    )


def record_snapshot(con, path: Path, turn_ids: list[int], at: datetime) -> None:
    """Compaction wrote hot-snapshot.md at `at`, showing these turns: a forget writes it again from
    them without the forgotten ones, and an unforget with them."""
    con.execute(
        "INSERT INTO published (name, path, input_key, generated_at, verified_at, state) "
        "VALUES (?, ?, ?, ?, ?, 'warm') ON CONFLICT (name) DO UPDATE SET input_key = excluded.input_key, "
        "generated_at = excluded.generated_at, verified_at = excluded.verified_at",
        [HOT_SNAPSHOT, str(path), json.dumps(turn_ids), at, at],
    )


def snapshot_shown(con) -> tuple[datetime, list[int]] | None:
    """When hot-snapshot.md was written and the turns it showed; None before compaction recorded one."""
    row = published_row(con, HOT_SNAPSHOT)
    return (row["generated_at"], json.loads(row["input_key"])) if row else None


def count_cold_dispatch(con, bulletin: Path) -> None:
    """Seed 004: a turn answered before the bulletin is warm is a cold dispatch; count it."""
    con.execute(
        "INSERT INTO published (name, path, state, cold_dispatches) VALUES (?, ?, 'cold', 1) "
        "ON CONFLICT (name) DO UPDATE SET cold_dispatches = published.cold_dispatches + "
        "CASE WHEN published.state = 'warm' THEN 0 ELSE 1 END",
        [BULLETIN, str(bulletin)],
    )


def bulletin_facts(con) -> list[dict]:
    """Active facts still true (not since updated by the user) in bulletin order. Hit counts are
    left out on purpose: they change on every recall and would rewrite the file (and cool a prompt
    cache) without new knowledge. So are delegated tasks' results: the bulletin is in every
    prompt's system floor, and a result is another agent's text (storage/facts.py's OP_HARVEST)."""
    return dict_rows(
        con.execute(
            "SELECT id, text, category, importance, sources, stated_at FROM facts WHERE status = 'active' "
            f"AND valid_to IS NULL AND {NOT_HARVESTED} ORDER BY importance DESC, stated_at DESC, id DESC"
        )
    )


def latest_user_activity(con) -> datetime | None:
    """When anyone last wrote (replies carry the wall-clock time they were made)."""
    return con.execute("SELECT max(ts) FROM session WHERE role = 'user'").fetchone()[0]


def timeline_turns(con, since: datetime, limit: int) -> list[dict]:
    """The newest `limit` inbound turns since a time, oldest first, with who sent each; not those
    of a fact the user asked to forget."""
    cur = con.execute(
        "SELECT id, channel, sender, content, ts FROM session "
        f"WHERE role = 'user' AND ts >= ? AND {NOT_FORGOTTEN} ORDER BY ts DESC, id DESC LIMIT ?",
        [since, limit],
    )
    return list(reversed(dict_rows(cur)))


def recent_user_texts(con, limit: int) -> list[str]:
    """What the last `limit` inbound turns said, oldest first."""
    rows = con.execute(
        "SELECT content FROM session WHERE role = 'user' ORDER BY id DESC LIMIT ?", [limit]
    ).fetchall()
    return [r[0] for r in reversed(rows)]


def count_turns(con) -> int:
    return con.execute("SELECT count(*) FROM session").fetchone()[0]
