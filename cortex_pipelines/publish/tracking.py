"""Conversation intelligence (seed 003, sections 4.1 and 4.2): threads, decisions, mood.

Plain regex heuristics over the user's own words, no model and no I/O, so the same turns always
give the same threads and decisions, with the same ids. Patterns are grouped per language in
``LANGUAGES``; adding a language means adding one ``PatternSet``. Every pattern is anchored on
word boundaries: the seed's bare ``done|works`` also fired inside "abandoned" or "networks".
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from cortex_pipelines.memory.sentences import sentence_spans
from cortex_pipelines.publish.safe import redact_secrets

ThreadStatus = Literal["open", "closed"]
Priority = Literal["critical", "high", "medium", "low"]
PRIORITY_ORDER: dict[str, int] = {"critical": 0, "high": 1, "medium": 2, "low": 3}
NEUTRAL = "neutral"
DEFAULT_LANGUAGES = ("en", "de")


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


@dataclass(frozen=True)
class PatternSet:
    """One language's signal patterns. Wait patterns capture what is awaited as ``what``, topic
    patterns the subject as ``title``."""

    decision: tuple[re.Pattern[str], ...]
    close: tuple[re.Pattern[str], ...]
    wait: tuple[re.Pattern[str], ...]
    topic: tuple[re.Pattern[str], ...]


# Negations are fixed-width lookbehinds: "not decided" and "isn't done" are not signals.
_NOT_EN = r"(?<!\bnot )(?<!n't )(?<!n’t )(?<!\bnot yet )(?<!\bnever )"
_NOT_DE = r"(?<!\bnicht )(?<!\bnie )(?<!\bkaum )"
_WHAT = r"(?P<what>[^.!?;,\n]{2,80})"
_TITLE = r"(?P<title>\w[\w'’-]*(?:[ \t]+\w[\w'’-]*){0,5})"
_SHORT_TITLE = r"(?P<title>\w[\w-]*(?:[ \t]+\w[\w-]*){0,2})"

LANGUAGES: dict[str, PatternSet] = {
    "en": PatternSet(
        decision=(
            _rx(_NOT_EN + r"\b(?:decided|agreed|settled on)\b"),
            _rx(r"\b(?:we['’]ll|we will|we['’]re going to|let['’]?s|let us|i['’]ll|i will) go with\b"),
            _rx(r"\bwe(?:['’]re| are) going with\b"),
            _rx(r"\blet['’]?s do\b"),
            _rx(r"\bthe plan is\b"),
            _rx(r"\bdecision\s*(?::|is\b|was\b)"),
            _rx(r"\bapproach:"),
        ),
        close=(
            _rx(
                _NOT_EN + r"(?<!\balmost )(?<!\bnearly )"
                r"\b(?:done|fixed|solved|resolved|closed|works|shipped|merged)\b"
            ),
            _rx(r"✅"),
        ),
        wait=(
            _rx(r"\bwaiting (?:for|on)\s+" + _WHAT),
            _rx(r"\bblocked (?:by|on)\s+" + _WHAT),
            _rx(r"\bdepends on\s+" + _WHAT),
            _rx(r"\bneed(?:s|ed)?\s+(?:to\s+)?(?P<what>[^.!?;,\n]{2,60}?)\s+first\b"),
        ),
        topic=(
            _rx(
                r"\b(?:back to|now about|regarding|moving on to|turning to|let['’]?s talk about)\s+" + _TITLE
            ),
            _rx(r"\babout the\s+" + _SHORT_TITLE + r"\s+project\b"),
            _rx(r"\b(?P<title>\w[\w-]*(?:[ \t]+\w[\w-]*)?)\s+update\s*:"),
            _rx(r"\bre:\s*" + _TITLE),
        ),
    ),
    "de": PatternSet(
        decision=(
            _rx(_NOT_DE + r"\b(?:beschlossen|entschieden|festgelegt|geeinigt)\b"),
            _rx(r"\b(?:machen wir|wir machen|der plan ist)\b"),
            _rx(r"\b(?:ansatz|entscheidung)\s*:"),
        ),
        close=(
            _rx(
                _NOT_DE + r"(?<!\bnoch )(?<!\bfast )"
                r"\b(?:erledigt|gefixt|gelöst|behoben|fertig|abgeschlossen)\b"
            ),
            _rx(r"\bfunktioniert\b(?!\s+(?:noch\s+)?nicht\b)"),
        ),
        wait=(
            _rx(r"\bwarte(?:n|t)?\s+(?:noch\s+)?auf\s+" + _WHAT),
            _rx(r"\bblockiert\s+(?:durch|von)\s+" + _WHAT),
            _rx(r"\bbrauche(?:n)?\s+(?:noch\s+)?erst\s+" + _WHAT),
            _rx(r"\bbrauche(?:n)?\s+(?P<what>[^.!?;,\n]{2,60}?)\s+erst\b"),
        ),
        topic=(
            _rx(r"\b(?:zurück zu[mr]?|jetzt zu[mr]?|bezüglich|wegen|zum thema)\s+" + _TITLE),
            _rx(r"\b(?:bzgl\.?|thema:)\s*" + _TITLE),
        ),
    ),
}

# Dict order breaks ties between moods matching at the same position.
MOODS: dict[str, re.Pattern[str]] = {
    "frustrated": _rx(
        r"\b(?:fuck\w*|shit\w*|damn|wtf|argh+|ugh+|sucks|annoying|frustrat\w*"
        r"|mist|nervig|genervt|schon wieder|zum kotzen|verdammt|schei(?:ß|ss)e)\b"
    ),
    "excited": _rx(
        r"\b(?:awesome|amazing|nice|brilliant|boom|sick|geil|krass|perfekt|mega|läuft)\b|\byes!|🎯|🚀|🎉"
    ),
    "tense": _rx(
        r"\b(?:careful|risky|urgent|critical|dangerous|watch out"
        r"|vorsicht|heikel|kritisch|dringend|achtung|gefährlich)\b"
    ),
    "productive": _rx(
        r"\b(?:done|fixed|works|deployed|shipped|merged|erledigt|fertig|gebaut|gefixt|deployt)\b|✅"
    ),
    "exploratory": _rx(
        r"\b(?:what if|idea|ideas|maybe|experiment\w*|wondering"
        r"|was wäre wenn|könnte man|idee|ideen|vielleicht)\b"
    ),
}

HIGH_IMPACT_KEYWORDS: tuple[str, ...] = tuple(
    """
    architecture architektur security sicherheit migration delete löschen production produktion
    deploy breaking major critical kritisch strategy strategie budget contract vertrag
    """.split()
)
# A keyword counts with its usual inflections ("deleted", "deployment", "Vertrags"), not inside
# longer words ("majority").
_HIGH_IMPACT = _rx(
    r"\b(?:" + "|".join(map(re.escape, HIGH_IMPACT_KEYWORDS)) + r")(?:s|es|e|d|ed|ing|ment|ments|en|n)?\b"
)
_URGENT = _rx(r"\b(?:critical|urgent|kritisch|dringend)\w*")
_PRIORITY_RULES: tuple[tuple[Priority, re.Pattern[str]], ...] = (
    ("critical", _rx(r"\b(?:critical|urgent|asap|emergency|kritisch|dringend|notfall|sofort)\w*")),
    ("high", _rx(r"\b(?:deadline|important|high priority|blocker|frist|wichtig)\w*")),
    (
        "low",
        _rx(
            r"\b(?:someday|some day|maybe|eventually|low priority|nice to have"
            r"|irgendwann|vielleicht)\b"
        ),
    ),
)

# Titles lose leading articles and fillers ("the", "quick", "der") and end before the first word
# that starts a new clause ("and", "is", "weil"), so "back to the auth migration and then lunch"
# and "re: auth migration" name the same thread.
_TITLE_FILLER = frozenset(
    """
    the a an our my your this that quick short brief small little new der die das den dem des
    ein eine einen einem einer unser unsere unseren unserem mein meine meinen meinem kurzes
    kurzer kleines
    """.split()
)
_TITLE_STOP = frozenset(
    """
    and or but then because since so while when if before after is are was were has have had
    will would should can could need needs now again today please first for with to in on at und
    oder aber dann weil denn wenn ist sind war hat haben wird werden muss müssen soll sollten
    kann können jetzt heute bitte noch mal für mit zu im am
    """.split()
)
_MAX_TITLE_WORDS = 4
_RATIONALE = _rx(r"\b(?:because|since|so that|due to|given that|weil|denn|damit|aufgrund)\b")
_CLOSERS = "\"')]”’»"  # after a sentence's end mark: 'is it done?"' is still a question
_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")
_LAST_GAP = re.compile(r"\s+\S*\Z")
_BEFORE, _AFTER = 50, 100
_SUMMARY_CHARS, _WHY_CHARS = 200, 300


@dataclass
class TurnIn:
    """One session turn as the trackers see it."""

    id: int
    role: str
    channel: str
    sender: str | None
    text: str
    ts: datetime


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


@dataclass(frozen=True)
class Decision:
    """A decision announced in a turn: ``what`` is the excerpt around the cue, ``why`` its
    rationale or the rest of the turn."""

    id: str
    what: str
    why: str
    impact: str
    who: str
    decided_at: datetime
    source: int
    channel: str


@dataclass
class Signals:
    """What one text says about threads: decision excerpts, whether something was closed, what is
    awaited, and which topics it opens."""

    decisions: list[str]
    closures: bool
    waits: list[str]
    topics: list[str]


def strip_quotes(text: str) -> str:
    """Drop fenced code blocks and ``>`` quoted lines: pasted or quoted text is not the user
    deciding, closing or waiting on anything. An unclosed fence drops the rest of the text."""
    kept: list[str] = []
    fenced = False
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and not stripped.startswith(">"):
            kept.append(line)
    return "\n".join(kept)


def _said(turn: TurnIn) -> str:
    """What a turn says for tracking: quotes dropped, and credentials redacted while whole, since
    summaries and excerpts are cut and kept in DuckDB, where a cut token would be a leaked prefix."""
    return redact_secrets(strip_quotes(turn.text))


def _collapse(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _normalize(text: str) -> str:
    return " ".join(_words(text))


def _digest(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]


def _merged(languages: Iterable[str]) -> PatternSet:
    sets = [LANGUAGES[lang] for lang in languages]
    return PatternSet(
        decision=tuple(p for s in sets for p in s.decision),
        close=tuple(p for s in sets for p in s.close),
        wait=tuple(p for s in sets for p in s.wait),
        topic=tuple(p for s in sets for p in s.topic),
    )


def _sentence_at(text: str, pos: int) -> tuple[int, int]:
    """The sentence (a line end ends one too) that holds `pos`, by the shared splitter: "Dr." and
    "3.5" end nothing."""
    return next(((s, e) for s, e in sentence_spans(text, at_newlines=True) if e >= pos), (pos, pos))


def _in_question(text: str, pos: int) -> bool:
    """A cue inside a question ("is it done?") asks rather than states."""
    start, end = _sentence_at(text, pos)
    return text[start:end].rstrip(_CLOSERS).endswith("?")


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit]


def _window(text: str, start: int, end: int) -> tuple[int, int]:
    """About 50 characters before and 100 after a match, widened or narrowed to whole words."""
    lo, hi = max(0, start - _BEFORE), min(len(text), end + _AFTER)
    if lo > 0 and not text[lo - 1].isspace():
        gap = _SPACE.search(text, lo, start)
        lo = gap.end() if gap else start
    if hi < len(text) and not text[hi].isspace():
        gap = _LAST_GAP.search(text, end, hi)
        hi = gap.start() if gap else end
    return lo, hi


def _decision_spans(text: str, patterns: Sequence[re.Pattern[str]]) -> list[tuple[int, int, int]]:
    """(window start, window end, cue start) per stated decision; cues that fall inside an earlier
    window belong to that decision."""
    cues = sorted((m.start(), m.end()) for p in patterns for m in p.finditer(text))
    spans: list[tuple[int, int, int]] = []
    for start, end in cues:
        if _in_question(text, end) or (spans and start < spans[-1][1]):
            continue
        spans.append((*_window(text, start, end), start))
    return spans


def _rationale(text: str, lo: int, hi: int, cue: int) -> str:
    """The "because ..." clause of the cue's sentence, else the turn's text outside the excerpt."""
    stop = _sentence_at(text, cue)[1]
    reason = _RATIONALE.search(text, cue, stop)
    if reason:
        return _collapse(text[reason.start() : stop]).rstrip(".!?")
    return _truncate(_collapse(text[:lo] + " " + text[hi:]), _WHY_CHARS)


def _clean_title(raw: str) -> str:
    words = raw.split()
    while words and words[0].casefold() in _TITLE_FILLER:
        words.pop(0)
    for n, word in enumerate(words):
        if word.casefold() in _TITLE_STOP:
            words = words[:n]
            break
    title = " ".join(words[:_MAX_TITLE_WORDS])
    return title if any(len(w) > 2 for w in _words(title)) else ""


def _topics(text: str, patterns: Sequence[re.Pattern[str]]) -> list[str]:
    found = sorted((m.start(), _clean_title(m.group("title"))) for p in patterns for m in p.finditer(text))
    topics: list[str] = []
    seen: set[str] = set()
    for _, title in found:
        key = _normalize(title)
        if title and key not in seen:
            seen.add(key)
            topics.append(title)
    return topics


def extract_signals(text: str, languages: Sequence[str] = DEFAULT_LANGUAGES) -> Signals:
    """Run the pattern tables of ``languages`` over one text."""
    patterns = _merged(languages)
    closures = any(not _in_question(text, m.end()) for p in patterns.close for m in p.finditer(text))
    waits = [
        what
        for _, what in sorted(
            (m.start(), _collapse(m.group("what"))) for p in patterns.wait for m in p.finditer(text)
        )
    ]
    return Signals(
        decisions=[_collapse(text[lo:hi]) for lo, hi, _ in _decision_spans(text, patterns.decision)],
        closures=closures,
        waits=list(dict.fromkeys(waits)),
        topics=_topics(text, patterns.topic),
    )


def detect_mood(text: str) -> str:
    """The mood whose cue comes last in the text: the latest tone is the current one."""
    mood, last = NEUTRAL, -1
    for name, pattern in MOODS.items():
        for m in pattern.finditer(text):
            if m.start() > last:
                mood, last = name, m.start()
    return mood


def infer_impact(text: str) -> str:
    """Impact of a decision: high when it names a high-impact keyword, critical when also urgent."""
    if not _HIGH_IMPACT.search(text):
        return "medium"
    return "critical" if _URGENT.search(text) else "high"


def infer_priority(text: str) -> Priority:
    """Priority of a thread opened by this text: urgency first, then deadlines, then "someday"."""
    for priority, pattern in _PRIORITY_RULES:
        if pattern.search(text):
            return priority
    return "medium"


def matches_thread(thread: Thread, text: str, min_overlap: int = 2) -> bool:
    """Whether ``text`` names the thread: enough of its title words (over two letters, compared
    without case or punctuation) occur in it. A one-word title needs only its word."""
    title_words = {w for w in _words(thread.title) if len(w) > 2}
    if not title_words:
        return False
    overlap = len(title_words & set(_words(text)))
    return overlap >= min(min_overlap, len(title_words))


def _touch(thread: Thread, turn: TurnIn, mood: str) -> None:
    thread.last_activity = turn.ts
    thread.mood = mood
    if turn.id not in thread.sources:
        thread.sources.append(turn.id)


def _apply_turn(threads: list[Thread], turn: TurnIn, languages: Sequence[str]) -> None:
    text = _said(turn)
    signals = extract_signals(text, languages)
    mood = detect_mood(text)
    touched: dict[int, Thread] = {}

    for title in signals.topics:
        key = _normalize(title)
        same = next((t for t in threads if t.status == "open" and _normalize(t.title) == key), None)
        if same is None:
            same = Thread(
                id=_digest(key, turn.id),
                title=title,
                status="open",
                priority=infer_priority(text),
                summary=_truncate(_collapse(text), _SUMMARY_CHARS),
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
    turns: Sequence[TurnIn],
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


def extract_decisions(
    turns: Sequence[TurnIn],
    existing: Sequence[Decision],
    dedupe_hours: int = 24,
    *,
    languages: Sequence[str] = DEFAULT_LANGUAGES,
) -> list[Decision]:
    """New decisions stated in ``turns``. One repeated within ``dedupe_hours`` after the same
    excerpt (already known or earlier in this batch) is the same decision and is skipped."""
    patterns = _merged(languages).decision
    window = timedelta(hours=dedupe_hours)
    seen: list[tuple[str, datetime]] = [(_normalize(d.what), d.decided_at) for d in existing]
    found: list[Decision] = []
    for turn in turns:
        text = _said(turn)
        for lo, hi, cue in _decision_spans(text, patterns):
            what = _collapse(text[lo:hi])
            key = _normalize(what)
            if any(k == key and timedelta(0) <= turn.ts - at <= window for k, at in seen):
                continue
            seen.append((key, turn.ts))
            found.append(
                Decision(
                    id=_digest(key, turn.id),
                    what=what,
                    why=_rationale(text, lo, hi, cue),
                    impact=infer_impact(what),
                    who=turn.sender or turn.role,
                    decided_at=turn.ts,
                    source=turn.id,
                    channel=turn.channel,
                )
            )
    return found
