"""Conversations (seed 001's session key chatId:threadId): a channel, a chat on it and a thread in
that chat. The foreground, the background layer, compaction, rolling summaries and unread counts
are per conversation, so two Telegram chats or two forum topics never share a history or a summary.

The key is `channel[:chat[:thread]]`, from a message's `metadata.chat_id` (the connector's chat)
and its thread (or topic): `telegram:111`, `telegram:-100500:7`, `webchat`. A thread without a chat
reads `channel::thread`. There is no fallback to the sender: a channel whose messages name no chat
is one conversation, whoever speaks on it. Chat and thread ids are untrusted input: `%` and `:` in
them are escaped, so two different (chat, thread) pairs never share a key.
"""

from __future__ import annotations

from datetime import datetime

from cortex_pipelines.config import SCHEDULE_CHANNEL, SCHEDULE_SENDER
from cortex_pipelines.storage.rows import dict_rows


def _part(sql: str) -> str:
    return f"replace(replace(nullif(CAST({sql} AS VARCHAR), ''), '%', '%25'), ':', '%3A')"


def key_sql(channel: str = "channel", metadata: str = "metadata", thread: str = "thread") -> str:
    """The conversation key of a row with these columns (a bus row by default), as SQL."""
    chat, topic = _part(f"{metadata}->>'chat_id'"), _part(thread)
    return (
        f"({channel} || CASE WHEN {chat} IS NULL AND {topic} IS NULL THEN '' "
        f"ELSE ':' || coalesce({chat}, '') || coalesce(':' || {topic}, '') END)"
    )


# A bus row's conversation, and a session turn's (turns written before conversations, and notes
# said outside the bus, belong to their channel's own).
OF_BUS = key_sql()
OF_TURN = "coalesce(conversation, channel)"


def key_of(con, channel: str, metadata: str, thread: str | None) -> str:
    """The key of a message not read from the bus (its metadata as JSON text)."""
    return con.execute(
        f"SELECT {key_sql('c', 'm', 't')} FROM (SELECT ?::VARCHAR AS c, ?::JSON AS m, ?::VARCHAR AS t)",
        [channel, metadata, thread],
    ).fetchone()[0]


def addressed(con, bus_id: int, channel: str, owners: list[str]) -> tuple[int | None, str]:
    """Where a reply on `channel` to message `bus_id` goes: that message when it came on `channel`;
    for a schedule's firing, the message that asked for the schedule when it came on `channel` (a
    reminder asked for in one chat or thread had gone to whichever the owner wrote in last, another
    group's included); else (a `[[send_to:channel]]`) the newest message an owner sent on
    `channel`, so the reply joins the owner's latest conversation there, thread included: in their
    private chat when they have one there (the connector's chat_type, else a chat named by their own
    id), else the newest (a reply meant for the owner had reached their family group because they
    last wrote there; QA, helper-54). A group whose other members are not allowlisted looks like the
    owner's alone, so nothing but a private chat is preferred.
    Returns (that bus id or None when no owner ever wrote there, the reply's conversation)."""
    row = con.execute(
        f"SELECT id, {OF_BUS} FROM bus WHERE id = ? AND channel = ?", [bus_id, channel]
    ).fetchone()
    if row is None:  # only the scheduler writes a firing (ingest/envelope.py), so its metadata is ours
        row = con.execute(
            f"""
            SELECT id, {OF_BUS} FROM bus WHERE channel = ? AND id = (
                SELECT TRY_CAST(json_extract_string(metadata, '$.asked_in') AS BIGINT) FROM bus
                WHERE id = ? AND channel = ? AND sender = ?)
            """,
            [channel, bus_id, SCHEDULE_CHANNEL, SCHEDULE_SENDER],
        ).fetchone()
    if row is None:
        row = con.execute(
            f"""
            SELECT id, {OF_BUS} FROM bus AS mine
            WHERE channel = ? AND list_contains(?::VARCHAR[], sender)
            ORDER BY coalesce(
                    metadata->>'chat_type' = 'private',
                    coalesce(metadata->>'chat_id', sender) = sender AND thread IS NULL
                ) DESC,
                id DESC
            LIMIT 1
            """,
            [channel, owners],
        ).fetchone()
    return (row[0], row[1]) if row else (None, channel)


def touch(con, conversation: str, channel: str, at: datetime) -> None:
    """A message arrived: the conversation is in the foreground with one more unread."""
    con.execute(
        """
        INSERT INTO conversations (conversation, channel, last_message_at, unread_count, layer)
        VALUES (?, ?, ?, 1, 'foreground')
        ON CONFLICT (conversation) DO UPDATE SET
            last_message_at = greatest(conversations.last_message_at, excluded.last_message_at),
            unread_count = conversations.unread_count + 1,
            layer = 'foreground'
        """,
        [conversation, channel, at],
    )


def mark_read(con, conversation: str) -> None:
    con.execute("UPDATE conversations SET unread_count = 0 WHERE conversation = ?", [conversation])


def states(con) -> list[dict]:
    """Every conversation, the most recently active first."""
    return dict_rows(
        con.execute(
            "SELECT conversation, channel, last_message_at, unread_count, summary, layer FROM conversations "
            "ORDER BY last_message_at DESC NULLS LAST, conversation"
        )
    )


def counts(con) -> dict:
    """How many conversations there are, per layer and per channel."""
    total, foreground, background = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE layer = 'foreground'), "
        "count(*) FILTER (WHERE layer = 'background') FROM conversations"
    ).fetchone()
    per_channel = con.execute(
        "SELECT channel, count(*) FROM conversations GROUP BY channel ORDER BY channel"
    ).fetchall()
    return {
        "total": int(total),
        "foreground": int(foreground),
        "background": int(background),
        "by_channel": {channel: int(n) for channel, n in per_channel},
    }
