"""Sentence splitting that knows abbreviations: "My therapist is Dr. Kahnwald" is one sentence.

A boundary is end punctuation followed by whitespace, except after a title or Latin abbreviation
(Dr., e.g.), an initial (the "R." of "J. R. R. Tolkien"), or a word that ends sentences only
sometimes (etc., a.m., Jr.) when the next word is not capitalized. Decimals (3.5) never split:
no whitespace follows their point.
"""

from __future__ import annotations

import re

# Never the end of a sentence: what follows belongs to them (lowercase, without the final period).
_NEVER = frozenset(
    "dr mr mrs ms mx prof st mt rev sgt capt col gen lt hon e.g i.e cf vs approx z.b d.h bzw ca vgl".split()
)
# The end of a sentence only when the next word starts with a capital letter; dotted ones such as
# "U.S." count too.
_SOMETIMES = frozenset("etc jr sr a.m p.m inc ltd co usw".split())
_DOTTED = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")
_BOUNDARY = re.compile(r"(?<=[.!?])\s+")
_LINES = re.compile(r"\n+")
_LAST_WORD = re.compile(r"[^\s(\[\"“'‘]+$")


def _ends_sentence(before: str, after: str) -> bool:
    if not before.endswith("."):
        return True
    word = _LAST_WORD.search(before)
    raw = word.group(0).rstrip(".") if word else ""
    token = raw.lower()
    if token in _NEVER or (len(raw) == 1 and raw.isupper()):  # a title, or an initial
        return False
    if token in _SOMETIMES or _DOTTED.fullmatch(token):
        return after[:1].isupper()
    return True


def split_sentences(text: str, at_newlines: bool = False) -> list[str]:
    """The sentences of `text`, stripped, empty ones dropped; `at_newlines` also splits at line ends."""
    out: list[str] = []
    for block in _LINES.split(text) if at_newlines else [text]:
        start = 0
        for gap in _BOUNDARY.finditer(block):
            if _ends_sentence(block[start : gap.start()], block[gap.end() :]):
                out.append(block[start : gap.start()])
                start = gap.end()
        out.append(block[start:])
    return [s.strip() for s in out if s.strip()]
