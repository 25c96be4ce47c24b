"""Threads and decisions brought up to date with the owner's new turns (the threads and decisions
assets). Each keeps its own cursor into the session, moved in the same transaction as its writes.

Only the owner's turns count: the threads and decisions in BOOTSTRAP.md are the user's, not a
stranger's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import timedelta

from cortex_pipelines.config import Settings
from cortex_pipelines.memory.extract import SKIP_CHANNELS
from cortex_pipelines.publish.decisions import Decision, extract_decisions
from cortex_pipelines.publish.threads import Thread, update_threads
from cortex_pipelines.storage import Database, cursors, utcnow
from cortex_pipelines.storage.decisions import add_decisions, decisions_since
from cortex_pipelines.storage.session import inbound_after
from cortex_pipelines.storage.threads import all_threads, replace_threads
from cortex_pipelines.turn import Turn

THREADS_CURSOR = "threads_tracked"
DECISIONS_CURSOR = "decisions_tracked"


@dataclass
class ThreadsUpdate:
    turns_read: int
    threads: list[Thread]  # all of them, after the update


@dataclass
class DecisionsUpdate:
    turns_read: int
    found: list[Decision]  # the new ones


def track_threads(db: Database, settings: Settings) -> ThreadsUpdate:
    """Fold the owner's new turns into the threads: open, match, close, prune and cap them."""
    turns, upto = db.run(_owner_turns, settings, THREADS_CURSOR)
    threads = [Thread(**row) for row in db.run(all_threads)]
    if turns:
        threads = update_threads(
            threads,
            turns,
            utcnow(),
            prune_days=int(settings.thread_prune_days),
            max_threads=settings.max_threads,
        )

    def save(con):
        if turns:
            replace_threads(con, [asdict(t) for t in threads])
        cursors.write(con, THREADS_CURSOR, upto)

    db.run(save)
    return ThreadsUpdate(len(turns), threads)


def track_decisions(db: Database, settings: Settings) -> DecisionsUpdate:
    """Store the decisions the owner's new turns state, skipping one already stated within the
    dedupe window."""
    turns, upto = db.run(_owner_turns, settings, DECISIONS_CURSOR)
    found = []
    if turns:
        window = timedelta(hours=settings.decision_dedupe_hours)
        existing = [Decision(**row) for row in db.run(decisions_since, turns[0].ts - window)]
        found = extract_decisions(turns, existing, dedupe_hours=int(settings.decision_dedupe_hours))

    def save(con):
        add_decisions(con, [asdict(d) for d in found])
        cursors.write(con, DECISIONS_CURSOR, upto)

    db.run(save)
    return DecisionsUpdate(len(turns), found)


def _owner_turns(con, settings: Settings, cursor_name: str) -> tuple[list[Turn], int]:
    """The owner's turns after the cursor, and where the cursor moves to (past every turn read)."""
    cursor = cursors.read(con, cursor_name)
    rows = inbound_after(con, cursor)
    turns = [
        Turn(i, "user", ch, who, text, ts)
        for i, ch, who, text, ts in rows
        if ch not in SKIP_CHANNELS and settings.is_owner(ch, who)
    ]
    return turns, (rows[-1][0] if rows else cursor)
