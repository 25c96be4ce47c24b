"""Fact extraction from what the user said, never from what was injected.

Rule 2 of DESIGN.md: a memory system that extracts from its own boot context, bulletin or recalled
memories grows copies of its own hallucinations. So only user turns are read, quoted and fenced
text is dropped, and a sentence that repeats system-written text (a line of out/*.md or of the
agent's replies) is skipped. Lines that carry a source annotation such as "(msg 12)" or
"(src 3, 7)" are the user's own words quoted with provenance and do not count as system-written;
restating them only reinforces the existing fact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from cortex_pipelines.llm.base import LLMRequest, LLMResponse
from cortex_pipelines.memory.patterns import LEADING_FILLER, classify
from cortex_pipelines.storage.facts import CATEGORIES, FactDraft
from cortex_pipelines.text import (
    forwarded,
    never_an_answer,
    normalize,
    own_text,
    split_sentences,
    stated_part,
)
from cortex_pipelines.turn import Turn

SOURCE_NOTE = re.compile(r"[\(\[][^\)\]]*\b(src|sources?|msg)\b[^\)\]]*[\)\]]", re.I)
_MIN_CHARS, _MAX_CHARS = 12, 400
SKIP_CHANNELS = frozenset({"cron", "router"})  # synthetic prompts and delegated results


class InjectedText:
    """What the system itself wrote, normalized, to recognise it when quoted back."""

    def __init__(self, texts: Iterable[str]):
        lines = set()
        for text in texts:
            for line in text.splitlines():
                if SOURCE_NOTE.search(line):
                    continue  # a quote of the user's own words, with its provenance
                for piece in split_sentences(line):
                    norm = normalize(piece.lstrip("#->*• ").strip())
                    if len(norm) >= _MIN_CHARS:
                        lines.add(norm)
        self._corpus = "\n".join(sorted(lines))
        self._lines = lines

    @classmethod
    def from_outputs(cls, out_dir: Path, extra: Iterable[str] = ()) -> InjectedText:
        texts = list(extra)
        if out_dir.is_dir():
            texts += [p.read_text(encoding="utf-8", errors="replace") for p in sorted(out_dir.glob("*.md"))]
        return cls(texts)

    def contains(self, sentence: str) -> bool:
        """True when the sentence is injected text, or quotes a line of it."""
        norm = normalize(sentence)
        if len(norm) < _MIN_CHARS:
            return False
        if norm in self._lines or norm in self._corpus:
            return True
        return any(line in norm for line in self._lines if len(line) >= 20)


def sentences(text: str) -> list[str]:
    return split_sentences(own_text(text), at_newlines=True)


def clean_fact(sentence: str) -> str:
    text = LEADING_FILLER.sub("", sentence).strip().strip("\"“”'")
    return text[:1].upper() + text[1:] if text else text


def extract_offline(
    turns: list[Turn],
    injected: InjectedText,
    replaced: dict[int, tuple[list[int], str | None, int | None]] | None = None,
) -> list[FactDraft]:
    """Facts from the sentences a capture pattern recognises. `replaced`: the turns that updated
    earlier statements (storage/updates.py `replaced_statements`), which are facts too."""
    drafts = []
    turns = [t for t in turns if not forwarded(t.content)]  # another's words, not the user's
    for turn in turns:
        if turn.channel in SKIP_CHANNELS:
            continue
        for sentence in _statements(turn, injected):
            found = classify(sentence)
            if found is None:
                continue
            text = clean_fact(sentence)
            if len(text) < _MIN_CHARS:
                continue
            category, importance = found
            drafts.append(FactDraft(text, category, importance, (turn.id,), (turn.channel,), turn.ts))
    return drafts + _current_values(turns, injected, replaced or {}, drafts)


def _statements(turn: Turn, injected: InjectedText) -> list[str]:
    """The turn's own sentences that state something (not injected text, not a question such as
    "What's my favourite restaurant?"), and what a question states before it asks ("We moved to
    Bristol, can you update my address?")."""
    said = [stated_part(s) or s for s in sentences(turn.content)]
    return [
        s
        for s in said
        if _MIN_CHARS <= len(s) <= _MAX_CHARS and not injected.contains(s) and not never_an_answer(s)
    ]


def _current_values(
    turns: list[Turn],
    injected: InjectedText,
    replaced: dict[int, tuple[list[int], str | None, int | None]],
    drafts: list[FactDraft],
) -> list[FactDraft]:
    """A statement that updated an earlier one is the current value of what it said, so it is a
    fact even when no capture pattern knows its words ("I got promoted to senior engineer!"), of the
    kind of the fact it replaces (identity, ...): otherwise the floor and the bulletin, which drop
    the outdated fact, would show nothing in its place."""
    kinds = {d.sources[0]: (d.category, d.importance) for d in drafts}
    out = []
    for turn in turns:
        if turn.id not in replaced or turn.id in kinds or turn.channel in SKIP_CHANNELS:
            continue
        old_turns, category, importance = replaced[turn.id]
        in_batch = [kinds[t] for t in old_turns if t in kinds]
        kind = max(in_batch, key=lambda k: k[1]) if in_batch else (category or "fact", importance or 2)
        for sentence in _statements(turn, injected):
            if len(text := clean_fact(sentence)) >= _MIN_CHARS:
                out.append(FactDraft(text, *kind, (turn.id,), (turn.channel,), turn.ts))
    return out


class _LLMFact(BaseModel):
    text: str = Field(min_length=3, max_length=_MAX_CHARS)
    category: str
    importance: int = Field(2, ge=1, le=3)
    source_ids: list[int] = Field(min_length=1)
    supersedes: list[int] = Field(default_factory=list)


EXTRACTION_SYSTEM = """You extract durable memories from a conversation between a user and their \
agent. Return only a JSON array of objects {"text", "category", "importance", "source_ids", \
"supersedes"}:
- text: one self-contained statement about the user or their world, in the user's terms;
- category: one of fact, decision, preference, insight, identity, event, goal;
- importance: 1 routine, 2 useful, 3 critical or identity;
- source_ids: the ids of the turns it comes from (at least one);
- supersedes: the [F…] numbers of known memories it makes no longer true (the user moved, changed \
job, switched provider, ...), else [].
Skip greetings, small talk, questions, requests to forget, and anything already in the known \
memories. Never extract from quoted text or from text the agent wrote. A turn that opens with \
"[Forwarded from NAME]" holds NAME's words that the user passed on: what it says in the first \
person is about NAME, never the user. Return [] when nothing is new."""


def extraction_request(turns: list[Turn], known: list[tuple[int, str]]) -> LLMRequest:
    memory = "\n".join(f"[F{fact_id}] {text}" for fact_id, text in known) or "(none)"
    convo = "\n".join(f"[{t.id}] ({t.channel}) {own_text(t.content)}" for t in turns)
    return LLMRequest(
        system=EXTRACTION_SYSTEM,
        messages=[{"role": "user", "content": f"Known memories:\n{memory}\n\nTurns:\n{convo}"}],
        purpose="extraction",
        max_tokens=1500,
    )


class UnreadableExtraction(ValueError):
    """The model's answer holds no whole JSON list of facts: cut at max_tokens, prose, a refusal.
    Its turns must not count as read (they had been marked extracted with no fact and no word)."""

    def __init__(self, reason: str, response: LLMResponse, cut: bool = False):
        super().__init__(reason)
        self.response = response
        self.cut = cut  # cut at max_tokens: fewer turns a call may fit


def parse_llm_facts(
    raw: str, turns: list[Turn], injected: InjectedText, known_ids: frozenset[int] = frozenset()
) -> list[FactDraft]:
    """Validate the model's JSON; facts without a real source or quoting injected text are dropped,
    and a fact supersedes only known facts it was shown. Raises ValueError when the answer holds no
    JSON list."""
    start, end = raw.find("["), raw.rfind("]")
    if start < 0 or end <= start:
        raise ValueError("the answer holds no JSON list of facts")
    try:
        items = json.loads(raw[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer's JSON does not parse ({exc.msg})") from None
    if not isinstance(items, list):
        raise ValueError("the answer's JSON is no list of facts")
    by_id = {t.id: t for t in turns}
    drafts = []
    for item in items:
        try:
            fact = _LLMFact.model_validate(item)
        except ValidationError:
            continue
        # A question or a request to forget is never a source, whatever the model rewrote it into.
        sources = tuple(
            sorted({i for i in fact.source_ids if i in by_id and not never_an_answer(by_id[i].content)})
        )
        if not sources or injected.contains(fact.text) or never_an_answer(fact.text):
            continue
        category = fact.category if fact.category in CATEGORIES else "fact"
        channels = tuple(sorted({by_id[i].channel for i in sources}))
        drafts.append(
            FactDraft(
                fact.text.strip(),
                category,
                fact.importance,
                sources,
                channels,
                max(by_id[i].ts for i in sources),
                supersedes=tuple(sorted({i for i in fact.supersedes if i in known_ids})),
            )
        )
    return drafts


def extract_with_llm(
    complete: Callable[[LLMRequest], LLMResponse],
    turns: list[Turn],
    known: list[tuple[int, str]],
    injected: InjectedText,
):
    """Returns (drafts, response); `complete` is the recording LLM call; `known` is (id, text) of
    the facts the model may dedupe against or mark as superseded."""
    usable = [t for t in turns if t.channel not in SKIP_CHANNELS]
    if not usable:
        return [], None
    response = complete(extraction_request(usable, known))
    if response.stop_reason == "max_tokens":
        raise UnreadableExtraction("the answer was cut at max_tokens", response, cut=True)
    try:
        return parse_llm_facts(response.text, usable, injected, frozenset(i for i, _ in known)), response
    except ValueError as exc:
        raise UnreadableExtraction(str(exc), response) from None
