"""The memory bulletin (seed 004): identity, recent events, active goals, decisions and
preferences in about 500 words, read by every turn of the brain and by other agents.

The default is a deterministic typed render of the memory store: per section "N of M", ordered by
importance then recency, every line carrying the ids of the messages it came from. With the
anthropic provider the render can be synthesized into prose, but only when memory changed since
the last bulletin and within the daily token budget; a failure keeps the previous bulletin.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from cortex_pipelines.config import Settings
from cortex_pipelines.llm import cost
from cortex_pipelines.llm.base import LLMClient, LLMError, LLMRequest, LLMResponse, estimate_tokens
from cortex_pipelines.llm.recorded import complete_recorded
from cortex_pipelines.publish.outputs import Published, digest, publish
from cortex_pipelines.publish.safe import document, one_line
from cortex_pipelines.storage import Database, utcnow
from cortex_pipelines.storage.published import BULLETIN, bulletin_facts, published_row, set_published_state

SECTIONS = [
    ("Identity", ("identity",), 6),
    ("Recent events", ("event", "fact", "insight", "observation"), 8),
    ("Active goals", ("goal",), 6),
    ("Decisions", ("decision",), 8),
    ("Preferences", ("preference",), 10),
]
FACT_CHARS = 400  # a fact is a sentence or two; a pasted wall of text is cut
BULLETIN_SYSTEM = """You are the cortex of a personal agent. Rewrite the typed memory below into a \
brief memory bulletin of at most {words} words with the sections Identity, Recent events, Active \
goals, Decisions and Preferences. Focus on high-importance memories, recent activity, ongoing goals \
and core identity facts. Use only what the memory says; never add facts. Start with \
"# Memory Bulletin"."""


def _line(fact: dict) -> str:
    ids = list(fact["sources"])
    shown = ", ".join(str(i) for i in ids[:3]) + (", …" if len(ids) > 3 else "")
    return f"- {one_line(fact['text'], FACT_CHARS)} (src {shown})"


def render_typed(rows: list[dict], max_words: int) -> str:
    grouped = {title: [r for r in rows if r["category"] in cats] for title, cats, _ in SECTIONS}
    caps = {title: cap for title, _, cap in SECTIONS}

    def build() -> str:
        as_of = max((r["stated_at"] for r in rows), default=None)
        out = ["# Memory Bulletin", ""]
        out.append(
            f"_Typed from {len(rows)} active {'memory' if len(rows) == 1 else 'memories'}, "
            f"as of {as_of:%Y-%m-%d %H:%M} UTC._"
            if as_of
            else "_No memories yet._"
        )
        for title, _, _ in SECTIONS:
            items = grouped[title]
            shown = items[: caps[title]]
            out += ["", f"## {title} ({len(shown)} of {len(items)})"]
            out += [_line(f) for f in shown] or ["- nothing yet"]
        return "\n".join(out) + "\n"

    text = build()
    while len(text.split()) > max_words and any(caps[t] > 1 for t in caps):
        biggest = max(caps, key=lambda t: (min(caps[t], len(grouped[t])), caps[t]))
        caps[biggest] = max(1, min(caps[biggest], len(grouped[biggest])) - 1)
        text = build()
    return text


class UnusableBulletin(ValueError):
    """The model answered, but with nothing to publish: the typed render is published instead (a
    refusal, an empty answer and one cut mid-word had replaced the bulletin every prompt reads)."""

    def __init__(self, reason: str, response: LLMResponse):
        super().__init__(reason)
        self.response = response


_WORD = re.compile(r"[^\W\d_]{4,}")


def _unusable(response: LLMResponse, typed: str) -> str | None:
    """Why the model's bulletin cannot stand in for the typed render, or None. A bulletin uses only
    what memory says, so it names some of it: one that shares fewer than three of the typed facts'
    words (all of them, when fewer) is no rewrite of them ("I'm sorry, but I can't help …")."""
    if response.stop_reason == "max_tokens":
        return "it was cut at max_tokens"
    body = response.text.strip().removeprefix("# Memory Bulletin").strip()
    if not body:
        return "it was empty"
    facts = "\n".join(
        line for line in typed.splitlines() if line.startswith("- ") and line != "- nothing yet"
    )
    named = {w.lower() for w in _WORD.findall(facts)}
    shared = named & {w.lower() for w in _WORD.findall(body)}
    if len(shared) < min(3, len(named)):
        return "it names none of the memories"
    return None


def synthesize(complete: Callable[[LLMRequest], LLMResponse], typed: str, settings: Settings):
    """One LLM call (`complete` records it) turning the typed render into prose.
    Returns (markdown, response)."""
    request = LLMRequest(
        system=BULLETIN_SYSTEM.format(words=settings.bulletin_words),
        messages=[{"role": "user", "content": typed}],
        purpose="bulletin",
        max_tokens=min(2000, settings.bulletin_words * 3),
    )
    response = complete(request)
    if (unusable := _unusable(response, typed)) is not None:
        raise UnusableBulletin(unusable, response)
    text = document(response.text).strip()
    if not text.startswith("# Memory Bulletin"):
        text = "# Memory Bulletin\n\n" + text
    return text + "\n", response


def within_budget(db: Database, settings: Settings, typed: str) -> bool:
    expected = estimate_tokens(typed) + settings.bulletin_words * 2
    return cost.within_budget(db, settings, "bulletin", expected)


def refresh(
    db: Database, settings: Settings, llm: LLMClient | None, warn: Callable[[str], None]
) -> Published:
    """Bring the bulletin up to date with memory. Warm-up (seed 004): a cold bulletin is "warming"
    while its first version is made; one whose render or write failed is "degraded", and the
    previous bulletin stays."""
    rows = db.run(bulletin_facts)
    typed = render_typed(rows, settings.bulletin_words)
    # A typed render published without the model (after a forget) has a key of its own, so the
    # next refresh with the model writes prose again.
    author = settings.llm_provider if llm is not None else "typed"
    key = digest([typed, author, settings.extraction_model, settings.bulletin_words])
    path = settings.paths.memory_bulletin
    before = db.run(published_row, BULLETIN)
    if before is None or before["state"] == "cold":
        db.run(set_published_state, BULLETIN, path, "warming")
    tokens = {"llm_calls": 0, "input_tokens": 0, "output_tokens": 0}

    def render() -> str:
        if llm is None:
            return typed
        if not within_budget(db, settings, typed):
            warn("daily bulletin token budget reached: publishing the typed render")
            return typed
        complete = partial(complete_recorded, db, llm, asset="memory_bulletin")
        try:
            text, response = synthesize(complete, typed, settings)
        except UnusableBulletin as unusable:
            text, response = typed, unusable.response
            warn(f"the model's bulletin is unusable ({unusable}): publishing the typed render")
        tokens.update(llm_calls=1, input_tokens=response.input_tokens, output_tokens=response.output_tokens)
        return text

    def still_current(con) -> bool:
        return render_typed(bulletin_facts(con), settings.bulletin_words) == typed

    try:
        result = publish(db, settings, BULLETIN, render, input_key=key, still_current=still_current)
    except LLMError as exc:
        previous = path.read_text() if path.is_file() else ""
        error = f"bulletin generation failed, the previous bulletin stays: {exc}"
        result = Published(BULLETIN, path, previous, changed=False, error=error, render_failed=True)
    if result.stale and llm is not None:
        # Memory changed during the synthesis (a forget, say): the prose may name what is gone.
        warn("memory changed while the bulletin was synthesized: publishing the typed render instead")
        return refresh(db, settings, None, warn)
    if result.error:
        db.run(set_published_state, BULLETIN, path, "degraded", result.error)
    warmup = db.run(published_row, BULLETIN)["state"]
    result.details = {"memories": len(rows), "warmup": warmup, **tokens}
    return result


@dataclass
class Freshness:
    current: bool
    state: str
    age_minutes: float  # -1.0 when it was never confirmed


def freshness(db: Database, settings: Settings) -> Freshness:
    """Whether the bulletin is warm and was confirmed current within its refresh interval (plus
    15 minutes of slack, so a run that starts a little late does not flag it)."""
    row = db.run(published_row, BULLETIN)
    limit = timedelta(minutes=settings.bulletin_refresh_minutes + 15)
    age = utcnow() - row["verified_at"] if row and row["verified_at"] else None
    return Freshness(
        current=age is not None and age <= limit and row["state"] == "warm",
        state=row["state"] if row else "cold",
        age_minutes=round(age.total_seconds() / 60, 1) if age else -1.0,
    )
