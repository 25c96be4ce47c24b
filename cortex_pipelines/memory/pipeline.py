"""The write side of memory: index episodes, extract facts, dedupe at write time, keep LanceDB
in step with DuckDB. Plain functions; the Dagster assets call them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial

import numpy as np

from cortex_pipelines.config import Settings
from cortex_pipelines.llm.base import LLMClient, LLMResponse
from cortex_pipelines.llm.recorded import complete_recorded
from cortex_pipelines.memory.embedder import Embedder, embedder_for
from cortex_pipelines.memory.extract import (
    InjectedText,
    UnreadableExtraction,
    clean_fact,
    extract_offline,
    extract_with_llm,
)
from cortex_pipelines.memory.recall_config import preset
from cortex_pipelines.memory.updates import facts_about, statements_of
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, VectorStore, vector_store
from cortex_pipelines.storage import Database, cursors, facts, session, turn_vectors, updates, utcnow
from cortex_pipelines.storage.facts import OP_HARVEST, FactDraft, norm_hash
from cortex_pipelines.text import split_sentences
from cortex_pipelines.turn import Turn

Log = Callable[[str], None]
EPISODIC_CURSOR = "episodic_indexed"
EXTRACTION_CURSOR = "facts_extracted"
# An extraction answer cut at max_tokens is asked again in halves, down to this many turns a call.
EXTRACT_SPLIT_LEAST = 5


@dataclass
class WriteReport:
    new: list[int] = field(default_factory=list)
    reinforced: list[int] = field(default_factory=list)
    outdated: list[int] = field(default_factory=list)
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    turns_read: int = 0


def speaker_line(sender: str | None, text: str) -> str:
    """A turn with who said it: what its vector embeds, to complement full text's wider view."""
    return f"{sender or 'unknown'}: {text}"


# A pasted document is not a turn of chat: 64 KiB of short sentences meant 4,000 vectors, 25 s of
# a run and 20 MB of DuckDB. Its later sentences are still found through the turn's own vector and
# full text.
MAX_SENTENCE_VECTORS = 64


def sentence_lines(sender: str | None, text: str) -> list[str]:
    """Each sentence of a turn of several (the first MAX_SENTENCE_VECTORS), with who said it;
    nothing for a one-sentence turn."""
    sentences = split_sentences(text)
    return [speaker_line(sender, s) for s in sentences[:MAX_SENTENCE_VECTORS]] if len(sentences) > 1 else []


def turn_lines(sender: str | None, text: str, is_user: bool) -> list[str]:
    """What a turn's vectors embed: the turn, then (a user turn of several sentences) each sentence."""
    return [speaker_line(sender, text), *(sentence_lines(sender, text) if is_user else [])]


