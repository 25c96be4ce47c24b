"""Conversation threads (seed 003, section 4.1): topics followed across the user's turns, opened by
a topic cue and closed by a closure cue, with the decisions and waits that name them."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from cortex_pipelines.publish.mood import detect_mood
from cortex_pipelines.publish.signals import DEFAULT_LANGUAGES, extract_signals, rx, said, stable_id
from cortex_pipelines.text import collapse_spaces, cut_at_word, normalize, words
from cortex_pipelines.turn import Turn

ThreadStatus = Literal["open", "closed"]
Priority = Literal["critical", "high", "medium", "low"]
PRIORITY_ORDER: dict[str, int] = {"critical": 0, "high": 1, "medium": 2, "low": 3}

_PRIORITY_RULES: tuple[tuple[Priority, re.Pattern[str]], ...] = (
    ("critical", rx(r"\b(?:critical|urgent|asap|emergency|kritisch|dringend|notfall|sofort)\w*")),
    ("high", rx(r"\b(?:deadline|important|high priority|blocker|frist|wichtig)\w*")),
    (
        "low",
        rx(
            r"\b(?:someday|some day|maybe|eventually|low priority|nice to have"
            r"|irgendwann|vielleicht)\b"
        ),
    ),
)
_SUMMARY_CHARS = 200


@dataclass
class Thread:
    """A conversation topic followed across turns; ``sources`` are the turns that touched it."""

    id: str
    title: str
    status: ThreadStatus
    priority: Priority
    summary: str
    decisions: list[str]
    waiting_for: str | None
    mood: str
    last_activity: datetime
    created: datetime
    closed_at: datetime | None
    sources: list[int]


def infer_priority(text: str) -> Priority:
    """Priority of a thread opened by this text: urgency first, then deadlines, then "someday"."""
    for priority, pattern in _PRIORITY_RULES:
        if pattern.search(text):
            return priority
    return "medium"


def matches_thread(thread: Thread, text: str, min_overlap: int = 2) -> bool:
    """Whether ``text`` names the thread: enough of its title words (over two letters, compared
    without case or punctuation) occur in it. A one-word title needs only its word."""
    title_words = {w for w in words(thread.title) if len(w) > 2}
    if not title_words:
        return False
    overlap = len(title_words & set(words(text)))
    return overlap >= min(min_overlap, len(title_words))


def _touch(thread: Thread, turn: Turn, mood: str) -> None:
    thread.last_activity = turn.ts
    thread.mood = mood
    if turn.id not in thread.sources:
        thread.sources.append(turn.id)


def _apply_turn(threads: list[Thread], turn: Turn, languages: Sequence[str]) -> None:
    text = said(turn)
    signals = extract_signals(text, languages)
    mood = detect_mood(text)
    touched: dict[int, Thread] = {}

    for title in signals.topics:
        key = normalize(title)
        same = next((t for t in threads if t.status == "open" and normalize(t.title) == key), None)
        if same is None:
            same = Thread(
                id=stable_id(key, turn.id),
                title=title,
                status="open",
                priority=infer_priority(text),
                summary=cut_at_word(collapse_spaces(text), _SUMMARY_CHARS),
                decisions=[],
                waiting_for=None,
                mood=mood,
                last_activity=turn.ts,
                created=turn.ts,
                closed_at=None,
                sources=[],
            )
            threads.append(same)
        touched[id(same)] = same

    for thread in (t for t in threads if t.status == "open"):
        for excerpt in signals.decisions:
            if matches_thread(thread, excerpt) and excerpt not in thread.decisions:
                thread.decisions.append(excerpt)
                touched[id(thread)] = thread
        if signals.waits and matches_thread(thread, text):
            thread.waiting_for = signals.waits[-1]
            touched[id(thread)] = thread
        if signals.closures and matches_thread(thread, text):
            thread.status, thread.closed_at, thread.waiting_for = "closed", turn.ts, None
            touched[id(thread)] = thread

    for thread in touched.values():
        _touch(thread, turn, mood)


def _cap(threads: list[Thread], max_threads: int) -> list[Thread]:
    """Drop the oldest closed threads first, then open ones, lowest priority and oldest first."""
    excess = len(threads) - max_threads
    if excess <= 0:
        return threads

    def drop_order(n: int) -> tuple[int, int, datetime]:
        t = threads[n]
        if t.status == "closed":
            return 0, 0, t.closed_at or t.last_activity
        return 1, -PRIORITY_ORDER[t.priority], t.last_activity

    dropped = set(sorted(range(len(threads)), key=drop_order)[:excess])
    return [t for n, t in enumerate(threads) if n not in dropped]


def update_threads(
    threads: list[Thread],
    turns: Sequence[Turn],
    now: datetime,
    prune_days: int = 7,
    max_threads: int = 50,
    *,
    languages: Sequence[str] = DEFAULT_LANGUAGES,
) -> list[Thread]:
    """Fold ``turns`` (in order) into copies of ``threads``: topics open threads, decisions and
    waits attach to matching open threads, closure cues close them. Then closed threads older
    than ``prune_days`` go, and the list is capped at ``max_threads``. Ids depend only on the
    title and the opening turn, so replaying the same turns gives the same threads."""
    result = copy.deepcopy(list(threads))
    for turn in turns:
        _apply_turn(result, turn, languages)
    horizon = now - timedelta(days=prune_days)
    kept = [t for t in result if t.status == "open" or (t.closed_at or t.last_activity) >= horizon]
    return _cap(kept, max_threads)
