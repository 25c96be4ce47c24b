"""Versioned schema. Append new versions; never edit a released one."""

from __future__ import annotations

V1 = [
    # The durable queue. Idempotent on (channel, external_id); priority_rank 0 urgent .. 2 background.
    "CREATE SEQUENCE bus_seq START 1",
    """CREATE TABLE bus (
        id BIGINT PRIMARY KEY DEFAULT nextval('bus_seq'),
        channel VARCHAR NOT NULL,
        external_id VARCHAR NOT NULL,
        sender VARCHAR,
        text VARCHAR NOT NULL,
        priority VARCHAR NOT NULL,
        priority_rank INTEGER NOT NULL,
        thread VARCHAR,
        reply_to VARCHAR,
        metadata JSON,
        sent_at TIMESTAMP NOT NULL,
        enqueued_at TIMESTAMP NOT NULL,
        source VARCHAR,
        state VARCHAR NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        not_before TIMESTAMP,
        started_at TIMESTAMP,
        finished_at TIMESTAMP,
        error VARCHAR,
        error_shown_at TIMESTAMP,
        UNIQUE (channel, external_id)
    )""",
    # One session across all channels: inbound turns and the agent's replies.
    "CREATE SEQUENCE session_seq START 1",
    """CREATE TABLE session (
        id BIGINT PRIMARY KEY DEFAULT nextval('session_seq'),
        bus_id BIGINT,
        role VARCHAR NOT NULL,
        channel VARCHAR NOT NULL,
        sender VARCHAR,
        content VARCHAR NOT NULL,
        ts TIMESTAMP NOT NULL,
        metadata JSON,
        UNIQUE (bus_id, role)
    )""",
    """CREATE TABLE channel_states (
        channel VARCHAR PRIMARY KEY,
        last_message_at TIMESTAMP,
        unread_count INTEGER NOT NULL DEFAULT 0,
        summary VARCHAR,
        layer VARCHAR NOT NULL DEFAULT 'foreground'
    )""",
    """CREATE TABLE pending_ops (
        id VARCHAR PRIMARY KEY,
        bus_id BIGINT,
        type VARCHAR NOT NULL,
        description VARCHAR NOT NULL,
        dispatched_at TIMESTAMP NOT NULL,
        deadline_at TIMESTAMP,
        expected_channel VARCHAR,
        status VARCHAR NOT NULL,
        completed_at TIMESTAMP,
        result VARCHAR,
        gardened_at TIMESTAMP,
        acknowledged_at TIMESTAMP
    )""",
    "CREATE SEQUENCE checkpoint_seq START 1",
    """CREATE TABLE checkpoints (
        id BIGINT PRIMARY KEY DEFAULT nextval('checkpoint_seq'),
        bus_id BIGINT NOT NULL,
        created_at TIMESTAMP NOT NULL,
        last_session_id BIGINT,
        channel_states JSON,
        open_ops INTEGER
    )""",
    "CREATE SEQUENCE outbox_seq START 1",
    """CREATE TABLE outbox (
        id BIGINT PRIMARY KEY DEFAULT nextval('outbox_seq'),
        bus_id BIGINT NOT NULL,
        channel VARCHAR NOT NULL,
        text VARCHAR NOT NULL,
        reply_to BIGINT,
        created_at TIMESTAMP NOT NULL,
        exported_at TIMESTAMP,
        delivered_at TIMESTAMP,
        UNIQUE (bus_id, channel)
    )""",
    "CREATE SEQUENCE llm_usage_seq START 1",
    """CREATE TABLE llm_usage (
        id BIGINT PRIMARY KEY DEFAULT nextval('llm_usage_seq'),
        called_at TIMESTAMP NOT NULL,
        provider VARCHAR NOT NULL,
        model VARCHAR NOT NULL,
        purpose VARCHAR NOT NULL,
        bus_id BIGINT,
        asset VARCHAR,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        latency_ms DOUBLE NOT NULL DEFAULT 0,
        ok BOOLEAN NOT NULL,
        error VARCHAR
    )""",
    # Pinned working memory (seed 002), always in the system floor.
    "CREATE SEQUENCE pin_seq START 1",
    """CREATE TABLE pins (
        id BIGINT PRIMARY KEY DEFAULT nextval('pin_seq'),
        label VARCHAR,
        text VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL
    )""",
    # Who drains the bus right now: serializes processing across processes.
    """CREATE TABLE brain_lease (
        name VARCHAR PRIMARY KEY,
        holder VARCHAR NOT NULL,
        host VARCHAR NOT NULL,
        pid INTEGER NOT NULL,
        heartbeat_at TIMESTAMP NOT NULL
    )""",
]