def embed_turns(
    embedder: Embedder, turns: list[tuple[str | None, str, bool]]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(turn vector, sentence vectors) for each (sender, text, is_user) in one encode, as the brain
    also stores them when it records a turn. Only user turns are recalled, so only they get
    sentence vectors."""
    sentences = [turn_lines(sender, text, is_user)[1:] for sender, text, is_user in turns]
    lines = [speaker_line(sender, text) for sender, text, _ in turns]
    vecs = embedder.encode_batch(lines + [line for ss in sentences for line in ss])
    out, start = [], len(turns)
    for i, ss in enumerate(sentences):
        out.append((vecs[i], vecs[start : start + len(ss)]))
        start += len(ss)
    return out


def embedder_id(embedder: Embedder) -> str:
    """Which vector space a stored vector belongs to."""
    return getattr(embedder, "model_name", type(embedder).__name__)


def episode_search_text(sender: str | None, text: str, prev_sender: str | None, prev_text: str | None) -> str:
    """A turn as full-text search sees it: who said it, and the turn it answers, when another
    speaker said that one (an exchange). The user's own previous message to the agent is usually
    about something else, and pairing it gave an unrelated turn the words of a statement."""
    own = speaker_line(sender, text)
    if prev_text is None or prev_sender == sender:
        return own
    return f"{speaker_line(prev_sender, prev_text[:1000])}\n{own}"


def index_episodes(
    db: Database,
    vectors: VectorStore,
    embedder: Embedder,
    settings: Settings,
    log: Log = lambda _: None,
    batch: int = 512,
) -> int:
    """Embed every session message not yet in the episodic table, in batches, resumably."""
    total, model = 0, embedder_id(embedder)
    why = vectors.outdated(EPISODIC, model)
    if why:
        vectors.drop(EPISODIC)
        db.run(cursors.write, EPISODIC_CURSOR, 0)
        log(f"re-indexing every session message: the episodic table is outdated ({why})")
    while True:
        cursor = db.run(cursors.read, EPISODIC_CURSOR)
        rows = db.run(session.episodes_after, cursor, batch)
        if not rows:
            break
        search = [episode_search_text(r[3], r[4], r[6], r[7]) for r in rows]
        # User turns the brain embedded when it recorded them are not embedded again.
        written = db.run(turn_vectors.stored, [r[0] for r in rows if r[1] == "user"], model)
        fresh = [r for r in rows if r[0] not in written]
        embedded = dict(
            zip(
                [r[0] for r in fresh],
                embed_turns(embedder, [(r[3], r[4], r[1] == "user") for r in fresh]),
                strict=True,
            )
        )
        vecs = {sid: (v.tolist(), ss.tolist()) for sid, (v, ss) in (embedded | written).items()}
        vectors.upsert(
            EPISODIC,
            [
                {
                    "id": r[0],
                    "role": r[1],
                    "channel": r[2],
                    "sender": r[3],
                    "text": r[4],
                    "search_text": search[i],
                    "stated_at": r[5],
                    "vector": vecs[r[0]][0],
                    "sources": [r[0]],
                    "category": "message",
                    "importance": 1.0,
                    "prev_id": r[8],
                    "sentence_vectors": vecs[r[0]][1],
                }
                for i, r in enumerate(rows)
            ],
            model,
        )
        # Silence rows between the batch's ids are skipped by the WHERE; the cursor covers them.
        db.run(cursors.write, EPISODIC_CURSOR, rows[-1][0])
        total += len(rows)
        log(f"indexed {total} session message(s) into LanceDB (up to id {rows[-1][0]})")
    return total


def unindexed_turns(db: Database, vectors: VectorStore, embedder: Embedder) -> tuple[int, bool]:
    """Turns episodic indexing has yet to embed, and whether that is all of them again (a changed
    `embedding_model`): after importing years of history the first run's indexing takes minutes
    (about 150 texts a second on two cores with all-MiniLM-L6-v2)."""
    if vectors.outdated(EPISODIC, embedder_id(embedder)):
        return db.run(session.count_after, 0), True
    return db.run(session.count_after, db.run(cursors.read, EPISODIC_CURSOR)), False


def index_episodes_for_recall(
    db: Database,
    vectors: VectorStore,
    embedder: Embedder,
    settings: Settings,
    log: Log = lambda _: None,
) -> int:
    """`index_episodes`, then build and save recall's snapshot of the table's new version, so the
    next query loads it rather than builds it."""
    added = index_episodes(db, vectors, embedder, settings, log=log)
    if added:
        vectors.snapshot(EPISODIC)
    return added


def _semantic_row(fact: dict, vector: np.ndarray) -> dict:
    return {
        "id": fact["id"],
        "text": fact["text"],
        "search_text": fact["text"],
        "vector": vector.tolist(),
        "channel": (fact["channels"] or [None])[0],
        "sources": list(fact["sources"]),
        "category": fact["category"],
        "importance": float(fact["importance"]),
        "stated_at": fact["stated_at"],
        "tier": fact["tier"],
        "status": fact["status"],
    }


def sync_facts(
    db: Database,
    vectors: VectorStore,
    embedder: Embedder,
    settings: Settings,
    log: Log = lambda _: None,
    rebuild_outdated: bool = False,
) -> int:
    """Upsert facts whose LanceDB row is missing or stale (after a crash, an edit, a tier move). A row
    whose text is unchanged keeps its vector, so a forget or a re-rating loads no model. A table
    another model made is rebuilt only by indexing runs (`rebuild_outdated`, one at a time): a
    command in a process configured with another model had dropped it under a running one; until
    then the facts wait in DuckDB, unindexed."""
    model = embedder_id(embedder)
    why = vectors.outdated(SEMANTIC, model)
    if why and not rebuild_outdated:
        return 0
    if why:
        log(f"re-embedding every fact: the semantic table is outdated ({why})")
        vectors.drop(SEMANTIC)
        db.run(facts.mark_all_unindexed)
    stale = db.run(facts.unindexed)
    if not stale:
        return 0
    started = utcnow()
    stored = vectors.texts_and_vectors(SEMANTIC, [f["id"] for f in stale])
    fresh = [f for f in stale if f["id"] not in stored or stored[f["id"]][0] != f["text"]]
    vecs = {fact_id: vec for fact_id, (_, vec) in stored.items()}
    vecs.update(zip([f["id"] for f in fresh], embedder.encode_batch([f["text"] for f in fresh]), strict=True))
    vectors.upsert(SEMANTIC, [_semantic_row(f, vecs[f["id"]]) for f in stale], model)
    db.run(facts.mark_indexed, [f["id"] for f in stale], started)
    vectors.ensure_vector_index(SEMANTIC, settings.vector_index_min_rows)
    return len(stale)


def remember(
    db: Database,
    vectors: VectorStore,
    embedder: Embedder,
    settings: Settings,
    drafts: list[FactDraft],
    rebuild_outdated: bool = False,
) -> WriteReport:
    """Write facts with dedupe: normalized hash first, then cosine ≥ dedupe_cosine (when the
    semantic table holds this model's vectors; see `sync_facts` for `rebuild_outdated`)."""
    report = WriteReport()
    if not drafts:
        return report
    sync = partial(sync_facts, db, vectors, embedder, settings, rebuild_outdated=rebuild_outdated)
    sync()  # dedupe must see every active fact
    same_space = vectors.outdated(SEMANTIC, embedder_id(embedder)) is None
    by_hash = db.run(facts.active_by_hash, [norm_hash(d.text) for d in drafts])
    vecs = embedder.encode_batch([d.text for d in drafts])
    reinforcements: list[tuple[int, FactDraft]] = []
    groups: list[tuple[str, np.ndarray, list[FactDraft]]] = []  # new facts, with their restatements
    for draft, vec in zip(drafts, vecs, strict=True):
        digest = norm_hash(draft.text)
        existing = by_hash.get(digest)
        if existing is None and same_space:
            hit = vectors.vector_search(SEMANTIC, vec, 1, "status = 'active'")
            if hit and 1.0 - hit[0]["_distance"] >= settings.dedupe_cosine:
                existing = int(hit[0]["id"])
        if existing is not None:
            reinforcements.append((existing, draft))
            continue
        twin = next(
            (g for g in groups if g[0] == digest or float(g[1] @ vec) >= settings.dedupe_cosine), None
        )
        if twin is not None:
            twin[2].append(draft)
        else:
            groups.append((digest, vec, [draft]))

    cold_before = utcnow() - timedelta(days=settings.cold_after_days)

    def write(con):
        for fact_id, draft in reinforcements:
            facts.reinforce(con, fact_id, draft.sources, draft.channels, draft.importance)
            report.reinforced.append(fact_id)
        for _, _, (first, *rest) in groups:
            # A fact last said longer ago than eviction waits (imported history) starts cold, as
            # eviction would leave it: 2,000 facts from two years of chat had all been hot, over the
            # cap and in the floor, until eviction reached them 14 days later. A delegated task's
            # result is another agent's text: found only through recall, never in the floor.
            said_long_ago = max(d.stated_at for d in (first, *rest)) < cold_before
            stays_out = first.origin == OP_HARVEST or (said_long_ago and first.category != "identity")
            tier = "cold" if stays_out else "hot"
            fact_id = facts.insert(con, first, tier=tier)
            for extra in rest:
                facts.reinforce(con, fact_id, extra.sources, extra.channels, extra.importance)
            report.new.append(fact_id)
        for draft in drafts:  # the extraction model named facts this one makes no longer true
            if not draft.supersedes:
                continue
            said, sources = min(draft.sources), {f: updates.sources_of(con, [f]) for f in draft.supersedes}
            for old_turn in sorted({turn for turns in sources.values() for turn in turns}):
                if old_turn < said:  # only an earlier statement can be updated
                    updates.record(con, old_turn, draft.sources[-1], None)
            # each named fact itself, whatever else its statements held and whenever they were updated
            named = [f for f, turns in sources.items() if max(turns, default=said) < said]
            updates.close_facts_by(con, named, draft.sources[-1])

    db.run(write)
    sync()
    return report


def save_fact(db: Database, settings: Settings, draft: FactDraft) -> WriteReport:
    """One fact saved by hand (the admin chat), with the same dedupe and LanceDB sync as extraction."""
    return remember(db, vector_store(settings.paths.lance), embedder_for(settings), settings, [draft])


def extract_new_facts(
    db: Database,
    vectors: VectorStore,
    embedder: Embedder,
    settings: Settings,
    llm: LLMClient | None,
    log: Log = lambda _: None,
    within_budget: Callable[[], bool] = lambda: True,
) -> WriteReport:
    """Read the owner's turns after the cursor, extract, remember, advance. No new turns: no LLM
    call. Other senders' turns stay in the session as theirs: what they say is never a user fact.
    The model reads 40 turns a call while `within_budget()` (the daily token budget, asked before
    each call after the first: the first run after importing 56,000 turns would have made 1,400
    calls on a 200,000-token day); the rest are extracted with patterns, as when the day's budget
    was spent before the run."""
    # Facts another model embedded are re-embedded now, new turns or not (`cortex dev` runs this
    # asset only when turns arrive; its maintenance runs daily).
    sync_facts(db, vectors, embedder, settings, log=log, rebuild_outdated=True)
    cursor = db.run(cursors.read, EXTRACTION_CURSOR)
    latest = db.run(session.latest_id)  # read first: a turn recorded meanwhile is read now or next time
    rows = db.run(session.to_extract_after, cursor)
    upto = max(latest, rows[-1][0] if rows else 0)
    turns = [
        Turn(i, "user", ch, who, text, ts) for i, ch, who, text, ts in rows if settings.is_owner(ch, who)
    ]
    if not turns:
        if upto > cursor:
            db.run(cursors.write, EXTRACTION_CURSOR, upto)
        return WriteReport()
    injected = InjectedText.from_outputs(settings.paths.out, extra=db.run(session.replies_after, cursor))
    report = WriteReport(turns_read=len(turns))
    if llm is None:
        drafts = extract_offline(turns, injected, db.run(updates.replaced_statements, [t.id for t in turns]))
    else:
        drafts = []
        for start in range(0, len(turns), 40):
            if start and not within_budget():
                rest = turns[start:]
                replaced = db.run(updates.replaced_statements, [t.id for t in rest])
                drafts.extend(extract_offline(rest, injected, replaced))
                log(f"daily extraction token budget spent: {len(rest)} turn(s) extracted with patterns")
                break
            complete = partial(complete_recorded, db, llm, asset="extracted_facts")
            drafts.extend(_by_model(db, complete, turns[start : start + 40], injected, report, log))
    written = remember(db, vectors, embedder, settings, drafts, rebuild_outdated=True)
    report.new, report.reinforced = written.new, written.reinforced
    margin = preset(settings.recall_preset).update_fact_margin
    # facts from statements the user updated
    report.outdated = close_outdated_facts(db, embedder, settings, margin)
    db.run(cursors.write, EXTRACTION_CURSOR, upto)
    log(f"read {len(turns)} user turn(s): {len(report.new)} new fact(s), {len(report.reinforced)} reinforced")
    return report


def close_outdated_facts(db: Database, embedder: Embedder, settings: Settings, margin: float) -> list[int]:
    """Facts whose every source statement was updated stop being current, but of the facts that
    statements yielded together only those the update is about: "I live in Lisbon and work at Acme
    as a nurse", then "I moved to Porto", had closed "works at Acme" with "lives in Lisbon". The
    others stay current until a later update, and so do the statements of a closed fact that the
    update is not about (`close_keeping_apart`). Returns the closed facts' ids."""
    together: dict[tuple[int, ...], list[dict]] = defaultdict(list)
    for fact in db.run(updates.outdated_candidates):
        together[tuple(sorted(fact["sources"]))].append(fact)
    outdated, kept = [], []
    for candidates in together.values():
        drawn_with = candidates[0]["drawn_with"]
        about = facts_about(embedder.encode_few, " ".join(candidates[0]["newer"]), drawn_with, margin)
        for fact in candidates:
            (outdated if fact["text"] in about else kept).append(fact)

    def close(con) -> list[int]:
        updates.keep_current(con, kept)
        return updates.close_facts(con, outdated)

    apart = kept_apart(embedder, [(f["id"], f["text"], " ".join(f["newer"])) for f in outdated], margin)
    return close_keeping_apart(db, embedder, settings, close, apart)


def kept_apart(
    embedder: Embedder, closing: list[tuple[int, str, str]], margin: float
) -> dict[int, list[str]]:
    """Of facts a change closes, (id, text, the change), the statements each joins that the change
    is not about ("I live in Lisbon and my locker code is 4471", then "I moved to Porto": "My locker
    code is 4471"), by fact id; a fact that joins none is not there."""
    apart = {}
    for fact_id, text, change in closing:
        statements = statements_of(text)
        if len(statements) < 2:
            continue
        about = facts_about(embedder.encode_few, change, statements, margin)
        if rest := [clean_fact(s) for s in statements if s not in about]:
            apart[fact_id] = rest
    return apart


def close_keeping_apart(
    db: Database,
    embedder: Embedder,
    settings: Settings,
    close: Callable[[object], list[int]],
    apart: dict[int, list[str]],
) -> list[int]:
    """Run `close`, a transaction that closes facts; in it, each closed fact's statements in `apart`
    become facts of their own, embedded at once, so the bulletin and recall keep what the change did
    not touch. Returns the closed facts' ids."""

    def closing(con) -> list[int]:
        closed = close(con)
        for fact_id in closed:
            if fact_id in apart:
                facts.split_off(con, fact_id, apart[fact_id])
        return closed

    closed = db.run(closing)
    if apart.keys() & set(closed):
        sync_facts(db, vector_store(settings.paths.lance), embedder, settings)
    return closed


def _by_model(db, complete, chunk: list[Turn], injected, report: WriteReport, log: Log) -> list[FactDraft]:
    """The chunk's facts as the model extracts them. An answer cut at max_tokens is asked again in
    halves (down to EXTRACT_SPLIT_LEAST turns); one still cut, or that holds no JSON list (prose, a
    refusal), is extracted with patterns, and said: its facts had been lost without a word."""
    known = [(f["id"], f["text"]) for f in db.run(facts.hot_for_floor, 50)]
    try:
        found, response = extract_with_llm(complete, chunk, known, injected)
    except UnreadableExtraction as unreadable:
        _count_call(report, unreadable.response)
        if unreadable.cut and len(chunk) >= 2 * EXTRACT_SPLIT_LEAST:
            half = len(chunk) // 2
            return [
                *_by_model(db, complete, chunk[:half], injected, report, log),
                *_by_model(db, complete, chunk[half:], injected, report, log),
            ]
        log(f"extraction answer unreadable ({unreadable}): {len(chunk)} turn(s) extracted with patterns")
        return extract_offline(chunk, injected, db.run(updates.replaced_statements, [t.id for t in chunk]))
    if response is not None:
        _count_call(report, response)
    return found


def _count_call(report: WriteReport, response: LLMResponse) -> None:
    report.llm_calls += 1
    report.input_tokens += response.input_tokens
    report.output_tokens += response.output_tokens


def forget_index(db: Database, vectors: VectorStore) -> None:
    """Drop both LanceDB tables and mark every message and fact not yet indexed: the next indexing
    run (or `rebuild`) embeds them all again, and meanwhile recall reads them from DuckDB."""
    for name in (EPISODIC, SEMANTIC):
        vectors.drop(name)
    db.run(cursors.write, EPISODIC_CURSOR, 0)
    db.run(facts.mark_all_unindexed)


def rebuild(
    db: Database, vectors: VectorStore, embedder: Embedder, settings: Settings, log: Log = lambda _: None
) -> dict:
    """Re-embed and re-index everything (after a model change or a damaged LanceDB folder).
    DuckDB is the source of truth, so LanceDB can always be rebuilt from it."""
    embedder.encode(["the model loads before anything is dropped"])
    forget_index(db, vectors)
    log("dropped the LanceDB tables; re-embedding session messages")
    episodes = index_episodes(db, vectors, embedder, settings, log=log)
    synced = sync_facts(db, vectors, embedder, settings, log=log, rebuild_outdated=True)
    log(f"re-embedded {synced} fact(s)")
    for name in (EPISODIC, SEMANTIC):
        vectors.optimize(name)
    return {"episodes": episodes, "facts": synced}
