"""Erasure in DuckDB (`cortex erase`): the messages a selector names, everything derived from them,
and the one transaction that deletes it all and records that it happened, never what it was.

A message is erased as an exchange: its bus row, its turn and the agent's reply to it (a reply quotes
what it answers). What is derived goes too: an exchange elsewhere whose reply cites (`msg N`) or
quotes an erased turn or fact, facts drawn only from erased turns or whose text holds erased text
(or the --matching text), the firings of schedules an erased
message created, and so on until nothing more is pulled in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from cortex_pipelines.storage import updates
from cortex_pipelines.storage.bus import CONTENT_ID_PREFIX
from cortex_pipelines.storage.conversations import OF_BUS, OF_TURN
from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.rows import dict_rows
from cortex_pipelines.text import first_words

# A reply, pin or fact quotes an erased text of QUOTE_CHARS or more when it holds it, case and spacing
# aside, or holds its first words (`text.first_words`): copies are cut short (a delegated task's reply
# names its first words within 80 characters, its harvested fact the first 120). Less would take a
# fact that restates one clause another source also says ("I prefer window seats"), which keeps its text.
QUOTE_CHARS = 20
_FOLDED = r"regexp_replace(lower({}), '\s+', ' ', 'g')"  # as _fold, in SQL
ERASED = "[erased]"


@dataclass(frozen=True)
class Selector:
    """What to erase: explicit ids (bus ids, or session turn ids as recall shows them), or filters
    that must all hold (a case-insensitive substring of the message or of its reply, the sender,
    sent before a time)."""

    bus_ids: tuple[int, ...] = ()
    session_ids: tuple[int, ...] = ()
    matching: str | None = None
    sender: tuple[str, str] | None = None  # (channel, sender id)
    before: datetime | None = None  # naive UTC

    def kinds(self) -> str:
        """The selector's kinds for the audit row: never its values, which may be the erased text."""
        named = {
            "message": self.bus_ids,
            "turn": self.session_ids,
            "matching": self.matching,
            "sender": self.sender,
            "before": self.before,
        }
        return ",".join(kind for kind, value in named.items() if value)


@dataclass
class Plan:
    bus_ids: list[int]
    session_ids: list[int]
    texts: list[str]  # what the erased messages and turns said
    derived: list[str]  # what the facts, threads, decisions, summaries... that go with them said
    facts: list[int]  # drawn only from erased turns, or whose text holds erased text: deleted
    trimmed: list[int]  # with other sources too: they keep those, and their text
    ids: dict[str, list]  # threads, decisions, pending_ops, schedules, pins, conversations to clear
    outbox: list[tuple[int, str]]  # (outbox id, channel): the reply files to delete
    external_ids: list[tuple[str, str]]  # (channel, external id): to find archived inbox copies
    needle: str | None = None  # the --matching text
    counts: dict[str, int] = field(default_factory=dict)
    # Turn retention: only the verbatim turns go; facts, update links and the rest of derived memory
    # stay, citing them by id (erased-source ids).
    keeps_derived: bool = False


def unknown_ids(con, bus_ids: list[int], session_ids: list[int]) -> list[str]:
    """The explicit ids that name nothing, as the user gave them ("message 7", "turn 12")."""
    bus = _set(con, "SELECT id FROM bus WHERE list_contains(?::BIGINT[], id)", [bus_ids])
    turns = _set(con, "SELECT id FROM session WHERE list_contains(?::BIGINT[], id)", [session_ids])
    return [f"message {i}" for i in bus_ids if i not in bus] + [
        f"turn {i}" for i in session_ids if i not in turns
    ]


# A bus message's turn is the one that records it (its reply's follows): the "msg N" replies cite.
_LISTING = """
    SELECT id, (SELECT min(s.id) FROM session s WHERE s.bus_id = bus.id) AS turn, channel, sender, text,
        sent_at AS said_at
    FROM bus WHERE {bus}
    UNION ALL
    SELECT NULL::BIGINT, id, channel, sender, content, ts FROM session WHERE bus_id IS NULL AND {notes}
    ORDER BY said_at, id, turn
"""
_BY_ID = _LISTING.format(
    bus="list_contains($bus::BIGINT[], id) "
    "OR id IN (SELECT bus_id FROM session WHERE list_contains($turns::BIGINT[], id))",
    notes="list_contains($turns::BIGINT[], id)",
)
_FILTERS = (
    "($channel IS NULL OR (channel = $channel AND sender = $sender)) AND ($before IS NULL OR {at} < $before)"
)
_BY_FILTER = _LISTING.format(
    bus=_FILTERS.format(at="sent_at") + " AND ($needle IS NULL OR contains(lower(text), $needle) "
    "OR EXISTS (SELECT 1 FROM session s WHERE s.bus_id = bus.id AND contains(lower(s.content), $needle)))",
    notes=_FILTERS.format(at="ts") + " AND ($needle IS NULL OR contains(lower(content), $needle))",
)


