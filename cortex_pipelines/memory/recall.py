"""memory_query: hybrid retrieval over hot facts, cold facts and episodic messages.

For each LanceDB table, searched through its in-memory snapshot, a vector search and a BM25
full-text search are fused with reciprocal rank fusion; the fused score is then weighted by
recency, importance, hit count and decay. Session turns not yet indexed (the tail since the last
episodic run) are read from DuckDB with the vectors the brain stored when it recorded them, and
matched by stemmed keywords and by meaning, so what was said a minute ago is found too.
Every hit carries the session ids it came from. A result of delegated work (the router channel) is
never a memory: another agent wrote it, not the user; one that completed an op reaches memory as
the fact harvesting writes of it (memory/harvest.py), which says what it is and which every output
marks as a delegated result (`Hit.delegated`), not the owner's words. The search only
reads; a caller that shows the hits calls `note_use` (seed 000: a returned hot fact counts a hit, a
cold one is promoted, unless it is a delegated result).
How the signals are weighed is a `RecallConfig` (recall_config.py).
A question that asks for a list shares no word and no meaning with what it asks for: one about a
past day ("what did I tell you yesterday?", memory/dates.py) also ranks the owner's statements of
that day, one about everything known (text.asks_what_is_known) the most important facts and the
owner's newest statements.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cortex_pipelines import clock
from cortex_pipelines.config import ROUTER_CHANNEL, Settings
from cortex_pipelines.memory import tail
from cortex_pipelines.memory.dates import named_times, past_days, said_then, utc_spans, within
from cortex_pipelines.memory.embedder import Embedder, embedder_for
from cortex_pipelines.memory.fusion import (
    Candidate,
    add_ranked,
    feedback_terms,
    fuse,
    stemmed,
    weighted,
    with_neighbours,
    with_session,
)
from cortex_pipelines.memory.patterns import attributes_of
from cortex_pipelines.memory.pipeline import EPISODIC_CURSOR, embedder_id
from cortex_pipelines.memory.recall_config import RecallConfig, preset
from cortex_pipelines.memory.snapshot import Snapshot
from cortex_pipelines.memory.updates import (
    Successor,
    co_recalled_updates,
    newest_successor,
    newest_successors,
)
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, UNNAMED_EMBEDDER, VectorStore, vector_store
from cortex_pipelines.processes import helper_thread
from cortex_pipelines.storage import Database, session, turn_vectors, updates, utcnow
from cortex_pipelines.storage import facts as fact_store
from cortex_pipelines.storage.health import REPAIR_VECTORS, one_line
from cortex_pipelines.text import (
    QUESTION,
    asks_what_is_known,
    collapse_spaces,
    never_an_answer,
    normalize,
    split_sentences,
)

log = logging.getLogger(__name__)
_unreadable_warned: set[str] = set()
_other_model_warned: set[tuple[str, str]] = set()


@dataclass
class Hit:
    text: str
    score: float
    tier: str  # hot | cold | episodic
    sources: list[int]
    channel: str | None = None
    at: datetime | None = None
    fact_id: int | None = None
    category: str | None = None
    sender: str | None = None  # who said an episodic turn (a fact is the owner's, unless delegated)
    updated_by: int | None = None  # the session id of the later statement that replaced this one
    origin: str | None = None  # a fact's: how it was written (`OP_HARVEST`: a delegated task's result)

    @property
    def delegated(self) -> bool:
        """A delegated task's result (harvested): another agent's text, never the owner's words."""
        return self.origin == fact_store.OP_HARVEST

    def said_on(self, zone: tzinfo) -> date | None:
        """The day it was said in the owner's timezone (`at` is naive UTC, as stored): the day a
        model reads beside "Now" in that timezone, and the one "yesterday" counts from."""
        return self.at.replace(tzinfo=UTC).astimezone(zone).date() if self.at else None

    def as_dict(self, zone: tzinfo = UTC) -> dict:
        said_on = self.said_on(zone)
        out = {
            "text": self.text,
            "score": round(self.score, 6),
            "tier": self.tier,
            "sources": self.sources,
            "channel": self.channel,
            "sender": self.sender,
            "date": said_on.isoformat() if said_on else None,
        }
        if self.fact_id is not None:
            out["fact_id"] = self.fact_id
            out["category"] = self.category
            out["origin"] = self.origin
        if self.updated_by is not None:
            out["updated_by"] = self.updated_by
        return out


