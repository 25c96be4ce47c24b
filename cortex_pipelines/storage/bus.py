"""The durable message queue: idempotent enqueue, priority-ordered claim, terminal states."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from cortex_pipelines.files import touch
from cortex_pipelines.processes import polars_keeping_sigint
from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows

BUS_STATES = ("pending", "processing", "completed", "failed", "skipped")



@dataclass(frozen=True)
class BusMessage:
    id: int
    channel: str
    external_id: str
    sender: str | None
    text: str
    priority: str
    thread: str | None
    reply_to: str | None
    metadata: dict
    sent_at: datetime
    attempts: int


# The external id a message gets from its content when its sender gave none (`envelope.content_id`).
CONTENT_ID_PREFIX = "sha256:"
# What says where such a message belongs or what it answers, beside its words: the chat
# (conversations.py, outbox.py), the connector's message, the op a router result completes (ops.py)
# and the message it replies to. Two messages that differ in one of these are two messages.
CONTENT_ID_KEYS = ("chat_id", "message_id", "op_id", "op_ref")


def content_id_keys(reply_to: str | None, metadata: dict) -> list[list[str]]:
    """The [name, value] pairs of a message's CONTENT_ID_KEYS (metadata) and reply_to that are set,
    values as text: chat_id 7 and "7" are one chat, as in the conversation key. Empty when none is,
    and then its content id is made the way it was before these counted."""
    fields = {"reply_to": reply_to, **{key: metadata.get(key) for key in CONTENT_ID_KEYS}}
    pairs = []
    for name, value in fields.items():
        if value is None or value == "":
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
        pairs.append([name, text])
    return pairs


@dataclass(frozen=True)
class EnqueueResult:
    inserted: list[int]
    duplicates: int
    inserted_by_source: dict[str, int] = field(default_factory=dict)


def stored_under_old_id(con, rows: list[dict]) -> dict[int, int]:
    """Rows (by position) already in the bus under the content id their message had before
    CONTENT_ID_KEYS counted (`old_content_id`, set only where it differs), with the same values of
    those keys: {position: bus id}. A file dropped before the upgrade and again after is one message."""
    wanted = {n: row for n, row in enumerate(rows) if row.get("old_content_id")}
    if not wanted:
        return {}
    stored = con.execute(
        "SELECT id, channel, external_id, reply_to, metadata FROM bus "
        "WHERE external_id IN (SELECT unnest(?::VARCHAR[]))",
        [sorted({row["old_content_id"] for row in wanted.values()})],
    ).fetchall()
    by_id = {
        (channel, ext): (bus_id, content_id_keys(reply_to, json.loads(meta) if meta else {}))
        for bus_id, channel, ext, reply_to, meta in stored
    }
    known = {}
    for n, row in wanted.items():
        found = by_id.get((row["channel"], row["old_content_id"]))
        keys = content_id_keys(row.get("reply_to"), json.loads(row.get("metadata") or "{}"))
        if found and found[1] == keys:
            known[n] = found[0]
    return known


def enqueue_rows(con, rows: list[dict], source: str, state: str = "pending") -> EnqueueResult:
    """Insert validated rows in one statement through Arrow, in order; existing (channel,
    external_id) win, as does a message stored under its old content id (`stored_under_old_id`), and
    an erased message's id stays out (all counted with the duplicates). A row may name its own
    `source` (the file it came from)."""
    if not rows:
        return EnqueueResult([], 0)
    known = stored_under_old_id(con, rows)
    fresh = [row for n, row in enumerate(rows) if n not in known]
    if not fresh:
        return EnqueueResult([], len(rows))
    pl = polars_keeping_sigint()
    frame = pl.DataFrame(  # noqa: F841 - read by DuckDB's replacement scan
        [{**row, "source": row.get("source", source), "ordinal": n} for n, row in enumerate(fresh)],
        schema={
            "channel": pl.String,
            "external_id": pl.String,
            "sender": pl.String,
            "text": pl.String,
            "priority": pl.String,
            "priority_rank": pl.Int32,
            "thread": pl.String,
            "reply_to": pl.String,
            "metadata": pl.String,
            "sent_at": pl.Datetime("us"),
            "source": pl.String,
            "ordinal": pl.Int64,
        },
    )
    inserted = con.execute(
        """
        INSERT INTO bus (channel, external_id, sender, text, priority, priority_rank, thread,
                         reply_to, metadata, sent_at, enqueued_at, source, state)
        SELECT channel, external_id, sender, text, priority, priority_rank, thread, reply_to,
               metadata::JSON, sent_at, ?, source, ?
        FROM frame
        WHERE NOT EXISTS (
            SELECT 1 FROM erased_ids e WHERE e.channel = frame.channel AND e.external_id = frame.external_id
        )
        ORDER BY ordinal
        ON CONFLICT (channel, external_id) DO NOTHING
        RETURNING id, source
        """,
        [utcnow(), state],
    ).fetchall()
    ids = sorted(r[0] for r in inserted)
    per_source: dict[str, int] = {}
    for _, src in inserted:
        per_source[src] = per_source.get(src, 0) + 1
    # Rows repeated inside one batch collapse too; count them as duplicates.
    return EnqueueResult(ids, len(rows) - len(ids), per_source)


def died_with(con, bus_id: int, error: str) -> None:
    """Why the run is about to die on this message (a store's error, not the message's): the
    failure after its last attempt says so, not only that runs died."""
    con.execute("UPDATE bus SET error = ? WHERE id = ? AND state = 'processing'", [error, bus_id])


def enqueue_one(con, row: dict, source: str) -> tuple[int | None, bool]:
    """Insert one validated row; (its bus id, False), or (the id of the message already there with
    its (channel, external_id), or its old content id, True), or (None, True) when a message of that
    id was erased."""
    result = enqueue_rows(con, [row], source)
    if result.inserted:
        return result.inserted[0], False
    found = con.execute(
        "SELECT id FROM bus WHERE channel = ? AND external_id = ?", [row["channel"], row["external_id"]]
    ).fetchone()
    if found is None and (old := stored_under_old_id(con, [row])):
        return old[0], True
    return (found[0] if found else None), True


def _to_message(row: tuple) -> BusMessage:
    (mid, channel, ext, sender, text, priority, thread, reply_to, meta, sent_at, attempts) = row
    return BusMessage(
        id=mid,
        channel=channel,
        external_id=ext,
        sender=sender,
        text=text,
        priority=priority,
        thread=thread,
        reply_to=reply_to,
        metadata=json.loads(meta) if meta else {},
        sent_at=sent_at,
        attempts=attempts,
    )


_MESSAGE_COLUMNS = (
    "id, channel, external_id, sender, text, priority, thread, reply_to, metadata, sent_at, attempts"
)


def claim_next(con) -> BusMessage | None:
    """Take the next due message (urgent > normal > background, FIFO within a tier)."""
    now = utcnow()
    row = con.execute(
        f"""
        SELECT {_MESSAGE_COLUMNS} FROM bus
        WHERE state = 'pending' AND (not_before IS NULL OR not_before <= ?)
        ORDER BY priority_rank, id LIMIT 1
        """,
        [now],
    ).fetchone()
    if row is None:
        return None
    con.execute(
        "UPDATE bus SET state = 'processing', attempts = attempts + 1, started_at = ? WHERE id = ?",
        [now, row[0]],
    )
    return _to_message((*row[:-1], row[-1] + 1))


def recover_interrupted(
    con, max_attempts: int, started_before: datetime | None = None
) -> tuple[list[int], list[int]]:
    """Rows a dead drainer left in 'processing' (optionally only those started before a time):
    back to the queue (the attempt stays counted), or failed when they used up their attempts,
    so a message that crashes the process cannot block the queue forever.
    Returns (requeued ids, failed ids)."""
    failed = con.execute(
        "UPDATE bus SET state = 'failed', finished_at = ?, started_at = NULL, "
        "error = 'interrupted: the processing run died on this message ' || attempts || ' time(s)' "
        # what the run last saw go wrong, when it could say (died_with): a killed run says nothing
        "|| CASE WHEN error NOT LIKE 'interrupted:%' THEN ' (last: ' || error || ')' ELSE '' END "
        "WHERE state = 'processing' AND attempts >= ? AND (?::TIMESTAMP IS NULL OR started_at < ?) "
        "RETURNING id",
        [utcnow(), max_attempts, started_before, started_before],
    ).fetchall()
    requeued = con.execute(
        "UPDATE bus SET state = 'pending', started_at = NULL, "
        "error = coalesce(error, 'interrupted: the processing run died mid-message') "
        "WHERE state = 'processing' AND (?::TIMESTAMP IS NULL OR started_at < ?) RETURNING id",
        [started_before, started_before],
    ).fetchall()
    return [r[0] for r in requeued], [r[0] for r in failed]


def release_claimed(con, since: datetime, counted_before: datetime) -> list[int]:
    """Rows a drainer that holds the lease claimed since `since` and was stopped on (SIGINT,
    SIGTERM), back to the queue with that attempt not counted: stopping a run again and again never
    fails a message. One it had worked on since before `counted_before` keeps the attempt: a run
    stopped because it hung on that message (its max runtime) must not retry it for ever. Returns
    their ids."""
    rows = con.execute(
        "UPDATE bus SET state = 'pending', started_at = NULL, "
        "attempts = CASE WHEN started_at >= ? THEN greatest(attempts - 1, 0) ELSE attempts END "
        "WHERE state = 'processing' AND started_at >= ? RETURNING id",
        [counted_before, since],
    ).fetchall()
    return sorted(r[0] for r in rows)


def put_back_uncounted(con, bus_id: int) -> None:
    """A claimed message back to the queue as if never tried: what stopped it was not its fault."""
    con.execute(
        "UPDATE bus SET state = 'pending', started_at = NULL, attempts = greatest(attempts - 1, 0) "
        "WHERE id = ? AND state = 'processing'",
        [bus_id],
    )


def requeue_failed(con, ids: list[int] | None, skipped_too: bool = False) -> list[int]:
    """Failed messages back to pending with fresh attempts (all of them when ids is None); with
    `skipped_too`, skipped ones as well (their channel was off or their sender not allowed then: a
    router result skipped so was otherwise lost for good)."""
    rows = con.execute(
        "UPDATE bus SET state = 'pending', attempts = 0, not_before = NULL, finished_at = NULL "
        "WHERE (state = 'failed' OR (? AND state = 'skipped')) AND (? IS NULL OR list_contains(?, id)) "
        "RETURNING id",
        [skipped_too, ids, ids],
    ).fetchall()
    return sorted(r[0] for r in rows)


def mark_completed(con, bus_id: int) -> None:
    con.execute(
        "UPDATE bus SET state = 'completed', finished_at = ?, error = NULL WHERE id = ?",
        [utcnow(), bus_id],
    )


def mark_skipped(con, bus_id: int, reason: str) -> None:
    con.execute(
        "UPDATE bus SET state = 'skipped', finished_at = ?, error = ? WHERE id = ?",
        [utcnow(), reason, bus_id],
    )


def fail_or_retry(con, msg: BusMessage, error: str, max_attempts: int, backoff_s: float) -> str:
    """After a failed attempt: back to pending with a delay, or failed for good. Returns the state."""
    final = msg.attempts >= max_attempts
    state = "failed" if final else "pending"
    delay = timedelta(seconds=backoff_s * (2 ** (msg.attempts - 1)))
    not_before = None if final else utcnow() + delay
    con.execute(
        "UPDATE bus SET state = ?, error = ?, not_before = ?, finished_at = ? "
        "WHERE id = ? AND state = 'processing'",
        [state, error[:2000], not_before, utcnow() if final else None, msg.id],
    )
    return state


def counts(con) -> dict[str, int]:
    rows = dict(con.execute("SELECT state, count(*) FROM bus GROUP BY state").fetchall())
    return {state: int(rows.get(state, 0)) for state in BUS_STATES}


def due_pending(con) -> tuple[int, str]:
    """How many messages a processing run could take now, and a key that changes when they do."""
    row = con.execute(
        "SELECT count(*), coalesce(max(id), 0), coalesce(sum(attempts), 0) FROM bus "
        "WHERE state IN ('pending', 'processing') AND (not_before IS NULL OR not_before <= ?)",
        [utcnow()],
    ).fetchone()
    return int(row[0]), f"upto-{row[1]}-attempts-{row[2]}"


def next_retry_at(con) -> datetime | None:
    """When the earliest message held back for a retry comes due (naive UTC), if any is."""
    return con.execute(
        "SELECT min(not_before) FROM bus WHERE state = 'pending' AND not_before > ?", [utcnow()]
    ).fetchone()[0]


def doorbell(db_path: Path) -> Path:
    """A file touched after messages are put on the bus (`cortex send`, POST /ingest, a sensor
    that finds messages waiting while a run is alive), so a lingering processing run
    (brain/linger.py) opens DuckDB only when something may have changed."""
    return db_path.with_name(db_path.name + ".doorbell")


def ring_doorbell(db_path: Path) -> None:
    """Touch the doorbell; a failure only delays the answer to the inbox sensor's next tick."""
    touch(doorbell(db_path))