def matching(con, sel: Selector) -> list[dict]:
    """The messages a selector names, oldest first: bus messages (`id`) and turns said outside the
    bus such as an admin `/save` (`turn`), each with channel, sender, text and time."""
    if sel.bus_ids or sel.session_ids:
        return dict_rows(con.execute(_BY_ID, {"bus": list(sel.bus_ids), "turns": list(sel.session_ids)}))
    channel, sender = sel.sender or (None, None)
    params = {
        "needle": sel.matching.lower() if sel.matching else None,
        "channel": channel,
        "sender": sender,
        "before": sel.before,
    }
    return dict_rows(con.execute(_BY_FILTER, params))


def _set(con, sql: str, params) -> set:
    return {r[0] for r in con.execute(sql, params).fetchall()}


def plan(con, bus_ids: list[int], note_ids: list[int], needle: str | None = None) -> Plan:
    """Everything that goes with these messages (bus ids) and turns said outside the bus, read in
    the caller's transaction. `needle` (the --matching text) also names the pins and facts that hold
    it."""
    bus, notes = set(bus_ids), set(note_ids)
    while True:  # each round adds a message, so it ends
        turns = (
            _set(con, "SELECT id FROM session WHERE list_contains(?::BIGINT[], bus_id)", [sorted(bus)])
            | notes
        )
        said = _said(con, sorted(bus), sorted(turns))
        facts = _facts(con, sorted(turns), quotes(said), needle)
        quoted = quotes(said + list(facts.values()))
        grown = bus | _firings(con, sorted(bus)) | quoting_replies(con, sorted(turns), quoted)
        if grown == bus:
            break
        bus = grown
    p = {"bus": sorted(bus), "turns": sorted(turns)}
    # The conversations the erased messages were said in, and their channels' own: before
    # conversations (V10) a channel's summary covered all its chats.
    p["conversations"] = sorted(
        _set(
            con,
            f"SELECT {OF_BUS} FROM bus WHERE list_contains($bus::BIGINT[], id) UNION "
            f"SELECT {OF_TURN} FROM session WHERE list_contains($turns::BIGINT[], id) UNION "
            "SELECT channel FROM bus WHERE list_contains($bus::BIGINT[], id) UNION "
            "SELECT channel FROM session WHERE list_contains($turns::BIGINT[], id)",
            p,
        )
    )
    p["pins"] = sorted(set(quoted) | ({_fold(needle)} if needle else set()))
    texts = [
        r[0]
        for r in con.execute(
            "SELECT text FROM bus WHERE list_contains($bus::BIGINT[], id) UNION ALL "
            "SELECT content FROM session WHERE list_contains($turns::BIGINT[], id)",
            {k: p[k] for k in ("bus", "turns")},
        ).fetchall()
    ]
    ids: dict[str, list] = {}
    derived = list(facts.values())
    for name, sql, args in _DERIVED:
        rows = con.execute(sql, [p[a] for a in args]).fetchall()
        ids[name] = sorted(r[0] for r in rows)
        derived += [str(v) for r in rows for v in r[1:] if v]
    ids["conversations"] = p["conversations"]
    trimmed = _set(
        con,
        "SELECT id FROM facts "
        "WHERE list_has_any(sources, $t::BIGINT[]) AND NOT list_has_all($t::BIGINT[], sources)",
        {"t": p["turns"]},
    ) - set(facts)
    outbox = con.execute(
        "SELECT id, channel FROM outbox WHERE list_contains(?::BIGINT[], bus_id) ORDER BY id", [p["bus"]]
    ).fetchall()
    external = con.execute(
        "SELECT channel, external_id FROM bus WHERE list_contains(?::BIGINT[], id)", [p["bus"]]
    ).fetchall()
    return Plan(
        p["bus"],
        p["turns"],
        texts,
        derived,
        sorted(facts),
        sorted(trimmed),
        ids,
        [tuple(r) for r in outbox],
        [tuple(r) for r in external],
        needle,
    )


