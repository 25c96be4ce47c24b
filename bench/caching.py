"""Prompt caching: the share of input tokens read from the cache over a 50-turn conversation.

    python -m bench.caching [--turns 50] [--json bench/results/caching.json]

The real brain (context assembly, auto-recall, tools) talks through the real anthropic SDK to the
local Messages server of the tests (tests/support/messages_server.py), which reports cache writes
and reads the way the API does, with Sonnet 4.6's minimum cacheable prefix (2048 tokens). The
instance has a persona, workspace files and a memory bulletin; the owner sends the demo
conversation, cycled to the number of turns, one message every two minutes. Memory changes as it
does live: every 10 turns a new known fact (as extraction adds them), halfway a pin; each change
writes the second cached block again. Three layouts run on
the same conversation in the same process:

cached      this code: persona, workspace files, bulletin, facts and pins first, each block ending
            in a cache breakpoint; then the time, ops, background and recalled memories
no-cache    the same prompt with no cache_control (CORTEX_PROMPT_CACHING=false; the code before)
time-first  breakpoints, but the time line before the stable blocks (the order before): the prefix
            changes every minute
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

MIN_CACHE_TOKENS = 2048  # claude-sonnet-4-6, the default model
STARTED = datetime(2026, 11, 16, 8, 0, tzinfo=UTC)
SOUL = """# SOUL
You are warm, direct and brief. You remember what Maya told you and use it without being asked:
her projects, her clients, her routines and the people in her life. When she asks for something you
cannot do, say so plainly and offer what you can do instead. Never pad an answer; never invent a
fact; when unsure, ask one short question. Prefer plain sentences over lists unless she asks for
a list. Times are in her timezone. Money in euros. Dates as "Tue 18 Nov".
When she is stressed (deadlines, travel, clients), keep it shorter still and offer the one next
step. Celebrate finished work in one line. Do not moralize. Do not repeat her words back to her.
"""
USER = """# USER
Maya Costa, freelance product designer in Lisbon (Graça). Clients mostly remote, two in Berlin.
Works from a cowork desk on Tuesdays and Thursdays, from home otherwise. Runs in the mornings,
training for the Lisbon half marathon in March. Vegetarian. Sister Inês lives in Porto.
Prefers aisle seats, early flights, and short calls. Uses Figma, Linear and a paper notebook.
"""
IDENTITY = """# IDENTITY
Name: Cortex. Role: Maya's personal agent across webchat, telegram and email. Voice: calm, precise,
a little dry. Signs nothing. Speaks English unless Maya writes in Portuguese.
"""


def _conversation(turns: int) -> list[str]:
    from importlib import resources

    lines = resources.files("cortex_pipelines").joinpath("demo/conversation.jsonl").read_text()
    texts = [json.loads(line)["text"] for line in lines.splitlines() if line.strip()]
    return [texts[i % len(texts)] for i in range(turns)]


def _bulletin(texts: list[str]) -> str:
    """A memory bulletin of about 500 words, as the bulletin asset writes one."""
    lines, words = ["# Memory Bulletin", "", "## Recent events"], 0
    for n, text in enumerate(texts, 1):
        if words > 500:
            break
        lines.append(f"- {text} (src {n})")
        words += len(text.split())
    return "\n".join(lines) + "\n"


def _time_first(client_class):
    """The order before this change, with breakpoints added: the time line leads the system prompt,
    the stable blocks follow it (with their breakpoints), then the rest."""

    class TimeFirst(client_class):
        def _system(self, request):
            blocks = super()._system(request)
            now = next(b for b in blocks if b["text"].startswith("Now: "))
            first_line, _, rest = now["text"].partition("\n\n")
            head = {"type": "text", "text": first_line}
            others = [b for b in blocks if b is not now]
            return [head, *others, *([{"type": "text", "text": rest}] if rest else [])]

    return TimeFirst


def run_layout(layout: str, texts: list[str], tmp: Path) -> dict:
    from cortex_pipelines.brain.loop import Brain
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.ingest.inbox import ingest_inbox
    from cortex_pipelines.instance import init_home
    from cortex_pipelines.llm import cost
    from cortex_pipelines.llm.anthropic_client import AnthropicClient
    from cortex_pipelines.storage import Database, facts, usage
    from cortex_pipelines.storage.facts import FactDraft
    from cortex_pipelines.storage.session import add_pin
    from tests.support.messages_server import MessagesServer, text

    def reply(body: dict):
        last = body["messages"][-1]["content"]
        words = (last if isinstance(last, str) else "").split()[5:17]
        return text(f"Noted: {' '.join(words)}.")

    with MessagesServer(responder=reply, min_cache_tokens=MIN_CACHE_TOKENS) as server:
        settings = load_settings(
            tmp / layout,
            llm_provider="anthropic",
            base_url=server.url,
            api_key="bench",
            prompt_caching=layout != "no-cache",
        )
        init_home(settings)
        for name, body in (("SOUL.md", SOUL), ("USER.md", USER), ("IDENTITY.md", IDENTITY)):
            (settings.paths.workspace / name).write_text(body)
        settings.paths.memory_bulletin.write_text(_bulletin(texts))
        db = Database(settings.paths.db)
        client_class = _time_first(AnthropicClient) if layout == "time-first" else AnthropicClient
        client = client_class(
            settings.model, "bench", server.url, settings.llm_timeout_s, 0, settings.prompt_caching
        )
        folder = settings.paths.inbox / "webchat"
        folder.mkdir(parents=True, exist_ok=True)
        for n, body in enumerate(texts):
            at = STARTED + timedelta(minutes=2 * n)
            os.environ["CORTEX_NOW"] = at.isoformat()
            envelope = {"channel": "webchat", "text": body, "sender": "maya", "external_id": f"t{n}"}
            (folder / f"{n:04d}.json").write_text(json.dumps({**envelope, "timestamp": at.isoformat()}))
            ingest_inbox(settings, db)
            if n and n % 10 == 0:
                draft = FactDraft(
                    f"Maya mentioned: {body[:120]}", "fact", 2, (n,), ("webchat",), at.replace(tzinfo=None)
                )
                db.run(facts.insert, draft)
            if n == len(texts) // 2:
                db.run(add_pin, "Helios dashboard review on Friday", "todo")
            Brain(db, settings, client).drain()
        os.environ.pop("CORTEX_NOW", None)
        spend = cost.price(db.run(usage.by_model), settings)
    return {
        "layout": layout,
        "calls": spend.calls,
        "input_tokens": spend.all_input_tokens,
        "cache_read_input_tokens": spend.cache_read_input_tokens,
        "cache_creation_input_tokens": spend.cache_creation_input_tokens,
        "cached_share": round(spend.cached_share, 3),
        "cost_usd": round(spend.cost_usd, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    texts = _conversation(args.turns)
    with tempfile.TemporaryDirectory() as tmp:
        results = [run_layout(layout, texts, Path(tmp)) for layout in ("cached", "no-cache", "time-first")]
    table = Table(
        title=f"Prompt caching over a {args.turns}-turn conversation ({MIN_CACHE_TOKENS}-token minimum)"
    )
    for column in ("layout", "calls", "input tokens", "read from cache", "written to cache", "cached share"):
        table.add_column(column)
    table.add_column("cost (USD, estimate)")
    for r in results:
        table.add_row(
            r["layout"],
            str(r["calls"]),
            str(r["input_tokens"]),
            str(r["cache_read_input_tokens"]),
            str(r["cache_creation_input_tokens"]),
            f"{r['cached_share']:.1%}",
            f"{r['cost_usd']:.4f}",
        )
    Console(width=120).print(table)
    if args.json:
        args.json.write_text(json.dumps({"turns": args.turns, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
