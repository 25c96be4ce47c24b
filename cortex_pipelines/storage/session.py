"""The one session across channels, each turn in its conversation (storage/conversations.py);
pinned items and history import."""

from __future__ import annotations

import json
from datetime import datetime

from cortex_pipelines.storage import conversations
from cortex_pipelines.storage.bus import BusMessage, EnqueueResult, enqueue_rows
from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.health import IMPORTED_HISTORY
from cortex_pipelines.storage.rows import dict_rows
from cortex_pipelines.text import (
    HIDDEN_FORGET_REQUEST_PATTERN,
    KEEP_IT_PRIVATE_PATTERN,
    POLITE_RETRACTION_PATTERN,
    RETRACTION_PATTERN,
)
from cortex_pipelines.turn import Turn

_TURN_COLUMNS = "id, role, channel, sender, content, ts"


def append_inbound(con, msg: BusMessage) -> int:
    """Record the inbound turn once, in its conversation, even when a recovered message is
    processed again."""
    metadata = json.dumps(msg.metadata)
    conversation = conversations.key_of(con, msg.channel, metadata, msg.thread)
    row = con.execute(
        """
        INSERT INTO session (bus_id, role, channel, sender, content, ts, metadata, conversation)
        VALUES (?, 'user', ?, ?, ?, ?, ?, ?)
        ON CONFLICT (bus_id, role) DO NOTHING RETURNING id
        """,
        [msg.id, msg.channel, msg.sender, msg.text, msg.sent_at, metadata, conversation],
    ).fetchone()
    if row is None:
        return con.execute("SELECT id FROM session WHERE bus_id = ? AND role = 'user'", [msg.id]).fetchone()[
            0
        ]
    conversations.touch(con, conversation, msg.channel, msg.sent_at)
    return row[0]


def append_owner_note(con, channel: str, sender: str, content: str) -> int:
    """A statement the owner made outside the bus (an admin `/save`): the source of what it saves."""
    return con.execute(
        "INSERT INTO session (bus_id, role, channel, sender, content, ts, metadata) "
        "VALUES (NULL, 'user', ?, ?, ?, ?, '{}') RETURNING id",
        [channel, sender, content, utcnow()],
    ).fetchone()[0]


def append_reply(
    con, bus_id: int, channel: str, content: str, metadata: dict, owners: list[str] | None = None
) -> int:
    """The reply, in the conversation it goes to: the message's own, or on another channel the
    owner's newest there (where the outbox sends it, see `conversations.addressed`)."""
    _, conversation = conversations.addressed(con, bus_id, channel, owners or [])
    row = con.execute(
        """
        INSERT INTO session (bus_id, role, channel, sender, content, ts, metadata, conversation)
        VALUES (?, 'assistant', ?, 'cortex', ?, ?, ?, ?)
        ON CONFLICT (bus_id, role) DO NOTHING RETURNING id
        """,
        [bus_id, channel, content, utcnow(), json.dumps(metadata), conversation],
    ).fetchone()
    return row[0] if row else 0


def reply_text(con, bus_id: int) -> str | None:
    """What the brain answered to a message, None before it has."""
    row = con.execute(
        "SELECT content FROM session WHERE bus_id = ? AND role = 'assistant'", [bus_id]
    ).fetchone()
    return row[0] if row else None


def conversation_of(con, session_id: int) -> str:
    """The conversation a turn belongs to."""
    row = con.execute(f"SELECT {conversations.OF_TURN} FROM session WHERE id = ?", [session_id]).fetchone()
    if row is None:
        raise LookupError(f"no turn {session_id} in the session")
    return row[0]


def mark_read(con, session_id: int) -> None:
    """The turn's conversation has been answered: nothing in it is unread."""
    conversations.mark_read(con, conversation_of(con, session_id))