V2 = [
    # Facts: hot memory lives here; cold facts keep their row (provenance, audit) but are only
    # searched through LanceDB. Nothing is ever deleted: status moves to superseded or forgotten.
    "CREATE SEQUENCE fact_seq START 1",
    """CREATE TABLE facts (
        id BIGINT PRIMARY KEY DEFAULT nextval('fact_seq'),
        text VARCHAR NOT NULL,
        norm_hash VARCHAR NOT NULL,
        category VARCHAR NOT NULL,
        importance DOUBLE NOT NULL,
        tier VARCHAR NOT NULL DEFAULT 'hot',
        status VARCHAR NOT NULL DEFAULT 'active',
        superseded_by BIGINT,
        sources BIGINT[] NOT NULL,
        channels VARCHAR[] NOT NULL,
        origin VARCHAR NOT NULL,
        stated_at TIMESTAMP NOT NULL,
        created_at TIMESTAMP NOT NULL,
        updated_at TIMESTAMP NOT NULL,
        last_accessed_at TIMESTAMP,
        hit_count INTEGER NOT NULL DEFAULT 0,
        decay DOUBLE NOT NULL DEFAULT 1.0,
        indexed_at TIMESTAMP
    )""",
    "CREATE SEQUENCE fact_event_seq START 1",
    """CREATE TABLE fact_events (
        id BIGINT PRIMARY KEY DEFAULT nextval('fact_event_seq'),
        fact_id BIGINT NOT NULL,
        happened_at TIMESTAMP NOT NULL,
        action VARCHAR NOT NULL,
        detail JSON
    )""",
    """CREATE TABLE cursors (
        name VARCHAR PRIMARY KEY,
        value BIGINT NOT NULL,
        updated_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE topic_summaries (
        topic VARCHAR PRIMARY KEY,
        channel VARCHAR NOT NULL,
        summary VARCHAR NOT NULL,
        sources BIGINT[] NOT NULL,
        updated_at TIMESTAMP NOT NULL
    )""",
    "ALTER TABLE pending_ops ADD COLUMN archived_at TIMESTAMP",
]

V3 = [
    # Conversation intelligence (seed 003), rewritten whole by their assets.
    """CREATE TABLE threads (
        id VARCHAR PRIMARY KEY,
        title VARCHAR NOT NULL,
        status VARCHAR NOT NULL,
        priority VARCHAR NOT NULL,
        summary VARCHAR NOT NULL,
        decisions JSON NOT NULL,
        waiting_for VARCHAR,
        mood VARCHAR NOT NULL,
        last_activity TIMESTAMP NOT NULL,
        created TIMESTAMP NOT NULL,
        closed_at TIMESTAMP,
        sources BIGINT[] NOT NULL
    )""",
    """CREATE TABLE decisions (
        id VARCHAR PRIMARY KEY,
        what VARCHAR NOT NULL,
        why VARCHAR NOT NULL,
        impact VARCHAR NOT NULL,
        who VARCHAR,
        decided_at TIMESTAMP NOT NULL,
        source BIGINT NOT NULL,
        channel VARCHAR NOT NULL
    )""",
    # One row per published file: what it was built from, and the warmup state (seed 004).
    """CREATE TABLE published (
        name VARCHAR PRIMARY KEY,
        path VARCHAR NOT NULL,
        input_key VARCHAR,
        sha256 VARCHAR,
        chars INTEGER,
        words INTEGER,
        generated_at TIMESTAMP,
        verified_at TIMESTAMP,
        state VARCHAR NOT NULL DEFAULT 'cold',
        error VARCHAR,
        cold_dispatches INTEGER NOT NULL DEFAULT 0
    )""",
]

