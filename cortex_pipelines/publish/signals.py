"""What one turn says about threads (seed 003, sections 4.1 and 4.2): decision cues, closures,
waits and topics, found by per-language pattern tables.

Plain regex heuristics over the user's own words, no model and no I/O, so the same turns always
give the same threads and decisions, with the same ids. Patterns are grouped per language in
``LANGUAGES``; adding a language means adding one ``PatternSet``. Every pattern is anchored on
word boundaries: the seed's bare ``done|works`` also fired inside "abandoned" or "networks".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cortex_pipelines.publish.safe import redact_secrets
from cortex_pipelines.text import collapse_spaces, normalize, own_text, sentence_spans, words
from cortex_pipelines.turn import Turn

DEFAULT_LANGUAGES = ("en", "de")


def rx(pattern: str) -> re.Pattern[str]:
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
            rx(_NOT_EN + r"\b(?:decided|agreed|settled on)\b"),
            rx(r"\b(?:we['’]ll|we will|we['’]re going to|let['’]?s|let us|i['’]ll|i will) go with\b"),
            rx(r"\bwe(?:['’]re| are) going with\b"),
            rx(r"\blet['’]?s do\b"),
            rx(r"\bthe plan is\b"),
            rx(r"\bdecision\s*(?::|is\b|was\b)"),
            rx(r"\bapproach:"),
        ),
        close=(
            rx(
                _NOT_EN + r"(?<!\balmost )(?<!\bnearly )"
                r"\b(?:done|fixed|solved|resolved|closed|works|shipped|merged)\b"
            ),
            rx(r"✅"),
        ),
        wait=(
            rx(r"\bwaiting (?:for|on)\s+" + _WHAT),
            rx(r"\bblocked (?:by|on)\s+" + _WHAT),
            rx(r"\bdepends on\s+" + _WHAT),
            rx(r"\bneed(?:s|ed)?\s+(?:to\s+)?(?P<what>[^.!?;,\n]{2,60}?)\s+first\b"),
        ),
        topic=(
            rx(r"\b(?:back to|now about|regarding|moving on to|turning to|let['’]?s talk about)\s+" + _TITLE),
            rx(r"\babout the\s+" + _SHORT_TITLE + r"\s+project\b"),
            rx(r"\b(?P<title>\w[\w-]*(?:[ \t]+\w[\w-]*)?)\s+update\s*:"),
            rx(r"\bre:\s*" + _TITLE),
        ),
    ),
    "de": PatternSet(
        decision=(
            rx(_NOT_DE + r"\b(?:beschlossen|entschieden|festgelegt|geeinigt)\b"),
            rx(r"\b(?:machen wir|wir machen|der plan ist)\b"),
            rx(r"\b(?:ansatz|entscheidung)\s*:"),
        ),
        close=(
            rx(
                _NOT_DE + r"(?<!\bnoch )(?<!\bfast )"
                r"\b(?:erledigt|gefixt|gelöst|behoben|fertig|abgeschlossen)\b"
            ),
            rx(r"\bfunktioniert\b(?!\s+(?:noch\s+)?nicht\b)"),
        ),
        wait=(
            rx(r"\bwarte(?:n|t)?\s+(?:noch\s+)?auf\s+" + _WHAT),
            rx(r"\bblockiert\s+(?:durch|von)\s+" + _WHAT),
            rx(r"\bbrauche(?:n)?\s+(?:noch\s+)?erst\s+" + _WHAT),
            rx(r"\bbrauche(?:n)?\s+(?P<what>[^.!?;,\n]{2,60}?)\s+erst\b"),
        ),
        topic=(
            rx(r"\b(?:zurück zu[mr]?|jetzt zu[mr]?|bezüglich|wegen|zum thema)\s+" + _TITLE),
            rx(r"\b(?:bzgl\.?|thema:)\s*" + _TITLE),
        ),
    ),
}

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
_CLOSERS = "\"')]”’»"  # after a sentence's end mark: 'is it done?"' is still a question
_SPACE = re.compile(r"\s+")
_LAST_GAP = re.compile(r"\s+\S*\Z")
_BEFORE, _AFTER = 50, 100


@dataclass
class Signals:
    """What one text says about threads: decision excerpts, whether something was closed, what is
    awaited, and which topics it opens."""

    decisions: list[str]
    closures: bool
    waits: list[str]
    topics: list[str]


def said(turn: Turn) -> str:
    """What a turn says for tracking: quotes dropped, and credentials redacted while whole, since
    summaries and excerpts are cut and kept in DuckDB, where a cut token would be a leaked prefix."""
    return redact_secrets(own_text(turn.content))


def stable_id(*parts: object) -> str:
    """An id that depends only on `parts`, so replaying the same turns gives the same ids."""
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]


def merged(languages: Iterable[str]) -> PatternSet:
    """The pattern tables of ``languages`` as one."""
    sets = [LANGUAGES[lang] for lang in languages]
    return PatternSet(
        decision=tuple(p for s in sets for p in s.decision),
        close=tuple(p for s in sets for p in s.close),
        wait=tuple(p for s in sets for p in s.wait),
        topic=tuple(p for s in sets for p in s.topic),
    )


def sentence_at(text: str, pos: int) -> tuple[int, int]:
    """The sentence (a line end ends one too) that holds `pos`, by the shared splitter: "Dr." and
    "3.5" end nothing."""
    return next(((s, e) for s, e in sentence_spans(text, at_newlines=True) if e >= pos), (pos, pos))


def _in_question(text: str, pos: int) -> bool:
    """A cue inside a question ("is it done?") asks rather than states."""
    start, end = sentence_at(text, pos)
    return text[start:end].rstrip(_CLOSERS).endswith("?")


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


def decision_spans(text: str, patterns: Sequence[re.Pattern[str]]) -> list[tuple[int, int, int]]:
    """(window start, window end, cue start) per stated decision; cues that fall inside an earlier
    window belong to that decision."""
    cues = sorted((m.start(), m.end()) for p in patterns for m in p.finditer(text))
    spans: list[tuple[int, int, int]] = []
    for start, end in cues:
        if _in_question(text, end) or (spans and start < spans[-1][1]):
            continue
        spans.append((*_window(text, start, end), start))
    return spans


def _clean_title(raw: str) -> str:
    title_words = raw.split()
    while title_words and title_words[0].casefold() in _TITLE_FILLER:
        title_words.pop(0)
    for n, word in enumerate(title_words):
        if word.casefold() in _TITLE_STOP:
            title_words = title_words[:n]
            break
    title = " ".join(title_words[:_MAX_TITLE_WORDS])
    return title if any(len(w) > 2 for w in words(title)) else ""


def _topics(text: str, patterns: Sequence[re.Pattern[str]]) -> list[str]:
    found = sorted((m.start(), _clean_title(m.group("title"))) for p in patterns for m in p.finditer(text))
    topics: list[str] = []
    seen: set[str] = set()
    for _, title in found:
        key = normalize(title)
        if title and key not in seen:
            seen.add(key)
            topics.append(title)
    return topics


def extract_signals(text: str, languages: Sequence[str] = DEFAULT_LANGUAGES) -> Signals:
    """Run the pattern tables of ``languages`` over one text."""
    patterns = merged(languages)
    closures = any(not _in_question(text, m.end()) for p in patterns.close for m in p.finditer(text))
    waits = [
        what
        for _, what in sorted(
            (m.start(), collapse_spaces(m.group("what"))) for p in patterns.wait for m in p.finditer(text)
        )
    ]
    return Signals(
        decisions=[collapse_spaces(text[lo:hi]) for lo, hi, _ in decision_spans(text, patterns.decision)],
        closures=closures,
        waits=list(dict.fromkeys(waits)),
        topics=_topics(text, patterns.topic),
    )