def import_history(con, rows: list[dict], source: str) -> EnqueueResult:
    """Past conversation: into the bus as already completed and into the session, never answered."""
    result = enqueue_rows(con, rows, source, state="completed")
    if result.inserted:
        con.execute(
            f"""
            INSERT INTO session (bus_id, role, channel, sender, content, ts, metadata, conversation)
            SELECT id, 'user', channel, sender, text, sent_at, metadata, {conversations.OF_BUS} FROM bus
            WHERE id IN (SELECT unnest(?)) ORDER BY id
            ON CONFLICT (bus_id, role) DO NOTHING
            """,
            [result.inserted],
        )
        for conversation, channel, last in con.execute(
            f"SELECT {conversations.OF_BUS}, channel, max(sent_at) FROM bus WHERE id IN (SELECT unnest(?)) "
            "GROUP BY ALL",
            [result.inserted],
        ).fetchall():
            conversations.touch(con, conversation, channel, last)
            conversations.mark_read(con, conversation)
    return result


# The turns of a session row's query the model may read: not the exchange (message and reply) of a
# fact the user asked to forget, which it would otherwise answer from while it stays in view, nor an
# exchange whose reply quoted it (facts.quoted_in, decided by `forget`), nor a message forgotten
# itself (forgotten_turns) and the exchanges that quoted it. An observation ("usually
# active between 09:00 and 11:00") is a pattern over dozens of turns, not what they said: forgetting
# it hid every one of them.
FORGOTTEN_TURNS = (
    "SELECT unnest(list_concat(CASE WHEN origin IS DISTINCT FROM 'observation' THEN sources END, quoted_in)) "
    "FROM facts WHERE status = 'forgotten' "
    "UNION ALL SELECT unnest(list_prepend(session_id, quoted_in)) FROM forgotten_turns"
)


# Nor the exchange of a request to forget ("Please forget that my therapist is Dr. Ramos"): it
# restates what it asks to drop, and the reply to it may too, so it is left out from the moment it
# is said, or forgetting the fact left it in every published file and later prompt. Only a
# request to forget and nothing more (text.HIDDEN_FORGET_REQUEST: "Forget the pasta place, we are
# having dinner at Luigi's" is news, and stays); recall never offers the broader kind either
# (text.never_an_answer).
def _matches(pattern: str) -> str:
    return "regexp_matches(content, '" + pattern.replace("'", "''") + "', 'i')"  # a SQL string literal


# text.only_asks_to_forget, in SQL: a bare request that is no retraction with news.
FORGET_REQUESTS = (
    "SELECT bus_id FROM session WHERE role = 'user' AND bus_id IS NOT NULL "
    f"AND {_matches(HIDDEN_FORGET_REQUEST_PATTERN)} AND NOT ({_matches(RETRACTION_PATTERN)} "
    f"AND NOT {_matches(POLITE_RETRACTION_PATTERN)} AND NOT {_matches(KEEP_IT_PRIVATE_PATTERN)})"
)
NOT_FORGOTTEN = (
    f"id NOT IN ({FORGOTTEN_TURNS}) AND (bus_id IS NULL OR bus_id NOT IN "
    f"(SELECT bus_id FROM session WHERE bus_id IS NOT NULL AND id IN ({FORGOTTEN_TURNS}) "
    f"UNION ALL {FORGET_REQUESTS}))"
)


def exchanges_of(con, turn_ids: list[int], bus_ids: list[int]) -> list[dict]:
    """Every turn of the exchanges (message and reply) that hold these turns or answer these
    messages: what a forget hides together."""
    return dict_rows(
        con.execute(
            "SELECT id, bus_id, role, content FROM session "
            "WHERE list_contains($turns::BIGINT[], id) OR list_contains($bus::BIGINT[], bus_id) "
            "OR bus_id IN (SELECT bus_id FROM session WHERE list_contains($turns::BIGINT[], id)) ORDER BY id",
            {"turns": turn_ids, "bus": bus_ids},
        )
    )


def conversation_history(
    con, conversation: str, limit: int, before_id: int | None = None, answering: int | None = None
) -> list[Turn]:
    """The newest `limit` turns of one conversation in the order they were recorded, as the model
    reads them: without the exchanges of a fact the user asked to forget (NOT_FORGOTTEN). The turn
    being answered (`answering`) is read all the same: a request to forget is answered from its own
    words. Not by `ts`: a message's is when it arrived, a reply's when it was answered, so a message
    that waited while an earlier one was answered came before that reply, and the request ended
    with the assistant's turn instead of the message it answers. Imported history comes before the
    live turns, by when it was said: imported after live use, it had been recorded last, and read
    as the newest exchange it pushed the live turns out of the foreground."""
    rows = con.execute(
        f"""
        SELECT {_TURN_COLUMNS} FROM (
            SELECT *, coalesce(bus_id IN (SELECT id FROM bus WHERE {IMPORTED_HISTORY}), false) AS imported
            FROM session
            WHERE {conversations.OF_TURN} = ? AND (? IS NULL OR id < ?) AND ({NOT_FORGOTTEN} OR id = ?)
        )
        ORDER BY imported, CASE WHEN imported THEN ts END DESC, id DESC LIMIT ?
        """,
        [conversation, before_id, before_id, answering, limit],
    ).fetchall()
    return [Turn(*r) for r in reversed(rows)]


