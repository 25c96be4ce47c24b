"""Sentence splitting that knows abbreviations: "My therapist is Dr. Kahnwald" is one sentence.

A boundary is end punctuation followed by whitespace, except after a title or Latin abbreviation
(Dr., e.g.), an initial (the "R." of "J. R. R. Tolkien"), or a word that ends sentences only
sometimes (etc., a.m., Jr.) when the next word is not capitalized. Decimals (3.5) never split:
no whitespace follows their point. `at_newlines` makes every line end a boundary too, for text
where lines are separate statements (chat lines, tracked decisions).
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
_LINE = re.compile(r"[^\n]+")
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


def sentence_spans(text: str, at_newlines: bool = False) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text` without its surrounding whitespace, empty ones
    dropped: offsets for callers that look at what lies around a match."""
    blocks = [m.span() for m in _LINE.finditer(text)] if at_newlines else [(0, len(text))]
    spans: list[tuple[int, int]] = []
    for lo, hi in blocks:
        start = lo
        for gap in _BOUNDARY.finditer(text, lo, hi):
            if _ends_sentence(text[start : gap.start()], text[gap.end() : hi]):
                spans.append((start, gap.start()))
                start = gap.end()
        spans.append((start, hi))
    stripped = []
    for start, end in spans:
        piece = text[start:end]
        if piece.strip():
            start += len(piece) - len(piece.lstrip())
            stripped.append((start, start + len(piece.strip())))
    return stripped


def split_sentences(text: str, at_newlines: bool = False) -> list[str]:
    """The sentences of `text`, stripped, empty ones dropped; `at_newlines` also splits at line ends."""
    return [text[start:end] for start, end in sentence_spans(text, at_newlines)]


# A sentence that asks: it ends with a question mark or opens with a question word or auxiliary.
QUESTION = re.compile(
    r"\?\s*$|^\s*(what|when|where|who|whom|whose|which|how|why|do|does|did|is|are|am|was|were|can|could|"
    r"should|would|will|have|has|may|shall)\b",
    re.I,
)


def is_question(text: str) -> bool:
    """Whether every sentence of a turn ends with a question mark: such a turn is never an answer,
    so recall never offers it as a memory. Only the mark counts here: "May 3rd is my birthday." and
    "Will is my brother." open like questions and are statements."""
    sentences = split_sentences(text)
    return bool(sentences) and all(s.rstrip().endswith("?") for s in sentences)
