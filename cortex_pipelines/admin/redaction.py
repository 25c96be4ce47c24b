"""Finding erased text where it was copied to: published files, Dagster previews and logs.

Copies are seldom verbatim. A field is escaped for markdown (`\\|`, `&lt;`), folded onto one line
and cut short with "…"; a timeline line or a table row may name the message only by its id
(`msg 12`, `src 3, 12`). So a line carries erased text when, compared without case, escapes and
runs of whitespace, it holds the start (PREFIX_CHARS) of an erased text of at least MIN_CHARS, or a
provenance note naming an erased turn. Lines are the unit: a preview keeps its other lines.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable

from cortex_pipelines.publish.safe import REDACTED, redact_secrets

MIN_CHARS = 8  # a shorter text ("ok") is found only by its provenance note: as a substring it is everywhere
PREFIX_CHARS = 40  # what survives of a long text cut short for a table cell or a timeline line
ERASED_LINE = "[erased]"
_NOTE = re.compile(r"\b(?:msg|src)\s+(\d+(?:\s*,\s*\d+)*)")
_WORD = re.compile(rb"[a-z0-9]{4,}")


def fold(text: str) -> str:
    """Lower case, markdown and HTML escapes undone, whitespace runs as one space."""
    return " ".join(html.unescape(text).replace("\\", "").casefold().split())


class Redactor:
    def __init__(self, texts: Iterable[str], session_ids: Iterable[int]):
        # A published copy had its secrets redacted ("my bank PIN is [redacted]"), and so had its
        # Dagster previews: that form is a needle too, when enough of it is left besides the marker.
        said = {t for text in texts if text for t in (text, redact_secrets(text))}
        pieces = {p for text in said for p in (text, *text.splitlines())}
        self.needles = sorted(
            {f[:PREFIX_CHARS] for f in map(fold, pieces) if len(f.replace(REDACTED, "").strip()) >= MIN_CHARS}
        )
        self.ids = {int(i) for i in session_ids}
        self._probes = self._probe_words()

    def __bool__(self) -> bool:
        return bool(self.needles or self.ids)

    def _probe_words(self) -> list[bytes] | None:
        """A word of every needle, as raw (JSON-escaped, markdown-escaped) bytes still hold it: to
        skip rows and files cheaply. None when some needle has no such word (non-Latin text)."""
        probes = [b"msg ", b"src "] if self.ids else []
        for needle in self.needles:
            words = _WORD.findall(needle.encode())
            if not words:
                return None
            probes.append(max(words, key=len))
        return sorted(set(probes))

    @property
    def probes(self) -> list[str] | None:
        return None if self._probes is None else [p.decode() for p in self._probes]

    def might_hold(self, data: bytes) -> bool:
        """Whether raw bytes can hold erased text (False is certain, True needs a closer look)."""
        if self._probes is None:
            return True
        lowered = data.lower()
        return any(p in lowered for p in self._probes)

    def hits(self, line: str) -> bool:
        folded = fold(line)
        if any(n in folded for n in self.needles):
            return True
        return any(
            int(i) in self.ids for note in _NOTE.finditer(folded) for i in re.findall(r"\d+", note.group(1))
        )

    def redact(self, text: str) -> tuple[str, int]:
        """The text with every line that carries erased text replaced by ERASED_LINE, and how many."""
        lines = text.split("\n")
        kept = [ERASED_LINE if self.hits(line) else line for line in lines]
        return "\n".join(kept), sum(a != b for a, b in zip(lines, kept, strict=True))

    def drop(self, text: str) -> tuple[str, int]:
        """The text without the lines that carry erased text, and how many went."""
        lines = text.split("\n")
        kept = [line for line in lines if not self.hits(line)]
        return "\n".join(kept), len(lines) - len(kept)

    def redact_serialized(self, value: str) -> tuple[str, int]:
        """A stored value: JSON (a Dagster event, run or tick) is redacted string by string and
        written back as JSON, so it still deserializes; anything else line by line."""
        stripped = value.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                tree = json.loads(value)
            except ValueError:
                return self.redact(value)
            tree, count = self._walk(tree)
            return (json.dumps(tree), count) if count else (value, 0)
        return self.redact(value)

    def _walk(self, node) -> tuple[object, int]:
        if isinstance(node, str):
            return self.redact_serialized(node)
        if isinstance(node, list):
            done = [self._walk(item) for item in node]
            return [item for item, _ in done], sum(n for _, n in done)
        if isinstance(node, dict):
            done = {key: self._walk(item) for key, item in node.items()}
            return {key: item for key, (item, _) in done.items()}, sum(n for _, n in done.values())
        return node, 0
