"""Compaction's tables: the rolling summary of each conversation (topic_summaries.topic is the
conversation key) and the layer a conversation is in (foreground while talked in, background once
compacted)."""

from __future__ import annotations

from datetime import datetime

from cortex_pipelines.storage.conversations import OF_TURN
from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows
from cortex_pipelines.storage.session import NOT_FORGOTTEN


def idle_foreground_conversations(con, idle_since: datetime) -> list[str]:
    """Foreground conversations with no message since a time."""
    return [
        r[0]
        for r in con.execute(
            "SELECT conversation FROM conversations WHERE layer = 'foreground' AND last_message_at < ? "
            "ORDER BY conversation",
            [idle_since],
        ).fetchall()
    ]


def unsummarized(con, conversation: str) -> tuple[str | None, list[dict]]:
    """The conversation's rolling summary (None before the first), and its turns said since it was
    written (every turn before the first), silences left out, oldest first, with who said each."""
    row = con.execute(
        "SELECT summary, updated_at FROM topic_summaries WHERE topic = ?", [conversation]
    ).fetchone()
    previous, since = row if row else (None, None)
    turns = dict_rows(
        con.execute(
            f"SELECT id, role, channel, sender, content, ts FROM session WHERE {OF_TURN} = ? "
            "AND content <> '[silence]' "
            f"AND (? IS NULL OR ts > ?) AND {NOT_FORGOTTEN} ORDER BY id",
            [conversation, since, since],
        )
    )
    return previous, turns


def snapshot_turns(con, turn_ids: list[int]) -> list[dict]:
    """Of the turns a hot snapshot showed, those it may still quote (not a forgotten fact's
    exchange, nor an erased turn), by conversation, oldest first, as `unsummarized` reads them."""
    return dict_rows(
        con.execute(
            f"SELECT id, role, channel, sender, content, ts, {OF_TURN} AS conversation FROM session "
            f"WHERE list_contains(?::BIGINT[], id) AND {NOT_FORGOTTEN} ORDER BY conversation, id",
            [turn_ids],
        )
    )


def demote(con, conversation: str, summary: str | None, sources: list[int]) -> None:
    """Move a compacted conversation to the background layer with its summary; the rolling summary
    is rewritten when new turns (`sources`) made one."""
    if summary and sources:
        con.execute(
            "INSERT OR REPLACE INTO topic_summaries (topic, channel, summary, sources, updated_at) "
            "SELECT conversation, channel, ?, ?, ? FROM conversations WHERE conversation = ?",
            [summary, sources, utcnow(), conversation],
        )
    con.execute(
        "UPDATE conversations SET layer = 'background', summary = coalesce(?, summary) "
        "WHERE conversation = ?",
        [summary, conversation],
    )


def drop_for_turns(con, turn_ids: list[int]) -> None:
    """Forget: the summaries written from these turns go (compaction writes them again without the
    forgotten exchanges), as the background of every prompt shows them."""
    topics = [
        r[0]
        for r in con.execute(
            "SELECT topic FROM topic_summaries WHERE len(list_intersect(sources, ?::BIGINT[])) > 0",
            [turn_ids],
        ).fetchall()
    ]
    said_in = [
        r[0]
        for r in con.execute(
            f"SELECT DISTINCT {OF_TURN} FROM session WHERE list_contains(?::BIGINT[], id)", [turn_ids]
        ).fetchall()
    ]
    con.execute("DELETE FROM topic_summaries WHERE list_contains(?::VARCHAR[], topic)", [topics])
    con.execute(
        "UPDATE conversations SET summary = NULL WHERE list_contains(?::VARCHAR[], conversation)", [said_in]
    )
