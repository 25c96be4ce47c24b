"""Threads and decisions in DuckDB. Threads are rewritten whole (the tracker returns the full new
state); decisions are append-only."""

from __future__ import annotations

import json
from datetime import datetime

from cortex_pipelines.publish.tracking import Decision, Thread

THREAD_COLUMNS = (
    "id, title, status, priority, summary, decisions, waiting_for, mood, last_activity, "
    "created, closed_at, sources"
)


def load_threads(con) -> list[Thread]:
    rows = con.execute(f"SELECT {THREAD_COLUMNS} FROM threads ORDER BY created, id").fetchall()
    return [
        Thread(
            id=r[0],
            title=r[1],
            status=r[2],
            priority=r[3],
            summary=r[4],
            decisions=json.loads(r[5]),
            waiting_for=r[6],
            mood=r[7],
            last_activity=r[8],
            created=r[9],
            closed_at=r[10],
            sources=list(r[11]),
        )
        for r in rows
    ]


def save_threads(con, threads: list[Thread]) -> None:
    con.execute("DELETE FROM threads")
    for t in threads:
        con.execute(
            f"INSERT INTO threads ({THREAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                t.id,
                t.title,
                t.status,
                t.priority,
                t.summary,
                json.dumps(t.decisions),
                t.waiting_for,
                t.mood,
                t.last_activity,
                t.created,
                t.closed_at,
                list(t.sources),
            ],
        )


def load_decisions(con, since: datetime | None = None) -> list[Decision]:
    rows = con.execute(
        "SELECT id, what, why, impact, who, decided_at, source, channel FROM decisions "
        "WHERE ? IS NULL OR decided_at >= ? ORDER BY decided_at, id",
        [since, since],
    ).fetchall()
    return [
        Decision(
            id=r[0], what=r[1], why=r[2], impact=r[3], who=r[4], decided_at=r[5], source=r[6], channel=r[7]
        )
        for r in rows
    ]


def add_decisions(con, decisions: list[Decision]) -> None:
    for d in decisions:
        con.execute(
            "INSERT INTO decisions (id, what, why, impact, who, decided_at, source, channel) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            [d.id, d.what, d.why, d.impact, d.who, d.decided_at, d.source, d.channel],
        )