def expiry_plan(con, cutoff: datetime) -> Plan:
    """Turn retention (seed 001's turn TTL): the messages sent before `cutoff` that are settled
    (answered, failed or skipped), their turns and the turns said outside the bus before it, with
    their vectors and outbox rows. What was learnt from them stays."""
    bus = sorted(
        _set(
            con,
            "SELECT id FROM bus WHERE sent_at < ? AND state IN ('completed', 'failed', 'skipped')",
            [cutoff],
        )
    )
    turns = sorted(
        _set(
            con,
            "SELECT id FROM session WHERE list_contains(?::BIGINT[], bus_id) OR (bus_id IS NULL AND ts < ?)",
            [bus, cutoff],
        )
    )
    texts = [
        r[0]
        for r in con.execute(
            "SELECT text FROM bus WHERE list_contains(?::BIGINT[], id) UNION ALL "
            "SELECT content FROM session WHERE list_contains(?::BIGINT[], id)",
            [bus, turns],
        ).fetchall()
    ]
    outbox = con.execute(
        "SELECT id, channel FROM outbox WHERE list_contains(?::BIGINT[], bus_id) ORDER BY id", [bus]
    ).fetchall()
    external = con.execute(
        "SELECT channel, external_id FROM bus WHERE list_contains(?::BIGINT[], id)", [bus]
    ).fetchall()
    kept = {name: [] for name, _, _ in _DERIVED} | {"conversations": []}
    return Plan(
        bus,
        turns,
        texts,
        [],
        [],
        [],
        kept,
        [tuple(r) for r in outbox],
        [tuple(r) for r in external],
        keeps_derived=True,
    )


def _said(con, bus: list[int], turns: list[int]) -> list[str]:
    """What the erased messages said: bus texts and the user's turns."""
    rows = con.execute(
        "SELECT text FROM bus WHERE list_contains(?::BIGINT[], id) UNION "
        "SELECT content FROM session WHERE list_contains(?::BIGINT[], id) AND role = 'user'",
        [bus, turns],
    ).fetchall()
    return [r[0] for r in rows]


def _fold(text: str) -> str:
    return " ".join(text.lower().split())


def quotes(texts: list[str]) -> list[str]:
    """What holding is quoting an erased text: the starts of those long enough, folded."""
    return sorted({first_words(t) for t in map(_fold, texts) if len(t) >= QUOTE_CHARS})


def _facts(con, turns: list[int], quoted: list[str], needle: str | None) -> dict[int, str]:
    """The facts that go, with their texts: drawn only from erased turns, or holding the --matching
    text, or drawn from an erased turn among others and quoting an erased message (a harvested fact
    quotes both the request and the result: keeping it because one of them is left would keep the
    erased one's words). A fact of the owner's own words is not drawn from an erased stranger's
    message that said the same: it stays."""
    return dict(
        con.execute(
            f"""
            SELECT id, text FROM facts
            WHERE (len(sources) > 0 AND list_has_all($turns::BIGINT[], sources))
               OR contains(lower(text), $needle)
               OR (list_has_any(sources, $turns::BIGINT[]) AND len(list_filter($quotes::VARCHAR[],
                       lambda q: contains({_FOLDED.format("text")}, q))) > 0)
            """,
            {"turns": turns, "needle": needle.lower() if needle else None, "quotes": quoted},
        ).fetchall()
    )


def listed_facts(con, fact_ids: list[int]) -> list[dict]:
    """The facts an erasure deletes, as listed to the user: id and text."""
    return dict_rows(
        con.execute("SELECT id, text FROM facts WHERE list_contains(?::BIGINT[], id) ORDER BY id", [fact_ids])
    )


def listed_pins(con, pin_ids: list[int]) -> list[dict]:
    """The pins an erasure deletes, as listed to the user: their position (as `cortex pins` numbers
    them) and text."""
    return dict_rows(
        con.execute(
            "SELECT position, text FROM (SELECT id, text, row_number() OVER (ORDER BY id) AS position "
            "FROM pins) WHERE list_contains(?::BIGINT[], id) ORDER BY position",
            [pin_ids],
        )
    )