def _fact_keyword_hits(facts: list[dict], query: str, k: int, config: RecallConfig) -> list[Hit]:
    """Hot facts from DuckDB ranked by keywords, for when the semantic table is unreadable."""
    hits = []
    for i, score, _ in tail.by_keywords(query, [f["text"] for f in facts], k, config.rrf_k):
        f = facts[i]
        channel = (f["channels"] or [None])[0]
        hits.append(
            Hit(
                f["text"],
                score,
                f["tier"],
                list(f["sources"]),
                channel,
                f["stated_at"],
                f["id"],
                f["category"],
                origin=f["origin"],
            )
        )
    return hits


def _vectors_unreadable(name: str, exc: Exception) -> None:
    """A LanceDB table whose files are missing or damaged must not fail the message that asked:
    recall answers from DuckDB's full text instead, and says so once per process and table."""
    if name not in _unreadable_warned:
        _unreadable_warned.add(name)
        log.warning(
            "the LanceDB table %s is unreadable (%s); recall answers from DuckDB full text until `%s`",
            name,
            one_line(exc),
            REPAIR_VECTORS,
        )


def _same_space(table: Snapshot, name: str, model: str) -> bool:
    """Whether a table's vectors are this model's: after `embedding_model` changed, recall answers
    by keywords until the next indexing run re-embeds, and says so once per process and table."""
    made_by = table.embedder or UNNAMED_EMBEDDER
    if not len(table) or made_by == model:
        return True
    if (name, model) not in _other_model_warned:
        _other_model_warned.add((name, model))
        log.warning(
            "recall searches %s memories by keywords only: %s embedded them, not %s; the next "
            "`cortex run` re-embeds them",
            name,
            made_by,
            model,
        )
    return False


def _snapshot(vectors: VectorStore, name: str) -> Snapshot | None:
    try:
        return vectors.snapshot(name)
    except (OSError, RuntimeError, ValueError) as exc:  # lance's errors for a missing fragment, manifest
        _vectors_unreadable(name, exc)
        return None


# A question in the first person singular asks about the owner ("where do I live?", "what's my
# dentist's name?"); "we" and "our" may be a group's.
ABOUT_THE_OWNER = re.compile(r"\b(?:i|i'm|i’m|i've|i’ve|i'd|i’d|i'll|i’ll|me|my|mine|myself)\b", re.I)


def recall_query(text: str) -> str:
    """What to search memory for when a message arrives: the sentences that ask something, when it
    also states things ("I'm off to Berlin next week. What seat should you book?" asks about
    seats), else the whole message."""
    sentences = split_sentences(text)
    asked = [s for s in sentences if QUESTION.search(s)]
    return " ".join(asked) if asked and len(asked) < len(sentences) else text


