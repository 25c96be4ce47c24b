"""Conversation threads (seed 003). The tracker returns the whole new state, so it is written
whole."""

from __future__ import annotations

import json

from cortex_pipelines.storage.published import QUOTABLE_TURNS
from cortex_pipelines.storage.rows import dict_rows

COLUMNS = (
    "id, title, status, priority, summary, decisions, waiting_for, mood, last_activity, created, closed_at, "
    "sources"
)


def all_threads(con) -> list[dict]:
    """Every thread, oldest first, with its decisions and sources as lists."""
    rows = dict_rows(con.execute(f"SELECT {COLUMNS} FROM threads ORDER BY created, id"))
    for row in rows:
        row["decisions"] = json.loads(row["decisions"])
        row["sources"] = list(row["sources"])
    return rows


def replace_threads(con, threads: list[dict]) -> None:
    con.execute("DELETE FROM threads")
    for t in threads:
        con.execute(
            f"INSERT INTO threads ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                t["id"],
                t["title"],
                t["status"],
                t["priority"],
                t["summary"],
                json.dumps(t["decisions"]),
                t["waiting_for"],
                t["mood"],
                t["last_activity"],
                t["created"],
                t["closed_at"],
                list(t["sources"]),
            ],
        )


def threads_to_publish(con) -> list[dict]:
    """What narrative.md and BOOTSTRAP.md show of each thread, by id. Not a thread touched by a turn
    the user asked to forget: its title and summary quote the turn that opened it, its wait a later
    one, and which turn said what is not kept."""
    return dict_rows(
        con.execute(
            "SELECT id, title, status, priority, summary, waiting_for, mood, last_activity, closed_at, "
            "sources FROM threads WHERE NOT EXISTS (SELECT 1 FROM unnest(threads.sources) AS said(turn) "
            f"WHERE turn NOT IN ({QUOTABLE_TURNS})) ORDER BY id"
        )
    )