def _firings(con, bus: list[int]) -> set[int]:
    """Messages fired by schedules that erased messages created: they carry the schedule's words."""
    return _set(
        con,
        "SELECT b.id FROM bus b JOIN schedules j ON b.source = 'schedule:' || j.id "
        "WHERE list_contains(?::BIGINT[], j.created_by)",
        [bus],
    )


def quoting_replies(con, turns: list[int], quotes: list[str]) -> set[int]:
    """Messages whose reply cites an erased turn (`msg N`) or quotes an erased text or fact that
    the message itself does not say: a reply repeating its own question's words quotes the owner,
    who may have said what an erased stranger said."""
    return _set(
        con,
        f"""
        SELECT r.bus_id FROM session r LEFT JOIN session m ON m.bus_id = r.bus_id AND m.role = 'user'
        WHERE r.role = 'assistant' AND r.bus_id IS NOT NULL AND NOT list_contains($turns::BIGINT[], r.id)
          AND (list_has_any($turns::BIGINT[],
                   list_transform(regexp_extract_all(r.content, 'msg ([0-9]+)', 1), lambda x: x::BIGINT))
               OR len(list_filter($quotes::VARCHAR[],
                      lambda q: contains({_FOLDED.format("r.content")}, q)
                                AND NOT contains(coalesce({_FOLDED.format("m.content")}, ''), q))) > 0)
        """,
        {"turns": turns, "quotes": quotes},
    )


# The other rows that go, each query reading the plan's lists named after it: the row's key first,
# then the texts it carried (to find their copies in previews and logs).
_DERIVED = [
    (
        "threads",
        "SELECT id, title, summary, waiting_for FROM threads WHERE list_has_any(sources, ?::BIGINT[])",
        ["turns"],
    ),
    ("decisions", "SELECT id, what, why FROM decisions WHERE list_contains(?::BIGINT[], source)", ["turns"]),
    (
        "summaries",
        "SELECT topic, summary FROM topic_summaries "
        "WHERE list_contains(?::VARCHAR[], topic) OR list_has_any(sources, ?::BIGINT[])",
        ["conversations", "turns"],
    ),
    (
        "conversation_summaries",
        "SELECT conversation, summary FROM conversations "
        "WHERE list_contains(?::VARCHAR[], conversation) AND summary IS NOT NULL",
        ["conversations"],
    ),
    (
        "pending_ops",
        "SELECT id, description, result FROM pending_ops WHERE list_contains(?::BIGINT[], bus_id)",
        ["bus"],
    ),
    (
        "schedules",
        "SELECT id, description, action FROM schedules WHERE list_contains(?::BIGINT[], created_by)",
        ["bus"],
    ),
    (
        "pins",
        "SELECT id, text FROM pins "
        f"WHERE len(list_filter(?::VARCHAR[], lambda q: contains({_FOLDED.format('text')}, q))) > 0",
        ["pins"],
    ),
]

# What `delete` runs, in order, with the plan's lists each statement reads.
_DELETES = [
    ("turn_vectors", "DELETE FROM turn_vectors WHERE list_contains($turns::BIGINT[], session_id)"),
    ("forgotten_turns", "DELETE FROM forgotten_turns WHERE list_contains($turns::BIGINT[], session_id)"),
    ("fact_events", "DELETE FROM fact_events WHERE list_contains($facts::BIGINT[], fact_id)"),
    ("facts", "DELETE FROM facts WHERE list_contains($facts::BIGINT[], id)"),
    (
        "facts_trimmed",
        "UPDATE facts SET sources = list_filter(sources, lambda s: NOT list_contains($turns::BIGINT[], s)) "
        "WHERE list_has_any(sources, $turns::BIGINT[])",
    ),
    ("threads", "DELETE FROM threads WHERE list_contains($threads::VARCHAR[], id)"),
    ("decisions", "DELETE FROM decisions WHERE list_contains($decisions::VARCHAR[], id)"),
    ("summaries", "DELETE FROM topic_summaries WHERE list_contains($summaries::VARCHAR[], topic)"),
    (
        "conversation_summaries",
        "UPDATE conversations SET summary = NULL "
        "WHERE list_contains($conversation_summaries::VARCHAR[], conversation)",
    ),
    (
        "statement_updates",
        "DELETE FROM statement_updates WHERE list_contains($turns::BIGINT[], old_session_id) "
        "OR list_contains($turns::BIGINT[], new_session_id)",
    ),
    ("pending_ops", "DELETE FROM pending_ops WHERE list_contains($pending_ops::VARCHAR[], id)"),
    # An op another message asked for keeps its row; the result an erased router message gave it goes.
    (
        "pending_op_results",
        f"UPDATE pending_ops SET result = '{ERASED}' WHERE result IN "
        "(SELECT text FROM bus WHERE channel = 'router' AND list_contains($bus::BIGINT[], id))",
    ),
    ("schedules", "DELETE FROM schedules WHERE list_contains($schedules::VARCHAR[], id)"),
    ("pins", "DELETE FROM pins WHERE list_contains($pins::BIGINT[], id)"),
    ("outbox", "DELETE FROM outbox WHERE list_contains($bus::BIGINT[], bus_id)"),
    ("session", "DELETE FROM session WHERE list_contains($turns::BIGINT[], id)"),
    ("bus", "DELETE FROM bus WHERE list_contains($bus::BIGINT[], id)"),
]


