"""The owner's memory operations (seed 002's tools), one function each, behind every door: the
`cortex` command line, the admin chat's slash commands and the brain's tools (and the HTTP gateway
when it comes). Each checks its input the same way, does its DuckDB work through storage/, keeps
LanceDB in step and returns a plain result, or raises ControlError with a one-line reason, so a
request behaves the same whichever door it came through.

Facts are named by id (as recall, the floor and the bulletin show them); importance is one scale,
1 routine, 2 useful, 3 critical, as extraction rates facts; categories come from
storage.facts.CATEGORIES, the first one the primary (the bulletin's section).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from cortex_pipelines.config import Settings
from cortex_pipelines.memory.caller import DEDUPE_THRESHOLD, MIN_DEDUPE_THRESHOLD, Caller
from cortex_pipelines.memory.compaction import republish_snapshot
from cortex_pipelines.memory.embedder import embedder_for
from cortex_pipelines.memory.fusion import stemmed
from cortex_pipelines.memory.maintenance import similar_pairs
from cortex_pipelines.memory.patterns import classify
from cortex_pipelines.memory.pipeline import save_fact, sync_facts
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, vector_store
from cortex_pipelines.publish import boot, bulletin, narrative
from cortex_pipelines.storage import Database, facts, session, utcnow
from cortex_pipelines.storage.facts import CATEGORIES, DELEGATED_RESULT, OP_HARVEST, FactDraft
from cortex_pipelines.storage.session import PIN_LIMIT
from cortex_pipelines.text import collapse_spaces, never_an_answer

log = logging.getLogger(__name__)

MIN_TEXT, MAX_TEXT = 3, 2000
MAX_LABEL = 40
DEFAULT_IMPORTANCE = 2  # a fact saved by hand is useful: it sorts among the extracted facts, not below
DEDUPE_ACTIONS = ("report", "merge", "delete_older")
RECENT_HOURS = 48
MAX_RECENT = 50
MAX_RECENT_TURNS = 5000  # the newest turns of the window that are scored; more is a flood, not memory
OWNER = "owner"  # the sender of what the owner says outside the bus (`cortex save`, /save)


class ControlError(ValueError):
    """A request that cannot be done; one line, the same whichever door it came through."""


# -- input, checked alike for every door ---------------------------------------------------------


def _text(text: str | None, what: str = "the text") -> str:
    text = (text or "").strip()
    if len(text) < MIN_TEXT:
        raise ControlError(f"{what} is empty or too short (at least {MIN_TEXT} characters)")
    if len(text) > MAX_TEXT:
        raise ControlError(f"{what} is too long (at most {MAX_TEXT} characters)")
    return text


def _importance(value: float | None) -> float:
    if value is None:
        return DEFAULT_IMPORTANCE
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 3:
        raise ControlError("importance must be from 1 (routine) to 3 (critical)")
    return float(value)


def _categories(values) -> list[str]:
    """Known category names, each once, in the order given (the first is the primary one)."""
    if isinstance(values, str):
        values = [values]
    names = list(dict.fromkeys(str(v).strip().lower() for v in values or ()))
    if not names:
        raise ControlError(f"give at least one category: {', '.join(CATEGORIES)}")
    unknown = [n for n in names if n not in CATEGORIES]
    if unknown:
        raise ControlError(f"unknown category {unknown[0]!r}; the categories are {', '.join(CATEGORIES)}")
    return names


def _label(label: str | None) -> str | None:
    label = (label or "").strip()
    if "\n" in label or len(label) > MAX_LABEL:
        raise ControlError(f"a label is one line of at most {MAX_LABEL} characters")
    return label or None


def _keep_in_step(db: Database, settings: Settings) -> None:
    """LanceDB's fact rows follow DuckDB at once, so recall never returns what was just changed: a new
    text is embedded, a changed state or rating is copied (sync_facts keeps an unchanged text's
    vector, so this loads no model for a forget)."""
    sync_facts(db, vector_store(settings.paths.lance), embedder_for(settings), settings)


def _fact(db: Database, fact_id: int) -> dict:
    (row,) = db.run(facts.with_categories, [fact_id])
    return _shown(row)


def _shown(row: dict) -> dict:
    return {
        "fact_id": row["id"],
        "text": row["text"],
        "importance": row["importance"],
        "categories": list(row["categories"]),
    }


def fact_line(fact: dict) -> str:
    return (
        f"fact {fact['fact_id']} (importance {fact['importance']:g}, {', '.join(fact['categories'])}): "
        f"{fact['text']}"
    )


# -- facts ---------------------------------------------------------------------------------------


@dataclass
class Saved:
    fact_id: int
    new: bool  # False: the fact was known already and is reinforced

    def line(self) -> str:
        return (
            f"saved as fact {self.fact_id}" if self.new else f"already known: reinforced fact {self.fact_id}"
        )


def save(
    db: Database,
    settings: Settings,
    text: str,
    caller: Caller,
    *,
    categories=("fact",),
    importance: float | None = None,
) -> Saved:
    """Remember a fact the owner states, with the write-time dedupe and LanceDB sync of extraction."""
    text, chosen, rating = _text(text), _categories(categories), _importance(importance)
    if caller.turn is None:
        turn, at = db.run(session.append_owner_note, caller.channel, OWNER, text), utcnow()
    else:
        turn, at = caller.turn, caller.at or utcnow()
    draft = FactDraft(
        text, chosen[0], rating, (turn,), (caller.channel,), at, origin="saved", categories=tuple(chosen)
    )
    report = save_fact(db, settings, draft)
    if report.new:
        return Saved(report.new[0], True)
    return Saved(report.reinforced[0], False)


def update(
    db: Database,
    settings: Settings,
    fact_id: int,
    caller: Caller,
    *,
    importance: float | None = None,
    categories=None,
) -> dict:
    """Re-rate or re-file an active fact (seed 002's cortex_update); the text stays, so no re-embedding."""
    if importance is None and categories is None:
        raise ControlError("give an importance or categories to change")
    rating = None if importance is None else _importance(importance)
    chosen = None if categories is None else _categories(categories)
    if not db.run(facts.update, fact_id, rating, chosen, f"{caller.door}: asked by the owner"):
        raise ControlError(f"no active fact {fact_id}")
    _keep_in_step(db, settings)
    return _fact(db, fact_id)


def move(db: Database, settings: Settings, fact_id: int, categories, caller: Caller) -> dict:
    """File a fact under other categories, replacing its own (seed 002's cortex_move)."""
    return update(db, settings, fact_id, caller, categories=_categories(categories))


@dataclass
class Edited:
    fact_id: int  # the corrected fact
    replaces: int
    text: str

    def line(self) -> str:
        return f"fact {self.replaces} is now fact {self.fact_id}"


def edit(
    db: Database, settings: Settings, fact_id: int, text: str, caller: Caller, *, mode: str = "replace"
) -> Edited:
    """Correct a fact (replace its text) or add to it (append): a new fact with the old one's sources,
    categories and importance supersedes it, and its text is embedded before this returns."""
    if mode not in ("replace", "append"):
        raise ControlError("mode must be replace or append")
    given = _text(text, "the new text" if mode == "replace" else "the text to append")
    old = db.run(facts.get, fact_id)
    if old is None or old["status"] != "active":
        raise ControlError(f"no active fact {fact_id}")
    corrected = _text(given if mode == "replace" else f"{old['text'].rstrip()} {given}", "the new text")
    new_id = db.run(facts.edit, fact_id, corrected)
    if new_id is None:  # forgotten or merged since it was read
        raise ControlError(f"no active fact {fact_id}")
    _keep_in_step(db, settings)
    publish_now(db, settings)  # the bulletin showed the old text until the hourly refresh
    return Edited(new_id, fact_id, corrected)


@dataclass
class Forgotten:
    fact_id: int  # or, with `turn`, the message's turn id
    forgotten: bool  # False: remembered again
    also_hidden: int = 0  # forgotten: the exchanges elsewhere whose reply quoted it, hidden with it
    turn: bool = False  # a message that produced no fact, not a fact

    def line(self) -> str:
        what = f"message {self.fact_id}" if self.turn else f"fact {self.fact_id}"
        if not self.forgotten:
            return f"{what} is remembered again"
        n = self.also_hidden
        quoted = f"; also hidden: {n} exchange{'s' * (n != 1)} that quoted it" if n else ""
        return f"forgot {what}{quoted}"


def forget(
    db: Database, settings: Settings, fact_id: int, caller: Caller, reason: str | None = None
) -> Forgotten:
    """Stop using a fact, the turns it came from and the exchanges that quoted it (soft, audited,
    undone by unforget)."""
    why = f"{caller.door}: {(reason or '').strip() or 'asked by the owner'}"
    quoting = db.run(facts.forget, fact_id, why)
    if quoting is None:
        raise ControlError(f"no active fact {fact_id}")
    _keep_in_step(db, settings)
    publish_now(db, settings)
    return Forgotten(fact_id, True, len(quoting))


def unforget(
    db: Database, settings: Settings, fact_id: int, caller: Caller, reason: str | None = None
) -> Forgotten:
    """Undo a forget: the fact, the turns it came from and the exchanges that quoted it are recalled
    again."""
    why = f"{caller.door}: {(reason or '').strip() or 'asked by the owner'}"
    if not db.run(facts.unforget, fact_id, why):
        raise ControlError(f"no forgotten fact {fact_id}")
    _keep_in_step(db, settings)
    publish_now(db, settings)
    return Forgotten(fact_id, False)


def forget_message(
    db: Database, settings: Settings, turn_id: int, caller: Caller, reason: str | None = None
) -> Forgotten:
    """Stop using a message of the owner's that produced no fact (its turn id, as recall cites it),
    and the exchanges that quoted it: soft, undone by unforget_message. Erasure is for text that
    must go for good."""
    why = f"{caller.door}: {(reason or '').strip() or 'asked by the owner'}"
    if drawn := db.run(facts.active_drawn_from, turn_id):
        # Hiding the message would leave its facts in every prompt, recall and the bulletin.
        ids = ", ".join(map(str, drawn))
        raise ControlError(f"message {turn_id} has fact(s) {ids}: forget those (`cortex forget {drawn[0]}`)")
    quoting = db.run(facts.forget_turn, turn_id, why)
    if quoting is None:
        raise ControlError(
            f"no message {turn_id} of yours to forget (not one you sent, or forgotten already: "
            "`cortex recall` cites yours)"
        )
    publish_now(db, settings)
    return Forgotten(turn_id, True, len(quoting), turn=True)


def unforget_message(db: Database, settings: Settings, turn_id: int) -> Forgotten:
    """Undo forget_message: the message and the exchanges that quoted it are used again."""
    if not db.run(facts.unforget_turn, turn_id):
        raise ControlError(f"no forgotten message {turn_id}")
    publish_now(db, settings)
    return Forgotten(turn_id, False, turn=True)


def publish_now(db: Database, settings: Settings) -> None:
    """Every prompt carries the bulletin and other agents read hot-snapshot.md, narrative.md and
    BOOTSTRAP.md: a forgotten fact and its turns must leave them now (and come back with unforget),
    as must what a restored backup rolled back, not when new input next rebuilds them. No model
    call: the bulletin's next refresh writes prose again. A file not yet written quotes nothing;
    BOOTSTRAP.md goes last, as it embeds the snapshot and the narrative."""
    bulletin.refresh(db, settings, None, log.warning)
    try:
        republish_snapshot(db, settings)
    except OSError as exc:
        log.warning("could not write %s: %s", settings.paths.hot_snapshot, exc.strerror or exc)
    _rewrite_published(db, settings, "narrative", narrative.write_narrative)
    _rewrite_published(db, settings, "boot_context", boot.write_boot_context)


def _rewrite_published(db: Database, settings: Settings, name: str, write) -> None:
    """Write a published file again from the database now; one not yet written stays unwritten."""
    result = write(db, settings) if settings.paths.published[name].is_file() else None
    if result is not None and result.error:
        log.warning(result.error)


# -- duplicates ----------------------------------------------------------------------------------


@dataclass
class Dedupe:
    action: str
    threshold: float
    groups: list[list[dict]]  # each newest first: the fact kept, then its duplicates

    def as_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        if not self.groups:
            return [f"no duplicates at similarity {self.threshold:g} or more"]
        extra = sum(len(g) - 1 for g in self.groups)
        head = {
            "report": f"{len(self.groups)} group(s) of duplicates at similarity {self.threshold:g} or more "
            "(merge or delete_older keeps the first of each):",
            "merge": f"merged {extra} duplicate(s) into the newest of their group:",
            "delete_older": f"superseded {extra} older duplicate(s) by the newest of their group:",
        }[self.action]
        out = [head]
        for kept, *others in self.groups:
            out.append(f"  {fact_line(kept)}")
            out += [f"    {fact_line(f)}" for f in others]
        return out


def _duplicate_groups(
    db: Database, settings: Settings, threshold: float, categories: list[str] | None
) -> list[list[dict]]:
    """Active facts whose vectors are at least `threshold` alike, grouped (a chain of pairs is one
    group), newest first; with categories, only facts in any of them."""
    vectors = vector_store(settings.paths.lance)
    sync_facts(db, vectors, embedder_for(settings), settings)  # every active fact, in its current state
    rows, matrix = vectors.active_fact_vectors()
    known = {f["id"]: f for f in db.run(facts.with_categories, [r["id"] for r in rows])}
    chosen = [
        i
        for i, r in enumerate(rows)
        if r["id"] in known
        and known[r["id"]]["status"] == "active"
        and (categories is None or set(known[r["id"]]["categories"]) & set(categories))
    ]
    ids = [rows[i]["id"] for i in chosen]
    parent = list(range(len(ids)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b, _ in similar_pairs(matrix[chosen], threshold):
        parent[root(a)] = root(b)
    grouped: dict[int, list[dict]] = defaultdict(list)
    for i, fact_id in enumerate(ids):
        grouped[root(i)].append(known[fact_id])
    groups = [
        sorted(g, key=lambda f: (f["stated_at"], f["id"]), reverse=True)
        for g in grouped.values()
        if len(g) > 1
    ]
    return sorted(groups, key=lambda g: g[0]["id"])


def dedupe(
    db: Database,
    settings: Settings,
    caller: Caller,
    *,
    action: str = "report",
    threshold: float | None = None,
    categories=None,
) -> Dedupe:
    """Find facts that say the same (seed 002's cortex_dedupe). `report` lists the groups; `merge`
    keeps the newest of each, which takes every source, the hit counts, the highest importance and
    all categories of the others; `delete_older` keeps the newest alone. Either way the others are
    superseded, never deleted, and their turns stay recallable."""
    if action not in DEDUPE_ACTIONS:
        raise ControlError(f"action must be one of {', '.join(DEDUPE_ACTIONS)}")
    similarity = DEDUPE_THRESHOLD if threshold is None else threshold
    if isinstance(similarity, bool) or not isinstance(similarity, int | float):
        raise ControlError("the threshold must be a number")
    if not MIN_DEDUPE_THRESHOLD <= similarity <= 1:
        raise ControlError(f"the threshold must be from {MIN_DEDUPE_THRESHOLD:g} to 1")
    scope = None if categories is None else _categories(categories)
    groups = _duplicate_groups(db, settings, float(similarity), scope)
    reason = f"{caller.door}: {action} of duplicates (similarity >= {similarity:g})"

    def apply(con) -> None:
        for kept, *others in groups:
            for other in others:
                if action == "merge":
                    facts.supersede(con, other["id"], kept["id"], reason)
                else:
                    facts.drop_duplicate(con, other["id"], kept["id"], reason)
            if action == "merge":
                rating = max(f["importance"] for f in (kept, *others))
                every = list(dict.fromkeys(c for f in (kept, *others) for c in f["categories"]))
                facts.update(con, kept["id"], rating, every, reason)

    if groups and action != "report":
        db.run(apply)
        _keep_in_step(db, settings)
        publish_now(db, settings)
        ids = [f["id"] for g in groups for f in g]
        fresh = {f["id"]: f for f in db.run(facts.with_categories, ids)}
        groups = [[fresh[f["id"]] for f in g] for g in groups]
    return Dedupe(action, float(similarity), [[_shown(f) for f in g] for g in groups])


# -- working memory (pins) -----------------------------------------------------------------------


def _pin_rows(rows: list[dict]) -> list[dict]:
    return [{"position": n, "label": r["label"], "text": r["text"]} for n, r in enumerate(rows, 1)]


def pin_line(pin: dict) -> str:
    return f"{pin['position']}. {('[' + pin['label'] + '] ') if pin['label'] else ''}{pin['text']}"


@dataclass
class Pinned:
    pins: list[dict]
    dropped: list[dict]  # the oldest pins, gone to make room
    already: int | None = None  # the position of the same text, pinned before: nothing changed

    def line(self) -> str:
        if self.already is not None:
            return f"already pinned at position {self.already} ({len(self.pins)}/{PIN_LIMIT})"
        gone = "".join(f"; the oldest dropped out: {p['text']}" for p in self.dropped)
        return f"pinned ({len(self.pins)}/{PIN_LIMIT}){gone}"


def _same_pin(text: str) -> str:
    return collapse_spaces(text).casefold()


def pin(db: Database, settings: Settings, text: str, label: str | None = None) -> Pinned:
    """Pin an item to working memory, always in context; past 10 the oldest drops out (seed 002).
    A text already pinned (case and spacing aside) is not pinned twice: a copy took a slot and
    pushed out a real pin."""
    text, label = _text(text), _label(label)

    def add(con) -> Pinned:
        before = session.pins(con)
        same = [n for n, p in enumerate(before, 1) if _same_pin(p["text"]) == _same_pin(text)]
        if same:
            return Pinned(_pin_rows(before), [], same[0])
        after = session.add_pin(con, text, label)
        kept = {p["id"] for p in after}
        dropped = [{"label": p["label"], "text": p["text"]} for p in before if p["id"] not in kept]
        return Pinned(_pin_rows(after), dropped)

    pinned = db.run(add)
    if pinned.already is None:
        _publish_pins(db, settings)
    return pinned


def unpin(db: Database, settings: Settings, position: int) -> dict:
    """Unpin the item at a 1-based position, as `pins` lists them."""
    if isinstance(position, bool) or not isinstance(position, int):
        raise ControlError("the position must be a whole number")
    removed = db.run(session.remove_pin, position)
    if removed is None:
        raise ControlError(f"no pin at position {position}")
    _publish_pins(db, settings)
    return {"position": position, "label": removed["label"], "text": removed["text"]}


def pins(db: Database) -> list[dict]:
    return _pin_rows(db.run(session.pins))


def clear_pins(db: Database, settings: Settings) -> list[dict]:
    """Unpin everything; returns what was pinned."""
    cleared = _pin_rows(db.run(session.clear_pins))
    _publish_pins(db, settings)
    return cleared


def _publish_pins(db: Database, settings: Settings) -> None:
    """BOOTSTRAP.md lists the pins: a pin changed or unpinned must show there now, as a forget does
    (`publish_now`), not at the next run."""
    _rewrite_published(db, settings, "boot_context", boot.write_boot_context)


# -- views ---------------------------------------------------------------------------------------


def stats(db: Database, settings: Settings) -> dict:
    """How much is in each memory tier (seed 002's cortex_stats)."""
    since = utcnow() - timedelta(hours=RECENT_HOURS)
    vectors = vector_store(settings.paths.lance)
    fact_counts = db.run(facts.counts)
    turns = db.run(session.turn_counts, since)
    return {
        "working_memory": {"pinned": len(db.run(session.pins)), "limit": PIN_LIMIT},
        "short_term": {"hours": RECENT_HOURS, "turns": turns["since"]},
        "facts": {"active": fact_counts["by_status"].get("active", 0), **fact_counts},
        "turns": turns["total"],
        "vectors": {"episodic": vectors.count(EPISODIC), "semantic": vectors.count(SEMANTIC)},
    }


IMPORTANCE_NAMES = {"1": "routine", "2": "useful", "3": "critical"}  # `stats` printed "1 3  2 5"


def stats_lines(found: dict) -> list[str]:
    """`stats` for a person: one line per tier."""

    def spread(counts: dict) -> str:
        return "  ".join(f"{k} {v}" for k, v in counts.items()) or "-"

    f, pinned, short = found["facts"], found["working_memory"], found["short_term"]
    importance = {IMPORTANCE_NAMES.get(k, k): n for k, n in f["by_importance"].items()}
    return [
        f"working memory  {pinned['pinned']}/{pinned['limit']} pinned",
        f"short-term      {short['turns']} turn(s) in the last {short['hours']} h",
        f"facts           {f['active']} active  ({spread(f['by_status'])})",
        f"  tiers         {spread(f['by_tier'])}",
        f"  importance    {spread(importance)}",
        f"  categories    {spread(f['by_category'])}",
        f"turns           {found['turns']}",
        f"vectors         episodic {found['vectors']['episodic']}  semantic {found['vectors']['semantic']}",
    ]


@dataclass
class RecentItem:
    kind: str  # turn | fact
    id: int
    text: str
    at: datetime
    channel: str | None
    importance: float
    categories: list[str]
    score: float
    origin: str | None = None  # a fact's (`op_harvest`: a delegated task's result, not the owner's words)

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "at": self.at.isoformat(timespec="seconds") + "Z",
            "score": round(self.score, 4),
        }

    def line(self, n: int) -> str:
        whose = f" · {DELEGATED_RESULT}" if self.origin == OP_HARVEST else ""
        where = f"{self.kind} {self.id}, {self.channel or '?'}{whose} {self.at:%Y-%m-%d %H:%M}"
        return f"{n}. {self.text}  ({where}, score {self.score:.3f})"


def _keyword_score(terms: frozenset[str], query: str, text: str) -> float:
    """Seed 002's keyword score: the share of the query's words the text holds, plus a bonus when it
    holds the whole query as a phrase."""
    held = len(terms & stemmed(text)) / len(terms)
    phrase = 0.5 if held and len(terms) > 1 and query.lower() in text.lower() else 0.0
    return held + phrase


def recent(
    db: Database,
    settings: Settings,
    query: str | None = None,
    *,
    limit: int = 10,
    categories=None,
    exclude_turns: frozenset[int] = frozenset(),
) -> list[RecentItem]:
    """Short-term memory (seed 002): the owner's turns and the facts of the last 48 hours, scored by
    keyword overlap with the query (when given; what shares none is left out) + 0.5 × recency
    (exp(-age / 48 h)) + 0.4 × importance (1-3 as 0-1) + 0.1 per category asked for that an item has.
    A turn's importance and category are what auto-capture's patterns say (else 1, none); questions,
    the turn being answered, turns a listed fact came from and forgotten facts' turns are left out."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECENT:
        raise ControlError(f"the limit must be from 1 to {MAX_RECENT}")
    scope = None if categories is None else set(_categories(categories))
    query = (query or "").strip()
    terms = stemmed(query) if query else frozenset()
    if query and not terms:
        raise ControlError("the query has no words to match (only short or common ones)")
    now = utcnow()
    since = now - timedelta(hours=RECENT_HOURS)
    recent_facts = db.run(facts.active_since, since)
    hidden = set(db.run(facts.forgotten_sources)) | set(exclude_turns)
    hidden |= {s for f in recent_facts for s in f["sources"]}
    items = [
        RecentItem(
            "fact",
            f["id"],
            f["text"],
            f["stated_at"],
            f["channel"],
            f["importance"],
            list(f["categories"]),
            0,
            f["origin"],
        )
        for f in recent_facts
    ]
    for turn in db.run(session.inbound_since, since, MAX_RECENT_TURNS):
        said = turn["content"]
        if (
            turn["id"] in hidden
            or never_an_answer(said)
            or not settings.is_owner(turn["channel"], turn["sender"])
        ):
            continue
        category, rating = classify(said) or (None, 1)
        kinds = [category] if category else []
        rating = float(rating)  # as a fact's: one type for one field in `cortex recent --json`
        items.append(RecentItem("turn", turn["id"], said, turn["ts"], turn["channel"], rating, kinds, 0))
    scored = []
    for item in items:
        matched = scope & set(item.categories) if scope is not None else set()
        keyword = _keyword_score(terms, query, item.text) if terms else 0.0
        if (scope is not None and not matched) or (terms and not keyword):
            continue
        age_h = max(0.0, (now - item.at).total_seconds() / 3600)
        recency = math.exp(-age_h / RECENT_HOURS)
        item.score = keyword + 0.5 * recency + 0.4 * (item.importance - 1) / 2 + 0.1 * len(matched)
        scored.append(item)
    return sorted(scored, key=lambda i: (-i.score, -i.at.timestamp(), i.id))[:limit]
