"""The conversation's mood (seed 003, section 4.2): the tone of the user's latest cue."""

from __future__ import annotations

import re

from cortex_pipelines.publish.signals import rx

NEUTRAL = "neutral"

# Dict order breaks ties between moods matching at the same position.
MOODS: dict[str, re.Pattern[str]] = {
    "frustrated": rx(
        r"\b(?:fuck\w*|shit\w*|damn|wtf|argh+|ugh+|sucks|annoying|frustrat\w*"
        r"|mist|nervig|genervt|schon wieder|zum kotzen|verdammt|schei(?:ß|ss)e)\b"
    ),
    "excited": rx(
        r"\b(?:awesome|amazing|nice|brilliant|boom|sick|geil|krass|perfekt|mega|läuft)\b|\byes!|🎯|🚀|🎉"
    ),
    "tense": rx(
        r"\b(?:careful|risky|urgent|critical|dangerous|watch out"
        r"|vorsicht|heikel|kritisch|dringend|achtung|gefährlich)\b"
    ),
    "productive": rx(
        r"\b(?:done|fixed|works|deployed|shipped|merged|erledigt|fertig|gebaut|gefixt|deployt)\b|✅"
    ),
    "exploratory": rx(
        r"\b(?:what if|idea|ideas|maybe|experiment\w*|wondering"
        r"|was wäre wenn|könnte man|idee|ideen|vielleicht)\b"
    ),
}


def detect_mood(text: str) -> str:
    """The mood whose cue comes last in the text: the latest tone is the current one."""
    mood, last = NEUTRAL, -1
    for name, pattern in MOODS.items():
        for m in pattern.finditer(text):
            if m.start() > last:
                mood, last = name, m.start()
    return mood
