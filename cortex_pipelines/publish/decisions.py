"""Decisions announced in the user's turns (seed 003, section 4.2), each with its rationale and
impact, deduplicated within a window so a restated decision is not a new one."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cortex_pipelines.publish.signals import (
    DEFAULT_LANGUAGES,
    decision_spans,
    merged,
    rx,
    said,
    sentence_at,
    stable_id,
)
from cortex_pipelines.text import collapse_spaces, cut_at_word, normalize
from cortex_pipelines.turn import Turn

HIGH_IMPACT_KEYWORDS: tuple[str, ...] = tuple(
    """
    architecture architektur security sicherheit migration delete löschen production produktion
    deploy breaking major critical kritisch strategy strategie budget contract vertrag
    """.split()
)
# A keyword counts with its usual inflections ("deleted", "deployment", "Vertrags"), not inside
# longer words ("majority").
_HIGH_IMPACT = rx(
    r"\b(?:" + "|".join(map(re.escape, HIGH_IMPACT_KEYWORDS)) + r")(?:s|es|e|d|ed|ing|ment|ments|en|n)?\b"
)
_URGENT = rx(r"\b(?:critical|urgent|kritisch|dringend)\w*")
_RATIONALE = rx(r"\b(?:because|since|so that|due to|given that|weil|denn|damit|aufgrund)\b")
_WHY_CHARS = 300


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


def infer_impact(text: str) -> str:
    """Impact of a decision: high when it names a high-impact keyword, critical when also urgent."""
    if not _HIGH_IMPACT.search(text):
        return "medium"
    return "critical" if _URGENT.search(text) else "high"


def _rationale(text: str, lo: int, hi: int, cue: int) -> str:
    """The "because ..." clause of the cue's sentence, else the turn's text outside the excerpt."""
    stop = sentence_at(text, cue)[1]
    reason = _RATIONALE.search(text, cue, stop)
    if reason:
        return collapse_spaces(text[reason.start() : stop]).rstrip(".!?")
    return cut_at_word(collapse_spaces(text[:lo] + " " + text[hi:]), _WHY_CHARS)


def extract_decisions(
    turns: Sequence[Turn],
    existing: Sequence[Decision],
    dedupe_hours: int = 24,
    *,
    languages: Sequence[str] = DEFAULT_LANGUAGES,
) -> list[Decision]:
    """New decisions stated in ``turns``. One repeated within ``dedupe_hours`` after the same
    excerpt (already known or earlier in this batch) is the same decision and is skipped."""
    patterns = merged(languages).decision
    window = timedelta(hours=dedupe_hours)
    seen: list[tuple[str, datetime]] = [(normalize(d.what), d.decided_at) for d in existing]
    found: list[Decision] = []
    for turn in turns:
        text = said(turn)
        for lo, hi, cue in decision_spans(text, patterns):
            what = collapse_spaces(text[lo:hi])
            key = normalize(what)
            if any(k == key and timedelta(0) <= turn.ts - at <= window for k, at in seen):
                continue
            seen.append((key, turn.ts))
            found.append(
                Decision(
                    id=stable_id(key, turn.id),
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