V4 = [
    # User-created schedules (seed 001). One-shot reminders have run_at; recurring ones a cron
    # expression read in their own timezone. next_fire_at is UTC; NULL once nothing is left to fire.
    """CREATE TABLE schedules (
        id VARCHAR PRIMARY KEY,
        description VARCHAR NOT NULL,
        cron VARCHAR,
        run_at TIMESTAMP,
        timezone VARCHAR NOT NULL,
        action VARCHAR NOT NULL,
        target_channel VARCHAR NOT NULL,
        topic VARCHAR,
        created_at TIMESTAMP NOT NULL,
        created_by BIGINT,
        next_fire_at TIMESTAMP,
        last_fired_at TIMESTAMP,
        fired_count INTEGER NOT NULL DEFAULT 0,
        late_count INTEGER NOT NULL DEFAULT 0,
        state VARCHAR NOT NULL DEFAULT 'active',
        ended_at TIMESTAMP
    )""",
    # What supervision found and did (seed 004): stuck messages, overdue ops, hung runs.
    "CREATE SEQUENCE finding_seq START 1",
    """CREATE TABLE supervision_findings (
        id BIGINT PRIMARY KEY DEFAULT nextval('finding_seq'),
        found_at TIMESTAMP NOT NULL,
        kind VARCHAR NOT NULL,
        subject VARCHAR NOT NULL,
        action VARCHAR NOT NULL,
        detail VARCHAR
    )""",
]

V5 = [
    # Write-through indexing: a user turn's vectors are stored with the turn, in the transaction
    # that records it, so the next message finds it by meaning in any process; episodic indexing
    # later moves them into LanceDB without embedding the turn again. `model` names the embedder,
    # so a model change re-embeds instead of mixing vector spaces.
    """CREATE TABLE turn_vectors (
        session_id BIGINT PRIMARY KEY,
        model VARCHAR NOT NULL,
        vector FLOAT[] NOT NULL,
        sentence_vectors FLOAT[][] NOT NULL
    )""",
]

V6 = [
    # Knowledge updates: a later owner statement that announces a change ("I moved to Porto") and
    # is about what an earlier one said ("I live in Lisbon") supersedes it. The link is between
    # turns, so it holds before any fact is extracted; recall puts the newer statement first and
    # keeps the older one as history.
    """CREATE TABLE statement_updates (
        old_session_id BIGINT PRIMARY KEY,
        new_session_id BIGINT NOT NULL,
        cosine DOUBLE,  -- NULL when the extraction model named the update
        detected_at TIMESTAMP NOT NULL
    )""",
    # A fact is true from valid_from until valid_to (NULL: still true). A fact whose statement was
    # updated keeps its row and status, so history stays queryable, but leaves the floor and bulletin.
    "ALTER TABLE facts ADD COLUMN valid_from TIMESTAMP",
    "ALTER TABLE facts ADD COLUMN valid_to TIMESTAMP",
    "UPDATE facts SET valid_from = stated_at",
]