# What turn retention keeps although it names the turns: a fact's sources and the update links
# stay as erased-source ids, and a forgotten message's row, which still hides the replies quoting it.
_DERIVED_OF_TURNS = frozenset({"facts_trimmed", "statement_updates", "forgotten_turns"})


def delete(con, plan: Plan, selector: str) -> int:
    """Delete the plan's rows from every table in the caller's transaction and record the erasure
    (ids and counts: no hash of the texts either, as a short one, a PIN, is found again by trying
    them all); fills plan.counts and returns the erasure's id."""
    lists = {"bus": plan.bus_ids, "turns": plan.session_ids, "facts": plan.facts, **plan.ids}
    citing = [] if plan.keeps_derived else updates.current_facts_citing(con, plan.session_ids)
    for name, sql in _DELETES:
        if plan.keeps_derived and name in _DERIVED_OF_TURNS:
            continue
        used = {k: v for k, v in lists.items() if f"${k}:" in sql}
        plan.counts[name] = int(con.execute(sql, used).fetchone()[0])
    if not plan.keeps_derived:
        # facts whose update was erased
        plan.counts["facts_current_again"] = len(updates.reopen_facts(con, plan.session_ids))
        # facts whose one source not updated was erased ("I live in Lisbon" said again)
        plan.counts["facts_closed_again"] = len(updates.close_if_every_source_updated(con, citing))
    _keep_out(con, plan.external_ids)
    return con.execute(
        "INSERT INTO erasures (erased_at, selector, bus_ids, session_ids, counts) VALUES (?, ?, ?, ?, ?) "
        "RETURNING id",
        [utcnow(), selector, plan.bus_ids, plan.session_ids, json.dumps(plan.counts)],
    ).fetchone()[0]


def _keep_out(con, external_ids: list[tuple[str, str]]) -> None:
    """The erased messages' own ids, so the bus refuses them again (`bus.enqueue_rows`): importing
    the same export had brought an erased PIN back. Content hashes (`sha256:`) are left out."""
    given = [(channel, ext) for channel, ext in external_ids if not ext.startswith(CONTENT_ID_PREFIX)]
    if given:
        con.executemany(
            "INSERT INTO erased_ids VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            [(channel, ext, utcnow()) for channel, ext in given],
        )


def unfinished(con) -> list[dict]:
    """Erasures whose derived stores or database file are not clean yet (interrupted, or the file
    was busy), oldest first."""
    return dict_rows(
        con.execute("SELECT id, session_ids, counts FROM erasures WHERE finished_at IS NULL ORDER BY id")
    )


def finish(con, erasure_id: int, counts: dict) -> None:
    """The database file was rewritten after this erasure: it, and any left unfinished before it,
    are done."""
    con.execute("UPDATE erasures SET counts = ? WHERE id = ?", [json.dumps(counts), erasure_id])
    con.execute(
        "UPDATE erasures SET finished_at = ? WHERE finished_at IS NULL AND id <= ?", [utcnow(), erasure_id]
    )


def fact_sources(con, fact_ids: list[int]) -> list[tuple[int, list[int]]]:
    return con.execute(
        "SELECT id, sources FROM facts WHERE list_contains(?::BIGINT[], id) ORDER BY id", [fact_ids]
    ).fetchall()


def recorded(con, erasure_id: int) -> dict | None:
    rows = dict_rows(
        con.execute(
            "SELECT id, erased_at, selector, bus_ids, session_ids, counts, finished_at "
            "FROM erasures WHERE id = ?",
            [erasure_id],
        )
    )
    return rows[0] if rows else None