def recall(
    db: Database,
    settings: Settings,
    query: str,
    k: int = 5,
    exclude_sources: set[int] = frozenset(),
    vectors: VectorStore | None = None,
    query_vector: np.ndarray | None = None,
    config: RecallConfig | None = None,
    owners_only: bool = False,
    asked_at: datetime | None = None,
) -> list[Hit]:
    """The top-k memories for a query, each with its source message ids (`query_vector`: the
    query's embedding when the caller already has it; `config`: the instance's preset unless
    given; `owners_only`: facts and the owner's own turns, no other sender's; `asked_at`: when the
    question was sent, naive UTC, which "yesterday" counts from; now unless given: a message
    answered the morning after it was sent asks about the day before it was sent). Reads only:
    `note_use` counts the hits a caller shows."""
    query = query.strip()
    if not query:
        return []
    config = config or preset(settings.recall_preset)
    vectors = vectors or vector_store(settings.paths.lance)
    embedder = embedder_for(settings)
    # The query is embedded on a helper thread while the snapshots, keyword searches and DuckDB's
    # reads run (onnxruntime and numpy release the GIL): about 2.5 ms of the 5 ms it takes on two
    # cores. Even when memory turns out empty, unless no table was ever indexed: then only the
    # unindexed tail can need it, and a new home (on a new machine, whose first query would make
    # the ONNX export, 7 s) answers at once.
    indexed = vectors.exists(EPISODIC) or vectors.exists(SEMANTIC)
    embedding = (
        helper_thread("cortex-query-embedding").submit(embedder.encode_query, query)
        if query_vector is None and indexed
        else None
    )
    now = utcnow()
    pool = max(25, k * 5)
    facts: dict[int, Candidate] = {}
    episodes: dict[int, Candidate] = {}
    readable_facts, readable_episodes = _snapshot(vectors, SEMANTIC), _snapshot(vectors, EPISODIC)
    fact_table = readable_facts or Snapshot.empty()
    episode_table = readable_episodes or Snapshot.empty()

    def query_vector_now() -> np.ndarray:
        if query_vector is not None:
            return query_vector
        return embedding.result() if embedding is not None else embedder.encode_query(query)

    asked = stemmed(query)
    active = fact_table.where(status="active")
    said = episode_table.where(exclude_sources, role="user") & ~episode_table.where(channel=ROUTER_CHANNEL)
    if owners_only:  # before the searches take their pools, or a busy group chat fills them
        said = said & episode_table.said_by(_owners_among(episode_table.speakers(), settings))
    fact_words = fact_table.text_search(query, pool, active)
    episode_words = episode_table.text_search(query, pool, said)
    recent, recent_vectors, hot, links, closers, forgotten = db.run_unchanged(
        _duckdb_reads,
        str(db.path),
        config.tail_turns,
        embedder_id(embedder),
        readable_episodes is None,
        readable_facts is None,
    )
    qvec = None
    if len(fact_table) or len(episode_table):
        qvec = query_vector_now()
        model = embedder_id(embedder)
        fact_meaning = []
        if _same_space(fact_table, SEMANTIC, model):
            fact_meaning = fact_table.vector_search(qvec, pool, active, config.min_cosine)
        facts = fuse(fact_meaning, fact_words, config, asked)
        episode_meaning = []
        if _same_space(episode_table, EPISODIC, model):
            episode_meaning = episode_table.vector_search(qvec, pool, said, config.min_cosine)
        episodes = fuse(episode_meaning, episode_words, config, asked)
        if terms := feedback_terms(query, episodes, episode_table, config):
            # Scaled by the share of the widened query each turn says, as the first search is: at
            # full weight, turns sharing one feedback word ("food") pushed statements found by
            # meaning out, and only indexed turns get feedback (paraphrase tune: settled 76 -> 79).
            widened = f"{query} {' '.join(terms)}"
            wider = episode_table.text_search(widened, pool, said)
            add_ranked(episodes, wider, config.feedback_weight, config, stemmed(widened))

    everything = asks_what_is_known(query)
    if everything:
        add_ranked(facts, fact_table.most_important(pool, active), config.listing_weight, config)
        newest = _owners_statements(
            db.run_unchanged(session.inbound_newest, pool * 4), exclude_sources, settings
        )
        add_ranked(episodes, newest[:pool], config.listing_weight, config)  # *4: strangers' go
    meta = _fact_signals(db, list(facts))
    exclude_sources = set(exclude_sources) | forgotten  # a forgotten fact's turns are forgotten too
    for turn_id in forgotten.intersection(episodes):
        del episodes[turn_id]
    if qvec is None and recent_vectors:
        qvec = query_vector_now()
    if owners_only:
        exclude_sources |= _strangers_turns(recent, settings)
    episodes |= tail.candidates(recent, recent_vectors, qvec, query, set(exclude_sources), pool, config)
    zone = ZoneInfo(settings.timezone)
    asked = asked_at.replace(tzinfo=UTC) if asked_at else clock.now()
    spans = tuple(utc_spans(past_days(query, asked.astimezone(zone).date()), zone))
    if spans:
        that_day = _owners_statements(
            db.run_unchanged(session.inbound_between, spans, pool), exclude_sources, settings
        )
        add_ranked(episodes, that_day, config.listing_weight, config)
    hits = _fact_keyword_hits(hot, query, pool, config)
    for fact_id, cand in facts.items():
        info = meta.get(fact_id)
        if info is None or info["status"] != "active":
            continue  # LanceDB lags DuckDB: DuckDB is the truth
        row = cand.row
        score = weighted(
            cand.rrf,
            info["stated_at"],
            info["importance"],
            info["hit_count"],
            info["decay"],
            settings.recency_half_life_hours,
            now,
        )
        hits.append(
            Hit(
                row["text"],
                score,
                info["tier"],
                list(row["sources"]),
                row["channel"],
                info["stated_at"],
                fact_id,
                row["category"],
                origin=info["origin"],
            )
        )
    # A question about everything has no topic: a conversation matching as a whole, or a neighbour,
    # says nothing (lifted, the oldest day's statements pushed the newest out of the list).
    lifted = (
        {turn_id: cand.rrf for turn_id, cand in episodes.items()}
        if everything
        else with_session(episodes, with_neighbours(episodes, config), config)
    )
    for turn_id, fused in lifted.items():
        row = episodes[turn_id].row
        if never_an_answer(row["text"]):
            continue  # the user's own questions lift their neighbours but are never an answer
        score = weighted(fused, row["stated_at"], 1.0, 0, 1.0, settings.recency_half_life_hours, now)
        hits.append(
            Hit(
                row["text"],
                score,
                "episodic",
                list(row["sources"]),
                row["channel"],
                row["stated_at"],
                sender=row.get("sender"),
            )
        )
    if times := named_times(query):
        for hit in hits:
            if said_then(hit.at, times):
                hit.score *= config.date_boost
    for hit in hits if spans else ():
        # A day counted from today is the day the asker means: what was said on another day (today's
        # "I bought a bike today", close in meaning to "yesterday") gives way to it.
        hit.score *= config.date_boost if within(hit.at, spans) else 1 / config.date_boost
    if embedding is not None and qvec is None:
        embedding.cancel()  # nothing to compare it with: not embedded, if it has not begun
    hits = _facts_stand_for_their_turns(hits, config)
    successors = newest_successors(links)
    closed_by = {fact_id: newest_successor(Successor(*closer), successors) for fact_id, *closer in closers}
    hits = _current_first(hits, successors, closed_by, set(exclude_sources), meta, config)
    if ABOUT_THE_OWNER.search(query):
        _strangers_behind(hits, settings, config)
    hits.sort(key=lambda h: h.score, reverse=True)
    if qvec is not None:  # a query matched by keywords alone compares nothing by meaning
        _changes_first(hits, query, k, settings, embedder, config)
    if owners_only:
        hits = [h for h in hits if h.fact_id is not None or settings.said_by_owner(h.channel or "", h.sender)]
    if everything:  # what is known now: a statement the user has since updated is history
        hits = [h for h in hits if h.updated_by is None]
    return _one_hit_per_statement(hits, settings)[:k]