V7 = [
    # `cortex erase`: that an erasure happened, never what was erased. Ids, counts per store and one
    # SHA-256 over the erased texts (to confirm a given text was covered, if ever asked). finished_at
    # stays NULL until every store is clean (the database file rewritten included).
    "CREATE SEQUENCE erasure_seq START 1",
    """CREATE TABLE erasures (
        id BIGINT PRIMARY KEY DEFAULT nextval('erasure_seq'),
        erased_at TIMESTAMP NOT NULL,
        selector VARCHAR NOT NULL,
        bus_ids BIGINT[] NOT NULL,
        session_ids BIGINT[] NOT NULL,
        counts JSON NOT NULL,
        texts_sha256 VARCHAR NOT NULL,
        finished_at TIMESTAMP
    )""",
]

V8 = [
    # One importance scale, extraction's: 1 routine, 2 useful, 3 critical. Facts saved by hand (0.7 by
    # default) and observations were written on 0-1, so they sorted below every extracted fact: below
    # 0.5 becomes 1, below 0.8 becomes 2, the rest of 0-1 becomes 3. An exact 1.0 stays: a hand save
    # rated at the top of 0-1 cannot be told from a fact that extraction reinforced to 1. LanceDB's
    # copy of the importance is refreshed by the next sync.
    "UPDATE facts SET indexed_at = NULL, "
    "importance = CASE WHEN importance < 0.5 THEN 1 WHEN importance < 0.8 THEN 2 ELSE 3 END "
    "WHERE importance < 1",
    # A fact may belong to several categories (seed 002); `category` stays the primary one, categories[1].
    "ALTER TABLE facts ADD COLUMN categories VARCHAR[]",
    "UPDATE facts SET categories = [category]",
]

V9 = [
    # Leased delivery (`cortex serve`'s /outbox/poll and /outbox/ack): a connector leases a reply
    # until lease_expires_at; one not acknowledged by then comes back with attempts + 1, and after
    # CORTEX_OUTBOX_MAX_ATTEMPTS leases it is dead-lettered with the reason in `error`. delivered_at
    # (from V1) is the acknowledgement.
    "ALTER TABLE outbox ADD COLUMN attempts INTEGER DEFAULT 0",
    "UPDATE outbox SET attempts = 0",
    "ALTER TABLE outbox ADD COLUMN lease_expires_at TIMESTAMP",
    "ALTER TABLE outbox ADD COLUMN dead_lettered_at TIMESTAMP",
    "ALTER TABLE outbox ADD COLUMN error VARCHAR",
    # Who a reply goes to: the chat (metadata.chat_id, else the sender), thread and message replied
    # to, of the message it answers. Replies already waiting get theirs from their bus row.
    "ALTER TABLE outbox ADD COLUMN recipient JSON",
    """UPDATE outbox SET recipient = json_object(
        'chat_id', coalesce(b.metadata->>'chat_id', b.sender), 'thread', b.thread,
        'message_id', coalesce(b.metadata->>'message_id', b.external_id))
    FROM bus b WHERE b.id = outbox.bus_id AND b.channel = outbox.channel""",
]

