"""Pattern observations (seed 004): repeated behaviour noticed across a week of conversation and
saved as first-class memories with their sources.

The week is the seven days up to the newest user turn, so a quiet month does not erase what the
last active week showed. Offline, observations come from counts: a name that comes up on several
days, a place or timezone mentioned on more than one channel, a recurring time of activity. With
an LLM the same evidence is reworded by the extraction model, only when the evidence changed.
Texts are stable (no counts), so a repeated observation reinforces its memory instead of adding one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from zoneinfo import ZoneInfo

from cortex_pipelines.config import Settings
from cortex_pipelines.llm.base import LLMClient, LLMError, LLMRequest
from cortex_pipelines.llm.recorded import complete_recorded
from cortex_pipelines.memory.embedder import Embedder
from cortex_pipelines.memory.pipeline import remember
from cortex_pipelines.memory.vectors import VectorStore
from cortex_pipelines.storage import Database, cursors, session, utcnow
from cortex_pipelines.storage.facts import FactDraft
from cortex_pipelines.turn import Turn

WINDOW = timedelta(days=7)
INPUT_CURSOR = "observations_input"
MIN_TOPIC_DAYS = 3
MIN_ACTIVE_DAYS = 3
MIN_ACTIVE_SHARE = 0.25

_NAME = re.compile(r"(?<![.!?:]\s)(?<!^)\b([A-Z][a-zà-ÿ]+(?:\s[A-Z][a-zà-ÿ]+)?)\b")
_LOWER_WORD = re.compile(r"\b[a-zà-ÿ]+\b")
_PLACE = re.compile(
    r"\b(?:in|from|to|near|around|based in|live in|living in|moving to)\s+"
    r"([A-Z][a-zà-ÿ]+(?:\s[A-Z][a-zà-ÿ]+)?)"
)
_TIMEZONE = re.compile(
    r"\b((?:Africa|America|Asia|Atlantic|Australia|Europe|Pacific|Indian)/[A-Z][A-Za-z_]+)\b"
    r"|\b((?:UTC|GMT)[+-]\d{1,2})\b|\b(CET|CEST|PST|PDT|EST|EDT|BST|JST|AEST)\b"
)
_NOT_NAMES = frozenset(
    "I Im Ive Id Ill The A An And But Or So If When What Who Where Which Why How Can Could Would Should "
    "Do Does Did Is Are Was Were Will Have Has Also Just Quick Please Thanks Thank Nice Good Great Ok Okay "
    "Yes No My Your Our Their This That These Those It Its We You They He She Remember Urgent Call "
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June "
    "July August September October November December Today Tomorrow Yesterday Morning Wir Ich Das Der "
    "Die Und Result".split()
)


@dataclass(frozen=True)
class Observation:
    text: str
    importance: int  # 1-3, as every fact
    sources: tuple[int, ...]
    channels: tuple[str, ...]
    evidence: str  # counts, for metadata and the LLM path


def recent_user_turns(db: Database, settings: Settings) -> list[Turn]:
    """The owner's turns of the last active week: other senders' habits are not the user's."""
    rows = db.run(session.inbound_last_week, ["cron", "router", "admin"])
    return [Turn(i, "user", ch, who, text, ts) for i, ch, who, text, ts in rows if settings.is_owner(ch, who)]


def _names(text: str) -> set[str]:
    return {n for n in _NAME.findall(text) if n.split()[0] not in _NOT_NAMES and len(n) > 2}