def _owners_statements(turns: list[dict], exclude: set[int], settings: Settings) -> list[dict]:
    """The owner's statements among these turns, as episode candidates: what a question about what
    "I" said asks for. Never a stranger's, whoever asks, nor a question (never an answer: ranked
    here, the owner's questions pushed the statements of a list down)."""
    return [
        {**turn, "sources": [turn["id"]], "role": "user", "prev_id": None}
        for turn in turns
        if turn["id"] not in exclude
        and settings.said_by_owner(turn["channel"], turn["sender"])
        and not never_an_answer(turn["text"])
    ]


def _owners_among(
    speakers: list[tuple[str | None, str | None]], settings: Settings
) -> frozenset[tuple[str | None, str | None]]:
    return frozenset(p for p in speakers if settings.said_by_owner(p[0] or "", p[1]))


def _strangers_turns(turns: pa.Table, settings: Settings) -> set[int]:
    """The ids of turns another sender said (or a router result)."""
    said = zip(
        turns.column("id").to_pylist(),
        turns.column("channel").to_pylist(),
        turns.column("sender").to_pylist(),
        strict=True,
    )
    return {i for i, channel, sender in said if not settings.said_by_owner(channel or "", sender)}


def _strangers_behind(hits: list[Hit], settings: Settings, config: RecallConfig) -> None:
    """Another sender's turns weigh less for a question about the owner: their "I" is not the
    owner's."""
    for hit in hits:
        if hit.fact_id is None and not settings.said_by_owner(hit.channel or "", hit.sender):
            hit.score *= config.stranger_weight


