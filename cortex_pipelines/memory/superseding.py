"""Knowledge updates recorded as the brain answers each owner turn: the candidates an update may
supersede (what recall finds for it, and the earlier statements naming the same attribute), then
the link. The rules of what supersedes what are memory/updates.py's.

Past conversation imported with `cortex ingest --history` is never answered, so it is never
checked: linking it in `episodic_memory` answered "where do I live?" with the newest city after an
import, but cost LoCoMo (imported as history) R@10 2.0 on its tune half and 1.2 on its check half,
whose questions often ask what was true before; not adopted.
"""

from __future__ import annotations

from functools import partial

from cortex_pipelines.config import Settings
from cortex_pipelines.memory.embedder import Embedder
from cortex_pipelines.memory.patterns import attributes_of, naming_any
from cortex_pipelines.memory.pipeline import close_keeping_apart, close_outdated_facts, kept_apart
from cortex_pipelines.memory.recall import Hit, recall
from cortex_pipelines.memory.recall_config import RecallConfig, preset
from cortex_pipelines.memory.updates import (
    announces_change,
    changed_subject,
    facts_about,
    left_names,
    returned_to,
    subject_of,
    superseded_statement,
)
from cortex_pipelines.storage import Database, session, updates
from cortex_pipelines.text import never_an_answer, normalize


def link_update(
    db: Database,
    settings: Settings,
    embedder: Embedder,
    text: str,
    session_id: int,
    said_by: tuple[str, str | None],
) -> str | None:
    """Record the update an owner statement announcing a change makes: the earlier statement it
    supersedes, and facts drawn only from superseded statements stop being current. A statement
    said again after a change, or returned to in other words, updates that change instead
    (`_restate`). Every owner turn costs one read of the update links (one row per change the user
    announced); one recall, one scan of the user's turns by the attribute's words (about 50 ms at
    100,000 turns) and one small encode are only for the few turns that announce a change (or say a
    return word naming a value of a superseded statement). Returns what it linked,
    as a log line, or None."""
    config = preset(settings.recall_preset)
    if restated := _restated_statements(db, embedder, config, text, session_id, said_by):
        return _restate(db, embedder, settings, restated, session_id, said_by[0], config.update_fact_margin)
    if not announces_change(text) and not changed_subject(text) and not left_names(text):
        return None
    found = recall(db, settings, subject_of(text), k=config.update_candidates, exclude_sources={session_id})
    found += _statements_naming_the_same(db, text, session_id, found, config.update_attribute_candidates)
    found = [hit for hit in found if hit.fact_id is None or _said_by_them(db, hit, said_by)]
    old = superseded_statement(
        text,
        session_id,
        found,
        settings.is_owner,
        embedder.encode_few,
        config.update_min_cosine,
        config.update_same_attribute_min_cosine,
        said_by,
        config.update_same_subject_min_cosine,
    )
    if old is None:
        return None
    old_ids, cosine = old

    def link(con) -> list[dict]:
        if not [old_id for old_id in old_ids if updates.record(con, old_id, session_id, cosine)]:
            # statements an earlier change updated: this one is about a fact of theirs still current
            return updates.current_facts_from(con, old_ids)
        return []

    current = db.run(link)
    margin = config.update_fact_margin
    about = facts_about(embedder.encode_few, text, [f["text"] for f in current], margin)
    named = [(f["id"], f["text"], text) for f in current if f["text"] in about]
    closed = []
    if named:
        apart = kept_apart(embedder, named, margin)
        ids = [fact_id for fact_id, *_ in named]
        closing = partial(updates.close_facts_by, fact_ids=ids, session_id=session_id)
        closed = close_keeping_apart(db, embedder, settings, closing, apart)
    closed += close_outdated_facts(db, embedder, settings, margin)
    return f"updates message(s) {old_ids} (cosine {cosine:.2f}); facts closed: {closed}"


def _restated_statements(
    db: Database,
    embedder: Embedder,
    config: RecallConfig,
    text: str,
    session_id: int,
    said_by: tuple[str, str | None],
) -> list[dict]:
    """Earlier statements of theirs, updated since, that this one says again: word for word ("I live
    in Lisbon" after "I moved to Porto": it had been folded into the closed fact of the first
    saying, so the user's latest word was answered as no longer current), else in other words as a
    return to one of them ("I'm living in Lisbon again", `returned_to`)."""
    if never_an_answer(text):
        return []
    superseded = db.run(updates.superseded_statements, session_id)
    successor = {row["id"]: row["superseder"] for row in superseded}
    theirs = [row for row in superseded if _spoken_by_them({(row["channel"], row["sender"])}, said_by)]
    said = normalize(text)
    restated = [row for row in theirs if normalize(row["text"]) == said]
    if not restated and theirs:
        best = returned_to(
            text,
            [row["text"] for row in theirs],
            embedder.encode_few,
            config.update_min_cosine,
            config.update_same_attribute_min_cosine,
        )
        restated = [] if best is None else [theirs[best]]
    for n, row in enumerate(restated):
        while row["superseder"] in successor:  # a chain of changes: the newest one stands
            row = {**row, "superseder": successor[row["superseder"]]}
        restated[n] = row
    return restated


def _restate(
    db: Database,
    embedder: Embedder,
    settings: Settings,
    restated: list[dict],
    session_id: int,
    channel: str,
    margin: float,
) -> str:
    """The restatement updates what had updated the statement it repeats, and the facts drawn from
    that statement are current again, with the restatement as a source."""
    restated_ids = [row["id"] for row in restated]
    superseders = sorted({row["superseder"] for row in restated})

    def link(con) -> list[int]:
        for superseder in superseders:
            updates.record(con, superseder, session_id, None)
        return updates.current_again_restated(con, restated_ids, session_id, channel)

    current = db.run(link)
    closed = close_outdated_facts(db, embedder, settings, margin)
    return (
        f"restates message(s) {restated_ids}, updating {superseders}; facts current again: {current}, "
        f"facts closed: {closed}"
    )


def _said_by_them(db: Database, fact: Hit, said_by: tuple[str, str | None]) -> bool:
    """Whether a fact may be updated by what `said_by` said: drawn from a turn of theirs, or of the
    owner on another channel (other ids there). A fact from another owner's turn in the same chat
    is that person's ("I live in Lisbon" is Ana's, not Ben's to update by moving)."""
    return _spoken_by_them(db.run(session.speakers_of, list(fact.sources)), said_by)


def _spoken_by_them(speakers: set[tuple[str, str | None]], said_by: tuple[str, str | None]) -> bool:
    """Whether any of these (channel, sender) speakers is `said_by`, or the owner on another channel."""
    channel, sender = said_by
    return any(c != channel or s == sender for c, s in speakers)


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