V10 = [
    # Conversations (seed 001's chatId:threadId): a turn names its conversation, `channel[:chat[:thread]]`
    # (storage/conversations.py, whose key this spells out as it was at V10). Turns already there get
    # the key of the message they record or answer on its channel; the rest (an admin note, a reply
    # sent to another channel) stay NULL, read as the channel's own conversation.
    "ALTER TABLE session ADD COLUMN conversation VARCHAR",
    """UPDATE session SET conversation = k.conversation FROM (
        SELECT id, channel, channel || CASE WHEN chat IS NULL AND topic IS NULL THEN ''
            ELSE ':' || coalesce(chat, '') || coalesce(':' || topic, '') END AS conversation
        FROM (SELECT id, channel,
                replace(replace(nullif(metadata->>'chat_id', ''), '%', '%25'), ':', '%3A') AS chat,
                replace(replace(nullif(thread, ''), '%', '%25'), ':', '%3A') AS topic
              FROM bus)
    ) k WHERE k.id = session.bus_id AND k.channel = session.channel""",
    # Layer, unread count and summary per conversation instead of per channel. Each channel's row
    # carries over as is (its summary was the channel's, all chats together); every other
    # conversation its turns name starts with the channel's layer and no summary of its own.
    """CREATE TABLE conversations (
        conversation VARCHAR PRIMARY KEY,
        channel VARCHAR NOT NULL,
        last_message_at TIMESTAMP,
        unread_count INTEGER NOT NULL DEFAULT 0,
        summary VARCHAR,
        layer VARCHAR NOT NULL DEFAULT 'foreground'
    )""",
    """INSERT INTO conversations (conversation, channel, last_message_at, unread_count, summary, layer)
    SELECT channel, channel, last_message_at, unread_count, summary, layer FROM channel_states""",
    """INSERT INTO conversations (conversation, channel, last_message_at, unread_count, summary, layer)
    SELECT s.conversation, any_value(s.channel), max(s.ts), 0, NULL,
        coalesce(any_value(c.layer), 'foreground')
    FROM session s LEFT JOIN channel_states c ON c.channel = s.channel
    WHERE s.role = 'user' AND s.conversation IS NOT NULL
      AND s.conversation NOT IN (SELECT channel FROM channel_states)
    GROUP BY s.conversation""",
    "DROP TABLE channel_states",
]

V11 = [
    # Prompt caching: what each call wrote to and read from the API's prompt cache (input_tokens
    # counts the rest, as the API reports it).
    "ALTER TABLE llm_usage ADD COLUMN cache_creation_input_tokens INTEGER DEFAULT 0",
    "ALTER TABLE llm_usage ADD COLUMN cache_read_input_tokens INTEGER DEFAULT 0",
    "UPDATE llm_usage SET cache_creation_input_tokens = 0, cache_read_input_tokens = 0",
]

V12 = [
    # A forgotten fact hides, besides the exchanges it came from, the exchanges elsewhere whose reply
    # cited or quoted them or the fact (decided when it is forgotten, so reads stay cheap): their
    # turns' ids. NULL while the fact is active, and for facts forgotten before this version.
    "ALTER TABLE facts ADD COLUMN quoted_in BIGINT[]",
    # An erasure's audit row kept a SHA-256 of the erased texts: a short one (a 4-digit PIN among
    # the replies' words) was found again by hashing every candidate. Ids and counts stay.
    "ALTER TABLE erasures DROP COLUMN texts_sha256",
]

V13 = [
    # A message that produced no fact can be forgotten too (soft, until unforget): the turn, with
    # the exchanges whose reply quoted it, as a forgotten fact's.
    """CREATE TABLE forgotten_turns (
        session_id BIGINT PRIMARY KEY,
        quoted_in BIGINT[] NOT NULL,
        reason VARCHAR NOT NULL,
        forgotten_at TIMESTAMP NOT NULL
    )""",
]

V14 = [
    # What an erasure removed stays out: the (channel, external id) of each erased message whose id
    # its sender gave (an export's "wa-1", a Telegram message id), so that importing the same export
    # again does not bring it back. Not the content hashes that stand in for missing ids: a short
    # text is found again by hashing every candidate.
    """CREATE TABLE erased_ids (
        channel VARCHAR NOT NULL,
        external_id VARCHAR NOT NULL,
        erased_at TIMESTAMP NOT NULL,
        PRIMARY KEY (channel, external_id)
    )""",
]

V15 = [
    # The Dagster run whose brain made a reply (NULL: made outside a run, or before V15), so that
    # `cortex run` prints the replies it made, not those another process made meanwhile.
    "ALTER TABLE outbox ADD COLUMN run_id VARCHAR",
]

MIGRATIONS: list[tuple[int, list[str]]] = [
    (1, V1),
    (2, V2),
    (3, V3),
    (4, V4),
    (5, V5),
    (6, V6),
    (7, V7),
    (8, V8),
    (9, V9),
    (10, V10),
    (11, V11),
    (12, V12),
    (13, V13),
    (14, V14),
    (15, V15),
]