def channels(con) -> list[str]:
    """Every channel a message ever came in on."""
    return [r[0] for r in con.execute("SELECT DISTINCT channel FROM bus").fetchall()]


def state_of(con, bus_id: int) -> tuple[str, str | None] | None:
    """A message's state and its error (why it failed or was skipped); None when there is no such message."""
    return con.execute("SELECT state, error FROM bus WHERE id = ?", [bus_id]).fetchone()


def sent_at(con, bus_id: int) -> datetime | None:
    """When a message was sent (naive UTC, its envelope's timestamp); None when there is no such message."""
    row = con.execute("SELECT sent_at FROM bus WHERE id = ?", [bus_id]).fetchone()
    return row[0] if row else None


def latest_failures(con, limit: int) -> list[dict]:
    """Messages that failed for good, newest first."""
    return dict_rows(
        con.execute(
            "SELECT id, channel, left(text, 120) AS text, error, attempts FROM bus "
            "WHERE state = 'failed' ORDER BY id DESC LIMIT ?",
            [limit],
        )
    )


def gone_wrong(con, failed_since: datetime) -> list[dict]:
    """Messages held back for a retry after an error (with when), and those failed for good since
    `failed_since`, oldest first: what `cortex run` says beside its replies."""
    return dict_rows(
        con.execute(
            "SELECT id, state, error, attempts, not_before FROM bus WHERE error IS NOT NULL AND ("
            "(state = 'pending' AND not_before > ?) OR (state = 'failed' AND finished_at >= ?)) ORDER BY id",
            [utcnow(), failed_since],
        )
    )


def unshown_failures(con) -> list[dict]:
    """Messages that failed for good and whose failure the user has not been told about yet."""
    cur = con.execute(
        "SELECT id, channel, text, error FROM bus WHERE state = 'failed' AND error_shown_at IS NULL "
        "ORDER BY id LIMIT 5"
    )
    return [dict(zip(("id", "channel", "text", "error"), r, strict=True)) for r in cur.fetchall()]


def mark_failures_shown(con, ids: list[int]) -> None:
    if ids:
        con.execute("UPDATE bus SET error_shown_at = ? WHERE id IN (SELECT unnest(?))", [utcnow(), ids])