def last_said(con) -> dict[str, tuple[str | None, str]]:
    """The latest inbound turn of every conversation as (sender, text), in one scan."""
    rows = con.execute(
        f"SELECT {conversations.OF_TURN}, arg_max(sender, id), arg_max(content, id) "
        f"FROM session WHERE role = 'user' AND {NOT_FORGOTTEN} GROUP BY ALL"
    ).fetchall()
    return {conversation: (sender, text) for conversation, sender, text in rows}


def inbound_since(con, since: datetime, limit: int) -> list[dict]:
    """The newest `limit` inbound turns since a time, oldest first, with who sent each; never a
    router result: the router's sender owns that channel only to complete delegated work, and its
    text, another agent's, listed as the owner's turn."""
    cur = con.execute(
        "SELECT id, channel, sender, content, ts FROM session "
        "WHERE role = 'user' AND channel <> 'router' AND ts >= ? ORDER BY ts DESC, id DESC LIMIT ?",
        [since, limit],
    )
    return list(reversed(dict_rows(cur)))


# The user role's turns as recall lists them (an id, the text, where, who and when): never a
# router result (as inbound_since), a forgotten turn or a request to forget.
_LISTED_INBOUND = (
    "SELECT id, channel, sender, content AS text, ts AS stated_at FROM session "
    f"WHERE role = 'user' AND channel <> 'router' AND {NOT_FORGOTTEN}"
)


def inbound_between(con, spans: list[tuple[datetime, datetime]], limit: int) -> list[dict]:
    """The newest `limit` inbound turns sent within any of the [start, end) spans, newest first (as
    _LISTED_INBOUND says which)."""
    if not spans:
        return []
    within = " OR ".join("(ts >= ? AND ts < ?)" for _ in spans)
    cur = con.execute(
        f"{_LISTED_INBOUND} AND ({within}) ORDER BY ts DESC, id DESC LIMIT ?",
        [*(bound for span in spans for bound in span), limit],
    )
    return dict_rows(cur)


def inbound_newest(con, limit: int) -> list[dict]:
    """The newest `limit` inbound turns, newest first (as _LISTED_INBOUND says which)."""
    return dict_rows(con.execute(f"{_LISTED_INBOUND} ORDER BY ts DESC, id DESC LIMIT ?", [limit]))


def turn_counts(con, since: datetime) -> dict[str, int]:
    """Turns in the session, all and since a time (inbound and replies)."""
    total, recent = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE ts >= ?) FROM session WHERE content <> '[silence]'", [since]
    ).fetchone()
    return {"total": int(total), "since": int(recent)}


def count_turns(con) -> int:
    """Every turn in the session, silences included."""
    return con.execute("SELECT count(*) FROM session").fetchone()[0]


def latest_id(con) -> int:
    return con.execute("SELECT coalesce(max(id), 0) FROM session").fetchone()[0]


def count_after(con, after_id: int) -> int:
    """How many turns were recorded after a cursor (what an indexing run has left to do)."""
    return con.execute("SELECT count(*) FROM session WHERE id > ?", [after_id]).fetchone()[0]


def inbound_after(con, after_id: int) -> list[tuple]:
    """Inbound turns after a cursor, oldest first: (id, channel, sender, content, ts); never a
    forgotten turn or a request to forget."""
    return con.execute(
        "SELECT id, channel, sender, content, ts FROM session "
        f"WHERE role = 'user' AND id > ? AND {NOT_FORGOTTEN} ORDER BY id",
        [after_id],
    ).fetchall()