def _topics(turns: list[Turn]) -> list[Observation]:
    """Names (capitalized somewhere mid-sentence, so not just a sentence start) by day. A word the
    user also writes in lower case is an ordinary word capitalized after unpunctuated chat ("k Had
    lunch", "ok Let me see"), not a name: two years of history kept coming back to "Had" and "Let".
    A name of several words goes only when every word of it is also written in lower case: "new"
    does not make "New York" a phrase."""
    lower = {w for t in turns for w in _LOWER_WORD.findall(t.content)}
    proper = {n for t in turns for n in _names(t.content) if not all(w.lower() in lower for w in n.split())}
    days: dict[str, set] = defaultdict(set)
    ids: dict[str, list[Turn]] = defaultdict(list)
    for t in turns:
        for name in (n for n in proper if re.search(rf"\b{re.escape(n)}\b", t.content)):
            days[name].add(t.ts.date())
            ids[name].append(t)
    out = []
    for name, seen in sorted(days.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if len(seen) >= MIN_TOPIC_DAYS:
            hits = ids[name]
            questions = sum("?" in t.content for t in hits)
            out.append(
                Observation(
                    f"The user keeps coming back to {name}: it comes up on several days a week.",
                    2,
                    tuple(t.id for t in hits),
                    tuple(sorted({t.channel for t in hits})),
                    f"{name}: {len(hits)} message(s) on {len(seen)} day(s), {questions} question(s)",
                )
            )
    return out


def _places_and_zones(turns: list[Turn]) -> list[Observation]:
    zones: dict[str, list[Turn]] = defaultdict(list)
    for t in turns:
        for match in _TIMEZONE.finditer(t.content):
            zones[next(g for g in match.groups() if g)].append(t)
    places = {p for t in turns for p in _PLACE.findall(t.content) if p.split()[0] not in _NOT_NAMES}
    mentions = {p: [t for t in turns if re.search(rf"\b{re.escape(p)}\b", t.content)] for p in places}
    kinds = [
        (zones, "The user's timezone is probably {}: they mention it on more than one channel.", 3),
        (mentions, "{} matters to the user: it comes up on more than one channel.", 2),
    ]
    out = []
    for found, template, importance in kinds:
        for name, hits in sorted(found.items()):
            channels = tuple(sorted({t.channel for t in hits}))
            if len(channels) >= 2:
                evidence = f"{name}: {len(hits)} mention(s) on {', '.join(channels)}"
                out.append(
                    Observation(
                        template.format(name), importance, tuple(t.id for t in hits), channels, evidence
                    )
                )
    return out


def _activity(turns: list[Turn], tz: str) -> list[Observation]:
    """The two-hour window holding the largest share of the user's messages, if it recurs."""
    if not turns:
        return []
    zone = ZoneInfo(tz)
    local = [(t, t.ts.replace(tzinfo=ZoneInfo("UTC")).astimezone(zone)) for t in turns]

    def share(h: int) -> tuple[int, int, int]:  # ties: the window that starts where activity does
        return (
            sum(lt.hour in (h, (h + 1) % 24) for _, lt in local),
            sum(lt.hour == h for _, lt in local),
            -h,
        )

    best = max(range(24), key=share)
    hits = [(t, lt) for t, lt in local if lt.hour in (best, (best + 1) % 24)]
    days = {lt.date() for _, lt in hits}
    if len(days) < MIN_ACTIVE_DAYS or len(hits) < MIN_ACTIVE_SHARE * len(turns):
        return []
    window = f"{best:02d}:00 and {(best + 2) % 24:02d}:00 ({tz})"
    return [
        Observation(
            f"The user is usually active between {window}.",
            2,
            tuple(t.id for t, _ in hits),
            tuple(sorted({t.channel for t, _ in hits})),
            f"{len(hits)} of {len(turns)} message(s) between {window}, on {len(days)} day(s)",
        )
    ]


def detect(turns: list[Turn], settings: Settings) -> list[Observation]:
    topics = _topics(turns)
    named = {o.evidence.split(":")[0] for o in topics}
    places = [o for o in _places_and_zones(turns) if o.evidence.split(":")[0] not in named]
    return [*topics, *places, *_activity(turns, settings.timezone)]


def input_key(observations: list[Observation]) -> int:
    basis = json.dumps([[o.text, o.evidence] for o in observations], ensure_ascii=False)
    return int(hashlib.sha256(basis.encode()).hexdigest()[:15], 16)


_PROMPT = """You maintain the long-term memory of a personal assistant. Below are patterns counted
in the user's last week of messages. For each, write one short, factual observation about the user
(third person, no counts, no speculation beyond the evidence), or drop it if it says nothing useful.
Answer with a JSON array only: [{"index": 0, "text": "..."}, ...]."""


def reword_with_llm(db: Database, llm: LLMClient, observations: list[Observation]) -> list[Observation]:
    """The extraction model phrases the observations; on any failure the offline texts stand."""
    listing = "\n".join(f"{n}. {o.text} [evidence: {o.evidence}]" for n, o in enumerate(observations))
    request = LLMRequest(
        system=_PROMPT, messages=[{"role": "user", "content": listing}], purpose="observations"
    )
    try:
        response = complete_recorded(db, llm, request, asset="observations")
        items = json.loads(response.text[response.text.index("[") : response.text.rindex("]") + 1])
        kept = []
        for item in items:
            original = observations[int(item["index"])]
            text = " ".join(str(item["text"]).split())[:300]
            if len(text) >= 10:
                kept.append(
                    Observation(
                        text, original.importance, original.sources, original.channels, original.evidence
                    )
                )
        return kept
    except (LLMError, ValueError, KeyError, IndexError, TypeError):
        return observations


@dataclass
class ObservationReport:
    found: list[Observation]
    changed: bool
    new: list[int]
    reinforced: list[int]
    llm_calls: int


def observe(
    db: Database, vectors: VectorStore, embedder: Embedder, settings: Settings, llm: LLMClient | None
) -> ObservationReport:
    """Detect, and when the evidence changed since the last run, (reword and) remember."""
    found = detect(recent_user_turns(db, settings), settings)
    key = input_key(found)
    if not found or key == db.run(cursors.read, INPUT_CURSOR):
        return ObservationReport(found, False, [], [], 0)
    calls = 0
    if llm is not None:
        found, calls = reword_with_llm(db, llm, found), 1
    now = utcnow()
    written = remember(
        db,
        vectors,
        embedder,
        settings,
        [
            FactDraft(o.text, "observation", o.importance, o.sources, o.channels, now, "observation")
            for o in found
        ],
        rebuild_outdated=True,
    )
    db.run(cursors.write, INPUT_CURSOR, key)
    return ObservationReport(found, True, written.new, written.reinforced, calls)