def _duckdb_reads(con, file: str, tail_turns: int, model: str, whole_tail: bool, hot_facts: bool) -> tuple:
    """What recall needs from DuckDB before it searches, in one short transaction; the same for
    every query until some process writes the file, so `run_unchanged` keeps it (shared: never
    changed)."""
    recent = _not_delegated_results(
        turn_vectors.user_turns_since(con, EPISODIC_CURSOR, tail_turns, everything=whole_tail)
    )
    return (
        recent,
        tail.stored_vectors(con, file, model, recent),
        fact_store.active(con, "hot") if hot_facts else [],
        updates.links(con),
        updates.fact_closers(con),
        frozenset(fact_store.forgotten_sources(con)),
    )


def _not_delegated_results(turns: pa.Table) -> pa.Table:
    """The tail without router results, as the indexed turns are searched: an unsolicited one read
    as something the user had said (its text is another agent's, untrusted)."""
    return turns.filter(pc.not_equal(turns.column("channel"), ROUTER_CHANNEL))


def _fact_signals(db: Database, fact_ids: list[int]) -> dict[int, dict]:
    """What the found facts are weighed by. A file no process has written lately is read whole once
    and kept for the next queries; right after a write (the brain's path: it has just recorded the
    turn) only the found facts are read, as the whole table would be read for this query alone."""
    if not fact_ids:
        return {}
    if db.settled():
        return fact_store.signals_of(db.run_unchanged(fact_store.recall_signals), fact_ids)
    return db.run(fact_store.signals_for, fact_ids)


def _current_first(
    hits: list[Hit],
    successors: dict[int, Successor],
    closed_by: dict[int, Successor],
    exclude_sources: set[int],
    fact_meta: dict[int, dict],
    config: RecallConfig,
) -> list[Hit]:
    """Knowledge updates: a memory whose statements the user has since updated ("I live in
    Lisbon", later "I moved to Porto") ranks just behind the newest statement, which joins the hits
    if the search missed it (unless the caller already shows it); the older one stays, as history,
    marked with what replaced it."""
    holder: dict[int, Hit] = {}
    for hit in hits:
        for source in hit.sources:
            holder.setdefault(source, hit)
    joined = []
    for hit in hits:
        known = hit.fact_id in fact_meta  # not a keyword hit of the fallback for an unreadable table
        closed = known and fact_meta[hit.fact_id].get("valid_to") is not None
        if known and not closed:
            continue  # current: its statement's update was about another fact drawn from it
        replaced = [successors[s] for s in hit.sources if s in successors]
        if closed and hit.fact_id in closed_by:  # what closed the fact itself
            replaced = [closed_by[hit.fact_id]] * len(hit.sources)
        if replaced and len(replaced) == len(hit.sources):
            newest = max(replaced, key=lambda s: s.at)
            hit.updated_by = newest.session_id
            current = holder.get(newest.session_id)
            if current is None and newest.session_id not in exclude_sources:
                current = Hit(
                    newest.text,
                    0.0,
                    "episodic",
                    [newest.session_id],
                    newest.channel,
                    newest.at,
                    sender=newest.sender,
                )
                holder[newest.session_id] = current
                joined.append(current)
            if current is not None and current is not hit:
                current.score = max(current.score, hit.score)
        elif not closed:
            continue
        hit.score *= config.outdated_weight
    return hits + joined


def _changes_first(
    hits: list[Hit], query: str, k: int, settings: Settings, embedder: Embedder, config: RecallConfig
) -> None:
    """Updates the write-time check missed, seen because one question found both statements near
    the top (memory/updates.py): the newer moves to just ahead of the older one it updates. Only the
    order within the top `co_recalled_update_window` changes, never which memories are in it: at
    LoCoMo's k=50 a change moved up from far below and pushed evidence out of the top 5 and 10
    (tune R@5/R@10 74.2/84.4 -> 71.6/82.5, with the older one also weighed down). The search never
    writes, and an inferred update is not marked as one."""

    def encode(texts: list[str]) -> np.ndarray:
        return np.stack([_meaning(embedder, text) for text in texts])

    for new, old in co_recalled_updates(
        hits,
        min(k, config.co_recalled_update_window),
        settings.is_owner,
        encode,
        config.co_recalled_update_min_cosine,
        config.co_recalled_update_same_attribute_min_cosine,
        attributes_of(query),
        config.co_recalled_update_asked_attribute_min_cosine,
        config.update_same_subject_min_cosine,
    ):
        del hits[next(i for i, h in enumerate(hits) if h is new)]
        hits.insert(next(i for i, h in enumerate(hits) if h is old), new)
        new.score = old.score  # so a reply that quotes the best hits quotes it too


