"""Channel compaction's tables: the rolling summary of each topic (a channel is its own topic) and
the layer a channel is in (foreground while talked in, background once compacted)."""

from __future__ import annotations

from datetime import datetime

from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows


def idle_foreground_channels(con, idle_since: datetime) -> list[str]:
    """Foreground channels with no message since a time."""
    return [
        r[0]
        for r in con.execute(
            "SELECT channel FROM channel_states WHERE layer = 'foreground' AND last_message_at < ? "
            "ORDER BY channel",
            [idle_since],
        ).fetchall()
    ]


def unsummarized(con, channel: str) -> tuple[str | None, list[dict]]:
    """The channel's rolling summary (None before the first), and the turns said since it was
    written (every turn before the first), silences left out, oldest first."""
    row = con.execute("SELECT summary, updated_at FROM topic_summaries WHERE topic = ?", [channel]).fetchone()
    previous, since = row if row else (None, None)
    turns = dict_rows(
        con.execute(
            "SELECT id, role, content, ts FROM session WHERE channel = ? AND content <> '[silence]' "
            "AND (? IS NULL OR ts > ?) ORDER BY id",
            [channel, since, since],
        )
    )
    return previous, turns


def demote(con, channel: str, summary: str | None, sources: list[int]) -> None:
    """Move a compacted channel to the background layer with its summary; the rolling summary is
    rewritten when new turns (`sources`) made one."""
    if summary and sources:
        con.execute(
            "INSERT OR REPLACE INTO topic_summaries (topic, channel, summary, sources, updated_at) "
            "VALUES (?, ?, ?, ?, ?)",
            [channel, channel, summary, sources, utcnow()],
        )
    con.execute(
        "UPDATE channel_states SET layer = 'background', summary = coalesce(?, summary) WHERE channel = ?",
        [summary, channel],
    )
