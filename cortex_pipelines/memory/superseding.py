"""Knowledge updates recorded where statements come in: the brain checks each owner turn as it
answers it, and extraction checks past conversation imported with `cortex ingest --history`, which
no brain ever answered ("I live in Lisbon", later "I moved to Porto": without the link, two years of
imported history answered "where do I live?" with every city the user had named). The rules of
what supersedes what are memory/updates.py's; this module finds the candidates and records links.
"""

from __future__ import annotations

from collections.abc import Callable

from cortex_pipelines.config import Settings
from cortex_pipelines.memory.embedder import Embedder
from cortex_pipelines.memory.patterns import attributes_of, naming_any
from cortex_pipelines.memory.pipeline import EPISODIC_CURSOR
from cortex_pipelines.memory.recall import Hit, recall
from cortex_pipelines.memory.recall_config import preset
from cortex_pipelines.memory.updates import announces_change, subject_of, superseded_statement
from cortex_pipelines.storage import Database, cursors, updates
from cortex_pipelines.text import never_an_answer

Log = Callable[[str], None]
IMPORTED_UPDATES_CURSOR = "imported_updates"  # the last turn checked by link_imported_updates


def link_update(
    db: Database, settings: Settings, embedder: Embedder, text: str, session_id: int
) -> str | None:
    """Record the update an owner statement announcing a change makes: the earlier statement it
    supersedes, and facts drawn only from superseded statements stop being current. Costs one
    recall, one scan of the user's turns by the attribute's words (about 50 ms at 100,000 turns)
    and one small encode, only for the few turns that announce a change. Returns what it linked,
    as a log line, or None."""
    if not announces_change(text):
        return None
    config = preset(settings.recall_preset)
    found = recall(db, settings, subject_of(text), k=config.update_candidates, exclude_sources={session_id})
    found += _statements_naming_the_same(db, text, session_id, found, config.update_attribute_candidates)
    old = superseded_statement(
        text,
        session_id,
        found,
        settings.is_owner,
        embedder.encode_few,
        config.update_min_cosine,
        config.update_same_attribute_min_cosine,
    )
    if old is None:
        return None
    old_ids, cosine = old

    def link(con):
        for old_id in old_ids:
            updates.record(con, old_id, session_id, cosine)
        return updates.close_outdated_facts(con)

    closed = db.run(link)
    return f"updates message(s) {old_ids} (cosine {cosine:.2f}); facts closed: {closed}"


def _statements_naming_the_same(
    db: Database, text: str, session_id: int, found: list[Hit], limit: int
) -> list[Hit]:
    """The earlier statements that name an attribute the change names ("policy" and "car
    insurance": insurance), most recent first, that recall did not find: recall searches by the
    change's words and meaning, and "We went with Admiral when the policy renewed" shares
    neither with "Our car insurance is with Aviva" (cosine 0.24)."""
    named = attributes_of(text)
    if not named or not limit:
        return []
    rows = db.run(updates.earlier_statements_matching, session_id, naming_any(named), limit)
    seen = {s for hit in found for s in hit.sources}
    return [
        Hit(r["text"], 0.0, "episodic", [r["id"]], r["channel"], r["at"], sender=r["sender"])
        for r in rows
        if r["id"] not in seen and not never_an_answer(r["text"]) and named & attributes_of(r["text"])
    ]


def link_imported_updates(db: Database, settings: Settings, embedder: Embedder, log: Log) -> int:
    """The updates in past conversation imported since the last check, up to what episodic indexing
    has indexed (so recall finds the earlier statements by meaning), oldest first, as the brain
    would have checked each had it answered it; how many turns linked. Each turn is checked once,
    re-indexing included: checked again, a turn whose statement is superseded already would take
    the next best."""
    checked = db.run(cursors.read, IMPORTED_UPDATES_CURSOR)
    upto = db.run(cursors.read, EPISODIC_CURSOR)
    linked = 0
    for turn in db.run(updates.imported_statements, checked, upto):
        if not settings.said_by_owner(turn["channel"], turn["sender"]):
            continue
        if said := link_update(db, settings, embedder, turn["text"], turn["id"]):
            linked += 1
            log(f"imported turn {turn['id']} {said}")
    if upto > checked:
        db.run(cursors.write, IMPORTED_UPDATES_CURSOR, upto)
    return linked
