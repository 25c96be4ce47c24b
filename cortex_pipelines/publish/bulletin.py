"""The memory bulletin (seed 004): identity, recent events, active goals, decisions and
preferences in about 500 words, read by every turn of the brain and by other agents.

The default is a deterministic typed render of the memory store: per section "N of M", ordered by
importance then recency, every line carrying the ids of the messages it came from. With the
anthropic provider the render can be synthesized into prose, but only when memory changed since
the last bulletin and within the daily token budget; a failure keeps the previous bulletin.
"""

from __future__ import annotations

from collections.abc import Callable

from cortex_pipelines.config import Settings
from cortex_pipelines.llm.base import LLMRequest, LLMResponse, estimate_tokens
from cortex_pipelines.publish.safe import document, one_line
from cortex_pipelines.storage import Database, usage

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


def memory_rows(db: Database) -> list[dict]:
    """Active facts still true (not since updated by the user) in bulletin order. Hit counts are
    left out on purpose: they change on every recall and would rewrite the file (and cool a prompt
    cache) without new knowledge."""
    return db.query_dicts(
        "SELECT id, text, category, importance, sources, stated_at FROM facts WHERE status = 'active' "
        "AND valid_to IS NULL ORDER BY importance DESC, stated_at DESC, id DESC"
    )


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
            f"_Typed from {len(rows)} active memories, as of {as_of:%Y-%m-%d %H:%M} UTC._"
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
    text = document(response.text).strip()
    if not text.startswith("# Memory Bulletin"):
        text = "# Memory Bulletin\n\n" + text
    return text + "\n", response


def within_budget(db: Database, settings: Settings, typed: str) -> bool:
    expected = estimate_tokens(typed) + settings.bulletin_words * 2
    return usage.tokens_today(db, "bulletin") + expected <= settings.bulletin_daily_token_budget