def to_extract_after(con, after_id: int) -> list[tuple]:
    """Inbound turns after extraction's cursor, oldest first: (id, channel, sender, content, ts).
    Not an owner's note (what `cortex save` and /save record is already its fact: read again, an
    edit or a merge of that fact was undone by the next run), nor a forgotten turn."""
    return con.execute(
        "SELECT id, channel, sender, content, ts FROM session "
        f"WHERE role = 'user' AND id > ? AND bus_id IS NOT NULL AND {NOT_FORGOTTEN} ORDER BY id",
        [after_id],
    ).fetchall()


def replies_after(con, after_id: int) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT content FROM session WHERE role = 'assistant' AND id > ?", [after_id]
        ).fetchall()
    ]


def inbound_last_week(con, skip_channels: list[str]) -> list[tuple]:
    """Inbound turns of the seven days up to the newest one, oldest first:
    (id, channel, sender, content, ts); never a forgotten turn or a request to forget, which no
    observation may count or cite."""
    return con.execute(
        "WITH last AS (SELECT max(ts) AS newest FROM session WHERE role = 'user') "
        "SELECT id, channel, sender, content, ts FROM session, last "
        "WHERE role = 'user' AND channel NOT IN (SELECT unnest(?)) AND ts > newest - INTERVAL 7 DAY "
        f"AND {NOT_FORGOTTEN} ORDER BY id",
        [skip_channels],
    ).fetchall()


def pins(con) -> list[dict]:
    return dict_rows(con.execute("SELECT id, label, text, created_at FROM pins ORDER BY id"))


PIN_LIMIT = 10


def add_pin(con, text: str, label: str | None) -> list[dict]:
    """Pin an item; past the limit the oldest pins drop out (seed 002: 10 items, FIFO)."""
    con.execute("INSERT INTO pins (label, text, created_at) VALUES (?, ?, ?)", [label, text, utcnow()])
    con.execute(
        "DELETE FROM pins WHERE id NOT IN (SELECT id FROM pins ORDER BY id DESC LIMIT ?)", [PIN_LIMIT]
    )
    return pins(con)


def remove_pin(con, position: int) -> dict | None:
    """Unpin by the 1-based position shown by `cortex pins`."""
    current = pins(con)
    if not 1 <= position <= len(current):
        return None
    con.execute("DELETE FROM pins WHERE id = ?", [current[position - 1]["id"]])
    return current[position - 1]


def clear_pins(con) -> list[dict]:
    """Unpin everything (seed 002's `clear`); returns what was pinned."""
    current = pins(con)
    con.execute("DELETE FROM pins")
    return current


_EPISODES = f"""
    SELECT id, role, channel, sender, content, ts, prev_sender, prev_content, prev_id FROM (
        SELECT id, role, channel, sender, content, ts,
               lag(CASE WHEN role = 'user' THEN sender END IGNORE NULLS) OVER w AS prev_sender,
               lag(CASE WHEN role = 'user' THEN content END IGNORE NULLS) OVER w AS prev_content,
               lag(CASE WHEN role = 'user' THEN id END IGNORE NULLS) OVER w AS prev_id
        FROM session WHERE content <> '[silence]'
        WINDOW w AS (PARTITION BY {conversations.OF_TURN} ORDER BY id)
    )
"""


def episodes_after(con, after_id: int, limit: int) -> list[tuple]:
    """Session turns to index after `after_id`, each with the user turn before it in its conversation
    (what full-text search sees beside it) and that turn's id. Only a user turn: the assistant's
    replies quote recalled memories, which would echo into every turn that follows them."""
    return con.execute(f"{_EPISODES} WHERE id > ? ORDER BY id LIMIT ?", [after_id, limit]).fetchall()


def speakers_of(con, ids: list[int]) -> set[tuple[str, str | None]]:
    """Who said the given turns: (channel, sender) pairs."""
    rows = con.execute(
        "SELECT DISTINCT channel, sender FROM session WHERE list_contains(?::BIGINT[], id)", [ids]
    ).fetchall()
    return {(channel, sender) for channel, sender in rows}


def episodes_of(con, ids: list[int]) -> list[tuple]:
    """The given turns as `episodes_after` returns them: after an erasure, the turns that were paired
    with an erased one are paired with the user turn before it that remains."""
    return con.execute(f"{_EPISODES} WHERE list_contains(?::BIGINT[], id) ORDER BY id", [ids]).fetchall()