@functools.lru_cache(maxsize=4096)
def _meaning(embedder: Embedder, text: str) -> np.ndarray:
    """A memory's vector, to compare two memories: the same few come back query after query."""
    return embedder.encode_query(text)


def _facts_stand_for_their_turns(hits: list[Hit], config: RecallConfig) -> list[Hit]:
    """A fact and the turns it came from are one memory: the fact is returned once, with the better
    score, instead of the same thing twice (and a turn lifted by its neighbours lifts its fact).
    A fact drawn from many turns (an observation) absorbs none of them, as each turn is more specific,
    and lists the turns that matched the query first, best first (LoCoMo dev with observations: +2.3 R@10)."""
    turns = {h.sources[0]: h for h in hits if h.fact_id is None and len(h.sources) == 1}
    merged: set[int] = set()
    for hit in hits:
        if hit.fact_id is None:
            continue
        if len(hit.sources) > config.merge_max_sources:
            rank = {s: -turns[s].score for s in hit.sources if s in turns}
            hit.sources = sorted(hit.sources, key=lambda s: (s not in rank, rank.get(s, 0.0)))
            continue
        for source in hit.sources:
            if (turn := turns.get(source)) is not None:
                hit.score = max(hit.score, turn.score)
                merged.add(source)
    return [h for h in hits if h.fact_id is not None or not merged.intersection(h.sources)]


def _one_hit_per_statement(hits: list[Hit], settings: Settings) -> list[Hit]:
    """A statement is listed once: a fact merged from duplicates, or said again and again, came back
    beside each turn it was drawn from ("I'm allergic to peanuts" four times). The same words from
    the same person, case and spacing aside, are one hit in the place of the best of them, with its
    score and every source, and a fact among them stands for the rest. A fact also stands for a turn
    it was drawn from that says its words, punctuation aside too (write-time dedupe's normal form):
    `_facts_stand_for_their_turns` folds in only the turns of a fact from one or two. Other words,
    or another person's, stay hits of their own; `hits` is best first, and nothing else moves."""
    facts_of: dict[int, list[Hit]] = {}
    for fact in (h for h in hits if h.fact_id is not None):
        for source in fact.sources:
            facts_of.setdefault(source, []).append(fact)
    words = functools.cache(normalize)
    same: dict[tuple[tuple | None, str], list[Hit]] = {}
    for hit in hits:
        drawn_from = () if hit.fact_id is not None else facts_of.get(hit.sources[0], ())
        shown = next((f for f in drawn_from if words(f.text) == words(hit.text)), hit)
        owner_said = shown.fact_id is not None or settings.said_by_owner(shown.channel or "", shown.sender)
        whose = None if owner_said else (shown.channel, shown.sender)
        same.setdefault((whose, collapse_spaces(shown.text).casefold()), []).append(hit)
    kept = []
    for group in same.values():
        hit = next((h for h in group if h.fact_id is not None), group[0])
        hit.score = max(h.score for h in group)
        hit.sources = list(dict.fromkeys(s for h in (hit, *group) for s in h.sources))
        kept.append(hit)
    return kept


def note_use(db: Database, settings: Settings, hits: list[Hit]) -> None:
    """What a caller showed was used (seed 000): a hot fact counts a hit, a cold fact goes back to hot.
    A delegated task's result counts its hit and stays cold: hot is the floor, which never holds one."""
    vectors = vector_store(settings.paths.lance)
    hot = [h.fact_id for h in hits if h.tier == "hot" and h.fact_id is not None]
    cold = [h.fact_id for h in hits if h.tier == "cold" and h.fact_id is not None]
    promoted = [h.fact_id for h in hits if h.fact_id in cold and not h.delegated]
    if not hot and not cold:
        return

    def apply(con):
        fact_store.touch(con, hot + cold)
        fact_store.set_tier(con, promoted, "hot", reason="recalled")

    db.run(apply)
    if promoted:
        try:
            vectors.update(SEMANTIC, promoted, {"tier": "hot"})
        except (OSError, RuntimeError, ValueError) as exc:  # DuckDB moved the tier: the table resyncs
            _vectors_unreadable(SEMANTIC, exc)
        for hit in hits:
            if hit.fact_id in promoted:
                hit.tier = "hot"
